// The reference worker's filesystem without Landlock (namespace_sandbox.hpp).
#include "libcommon/worker/namespace_sandbox.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "libcommon/child_main.hpp"

namespace ca::worker {

namespace {

constexpr const char* kFlag = "--ca-worker-sandbox";

int sandbox_main();
[[maybe_unused]] const bool kRegistered = register_child_main(kFlag, sandbox_main);

[[noreturn]] void die(const std::string& what) {
  std::string msg = "cuda-agent worker sandbox: " + what + (errno ? std::string(": ") + std::strerror(errno) : "") + "\n";
  (void)!::write(2, msg.data(), msg.size());
  _exit(127);
}

bool write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Enters new mount namespaces (and a user namespace mapping our ids when not root).
bool enter_namespaces(std::string* why) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) == 0) return true;
  }
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
    if (why) *why = std::string("unshare(CLONE_NEWUSER | CLONE_NEWNS): ") + std::strerror(errno);
    return false;
  }
  write_file("/proc/self/setgroups", "deny");
  if (!write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
      !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n")) {
    if (why) *why = std::string("writing the user namespace's id maps: ") + std::strerror(errno);
    return false;
  }
  return true;
}

void make_dirs(const std::string& path) {
  std::string cur;
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      cur = path.substr(0, i);
      ::mkdir(cur.c_str(), 0755);
    }
  }
}

// The flags a bind remount must keep (those the kernel locks in a user namespace).
unsigned long kept_flags(const std::string& path) {
  struct statvfs sv {};
  if (statvfs(path.c_str(), &sv) != 0) return 0;
  unsigned long f = 0;
  if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (sv.f_flag & ST_RDONLY) f |= MS_RDONLY;
  if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// Binds host `src` at root + `dst` (a folder or a file), read-only unless `writable`. A source that
// does not exist is skipped (not every node has /lib32 or /proc/driver/nvidia).
void bind(const std::string& root, const std::string& src, const std::string& dst, bool writable) {
  struct stat st {};
  if (::stat(src.c_str(), &st) != 0) return;
  const std::string target = root + dst;
  if (S_ISDIR(st.st_mode)) {
    make_dirs(target);
  } else {
    make_dirs(target.substr(0, target.rfind('/')));
    int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
  }
  if (mount(src.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) die("bind " + src);
  unsigned long flags = MS_BIND | MS_REMOUNT | kept_flags(src) | MS_NOSUID;
  if (!writable) flags |= MS_RDONLY;
  if (mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) die("remount " + dst);
}

std::vector<std::string> own_cmdline() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      out.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// The tool's private folder is outside the sandbox, so the worker cannot remove it when the tool is
// killed (kill -9 leaves no one else to): a helper forked here, before the namespaces, in the
// worker's process group (ended with it), waits for the tool to be gone, then removes the folder and
// ends the group, as the worker's own reaper does where Landlock confines it instead.
void start_cleaner(const std::string& folder) {
  const pid_t tool = getppid();
  pid_t pid = fork();
  if (pid != 0) return;  // the launcher goes on (a failed fork: no cleaner)
  // Out of the worker's process group: the worker, told its tool is gone, ends its group, and would
  // take the cleaner with it before the folder is removed (seen under load: the folder left behind).
  const pid_t group = getpgrp();
  setpgid(0, 0);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
  for (int fd = 3; fd < 1024; ++fd) ::close(fd);
  while (kill(tool, 0) == 0 || errno == EPERM) usleep(500000);
  std::error_code ec;
  std::filesystem::remove_all(folder, ec);
  kill(-group, SIGKILL);  // what is left of the worker's group
  _exit(0);
}

// argv: [self, --ca-worker-sandbox, ROOT, (ro|rw|dev|clean)=PATH..., --, command...]
int sandbox_main() {
  std::vector<std::string> a = own_cmdline();
  if (a.size() == 3 && a[2] == "--probe") {  // namespace_sandbox_available
    std::string why;
    if (!enter_namespaces(&why)) {
      errno = 0;
      die(why);
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die("making / private");
    return 0;
  }
  if (a.size() < 5) die("bad arguments");
  const std::string root = a[2];
  std::vector<std::pair<std::string, std::string>> binds;  // kind, path
  std::size_t i = 3;
  for (; i < a.size() && a[i] != "--"; ++i) {
    auto eq = a[i].find('=');
    if (eq == std::string::npos) die("bad argument " + a[i]);
    binds.emplace_back(a[i].substr(0, eq), a[i].substr(eq + 1));
  }
  if (i + 1 >= a.size()) die("no command");
  std::vector<std::string> cmd(a.begin() + static_cast<long>(i) + 1, a.end());
  std::string cwd;
  {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) cwd = buf;
  }
  for (const auto& [kind, path] : binds)
    if (kind == "clean") start_cleaner(path);
  std::erase_if(binds, [](const auto& b) { return b.first == "clean"; });
  std::string why;
  if (!enter_namespaces(&why)) {
    errno = 0;
    die(why);
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die("making / private");
  if (mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) die("tmpfs on " + root);
  // Parents before children: a folder bound inside another bound one lands on top of it.
  std::stable_sort(binds.begin(), binds.end(), [](const auto& x, const auto& y) { return x.second.size() < y.second.size(); });
  for (const auto& [kind, path] : binds) bind(root, path, path, kind != "ro");
  // Its own /proc entry as /proc/self (the exec keeps the pid): no other process's, no host root.
  // Its threads' entries writable: cuInit names its threads (/proc/<pid>/task/<tid>/comm) and fails
  // with CUDA_ERROR_OPERATING_SYSTEM (304) when it cannot (seen on the H100: torch saw no CUDA in
  // this sandbox, while with Landlock CUDA starts before the worker confines itself).
  const std::string self = "/proc/" + std::to_string(getpid());
  bind(root, self, "/proc/self", false);
  bind(root, self, self, false);
  bind(root, self + "/task", "/proc/self/task", true);
  bind(root, self + "/task", self + "/task", true);
  make_dirs(root + "/tmp");
  const std::string old = root + "/.old-root";
  make_dirs(old);
  if (syscall(SYS_pivot_root, root.c_str(), old.c_str()) != 0) die("pivot_root");
  if (chdir("/") != 0) die("chdir /");
  if (umount2("/.old-root", MNT_DETACH) != 0) die("umount the old root");
  ::rmdir("/.old-root");
  if (mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    die("remount / read-only");
  if (!cwd.empty() && chdir(cwd.c_str()) != 0) die("chdir " + cwd);
  std::vector<char*> argv;
  for (auto& s : cmd) argv.push_back(s.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  die("exec " + cmd[0]);
}

}  // namespace

std::vector<std::string> namespace_sandbox_argv(const TaskConfinement& c, const std::string& root_dir,
                                                const std::string& clean_dir, const std::vector<std::string>& argv) {
  // /proc/self/exe itself: the running tool's own file even when its path was replaced meanwhile.
  std::vector<std::string> out = {"/proc/self/exe", kFlag, root_dir};
  if (!clean_dir.empty()) out.push_back("clean=" + clean_dir);
  for (const auto& d : c.read_exec_dirs) out.push_back("ro=" + d);
  for (const auto& d : c.read_paths) out.push_back("ro=" + d);
  for (const auto& d : c.device_paths) out.push_back("dev=" + d);
  for (const auto& d : c.write_dirs) out.push_back("rw=" + d);
  out.push_back("--");
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool namespace_sandbox_available(std::string* why) {
  // The launcher itself, probing: a fresh process (a fork of a threaded tool may not allocate).
  char self[] = "/proc/self/exe";
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    if (why) *why = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  char flag[] = "--ca-worker-sandbox", probe[] = "--probe";
  char* argv[] = {self, flag, probe, nullptr};
  char* envp[] = {nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self, &fa, nullptr, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t got; rc == 0 && (got = ::read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<std::size_t>(got));
  ::close(fds[0]);
  if (rc != 0) {
    if (why) *why = std::string("posix_spawn: ") + std::strerror(rc);
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  if (!ok && why) *why = err.empty() ? "the probe failed" : err;
  return ok;
}

}  // namespace ca::worker
