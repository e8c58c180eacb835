// Workspace files and the confined file tools. Everything agent-run reads or writes in a workspace
// goes through a directory fd and O_NOFOLLOW: a symlink the agent planted is refused, never followed.
#include "tools/agent-run/workspace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "tools/agent-run/text.hpp"

namespace fs = std::filesystem;

namespace ca::agent {
namespace {

std::string g_base;  // set once at start-up, before any thread

bool under(const fs::path& p, const fs::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  explicit operator bool() const { return fd >= 0; }
};

int open_dir_at(int dirfd, const char* name) {
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES && geteuid() != 0) {
    // The agent (running as us when we are not root) took its own folder's permissions away.
    fchmodat(dirfd, name, S_IRWXU, 0);
    fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  return fd;
}

std::vector<std::string> entries_of(int dirfd) {
  std::vector<std::string> names;
  int fd = dup(dirfd);
  if (fd < 0) return names;
  DIR* d = fdopendir(fd);
  if (!d) {
    ::close(fd);
    return names;
  }
  rewinddir(d);
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  return names;
}

const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symlink";
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  return "not a regular file";
}

// Reads `name` in `dirfd` if it is a regular file of at most `cap` bytes, never following a symlink
// and never blocking on a FIFO. Returns "" on success, else why not ("a symlink", "over 1 MiB").
std::string read_regular_at(int dirfd, const std::string& name, std::string& out, int64_t cap, bool cut_to_cap) {
  struct stat st {};
  if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return kind_of(st.st_mode);
  if (!cut_to_cap && st.st_size > cap) return "over " + human_bytes(cap);
  Fd fd(openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) return errno == ELOOP ? "a symlink" : std::strerror(errno);
  struct stat st2 {};
  if (fstat(fd.fd, &st2) != 0 || !S_ISREG(st2.st_mode)) return kind_of(st2.st_mode);  // swapped since
  out.clear();
  char buf[65536];
  while (static_cast<int64_t>(out.size()) <= cap) {
    ssize_t n = ::read(fd.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  if (static_cast<int64_t>(out.size()) > cap) {
    if (!cut_to_cap) return "over " + human_bytes(cap);
    out.resize(static_cast<std::size_t>(cap));
  }
  return "";
}

// Splits a host path inside the workspace into its folder fd and file name.
std::string write_at(int dirfd, const std::string& name, const std::string& content) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  char tmp[64];
  std::snprintf(tmp, sizeof tmp, ".agent-run-write-%016llx", static_cast<unsigned long long>(rng()));
  // O_EXCL|O_NOFOLLOW: a name the agent prepared (a symlink to a host file) is never written through.
  Fd fd(openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return std::string("cannot create a file: ") + std::strerror(errno);
  std::size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd.fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = std::strerror(errno);
      unlinkat(dirfd, tmp, 0);
      return "write failed: " + why;
    }
    done += static_cast<std::size_t>(n);
  }
  if (renameat(dirfd, tmp, dirfd, name.c_str()) != 0) {
    std::string why = std::strerror(errno);
    unlinkat(dirfd, tmp, 0);
    return "cannot replace the file: " + why;
  }
  return "";
}

std::string write_host_path(const std::string& host_path, const std::string& content) {
  fs::path p(host_path);
  Fd dir(open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return "cannot open the folder: " + std::string(std::strerror(errno));
  return write_at(dir.fd, p.filename().string(), content);
}

// Empties the directory open at `top_fd`, any depth, with one fd at a time: it descends into a
// folder it cannot remove and climbs back by "..", checking it is home by device and inode.
bool empty_dir(int top_fd) {
  struct stat top {};
  if (fstat(top_fd, &top) != 0) return false;
  int fd = dup(top_fd);
  if (fd < 0) return false;
  if (geteuid() != 0) fchmod(fd, S_IRWXU);
  std::set<std::pair<dev_t, ino_t>> stuck;  // folders that could not be emptied: not entered again
  bool all = true;
  for (int64_t budget = 50'000'000; budget > 0; --budget) {
    int descend = -1;
    bool failed = false;
    for (const std::string& name : entries_of(fd)) {
      if (unlinkat(fd, name.c_str(), 0) == 0) continue;
      if (errno == EISDIR || errno == EPERM) {
        if (unlinkat(fd, name.c_str(), AT_REMOVEDIR) == 0) continue;
        int sub = open_dir_at(fd, name.c_str());
        if (sub >= 0) {
          struct stat ss {};
          if (fstat(sub, &ss) == 0 && !stuck.count({ss.st_dev, ss.st_ino})) {
            if (geteuid() != 0) fchmod(sub, S_IRWXU);
            descend = sub;
            break;
          }
          ::close(sub);
        }
      }
      failed = true;
    }
    if (descend >= 0) {
      ::close(fd);
      fd = descend;
      continue;
    }
    struct stat here {};
    if (fstat(fd, &here) != 0) break;
    if (failed) {
      stuck.insert({here.st_dev, here.st_ino});
      all = false;
    }
    if (here.st_dev == top.st_dev && here.st_ino == top.st_ino) {
      ::close(fd);
      return all && !failed;
    }
    int up = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat ups {};
    if (up < 0 || fstat(up, &ups) != 0 || (ups.st_dev == here.st_dev && ups.st_ino == here.st_ino)) {
      if (up >= 0) ::close(up);
      break;  // at a filesystem root without passing home: never go on from there
    }
    ::close(fd);
    fd = up;
  }
  ::close(fd);
  return false;
}

bool remove_at(int dirfd, const std::string& name) {
  if (unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return true;
  if (errno != EISDIR && errno != EPERM) return false;
  if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) == 0) return true;
  Fd sub(open_dir_at(dirfd, name.c_str()));
  if (!sub) return false;
  empty_dir(sub.fd);
  return unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) == 0;
}

// What one entry counts against the cap: its blocks, but never less than its size in whole 4 KiB
// pages, since blocks lag the data on some file systems (delayed allocation, a journal not yet
// committed) and a file that looks small now must not be let through the cap.
int64_t disk_bytes(const struct stat& st) {
  const int64_t blocks = static_cast<int64_t>(st.st_blocks) * 512;
  const int64_t pages = S_ISREG(st.st_mode) ? (static_cast<int64_t>(st.st_size) + 4095) / 4096 * 4096 : 0;
  return std::max({blocks, pages, int64_t{4096}});
}

// Disk use of the tree under `dirfd`, without following symlinks, to kMaxTreeDepth levels.
void measure(int top, DiskUsage& u) {
  std::vector<DIR*> stack;
  int fd0 = dup(top);
  DIR* d0 = fd0 >= 0 ? fdopendir(fd0) : nullptr;
  if (!d0) {
    if (fd0 >= 0) ::close(fd0);
    u.unreadable = true;
    return;
  }
  rewinddir(d0);
  stack.push_back(d0);
  while (!stack.empty()) {
    dirent* e = readdir(stack.back());
    if (!e) {
      closedir(stack.back());
      stack.pop_back();
      continue;
    }
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (++u.entries > kMaxTreeEntries) {
      u.too_many = true;
      break;
    }
    const int at = dirfd(stack.back());
    struct stat st {};
    if (fstatat(at, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    u.bytes += disk_bytes(st);
    if (!S_ISDIR(st.st_mode)) continue;
    if (static_cast<int>(stack.size()) >= kMaxTreeDepth) {
      u.too_deep = true;
      continue;
    }
    int sub = open_dir_at(at, e->d_name);
    DIR* sd = sub >= 0 ? fdopendir(sub) : nullptr;
    if (!sd) {
      if (sub >= 0) ::close(sub);
      u.unreadable = true;
      continue;
    }
    stack.push_back(sd);
  }
  for (DIR* d : stack) closedir(d);
}

DiskUsage usage_of_entry(int dirfd, const std::string& name) {
  DiskUsage u;
  struct stat st {};
  if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return u;
  u.entries = 1;
  u.bytes = disk_bytes(st);
  if (S_ISDIR(st.st_mode)) {
    Fd sub(open_dir_at(dirfd, name.c_str()));
    if (sub) measure(sub.fd, u);
    else u.unreadable = true;
  }
  return u;
}

std::string this_host_prefix() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string h;
  for (const char* c = host; *c; ++c) h += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
  std::error_code ec;
  std::string ns = fs::read_symlink("/proc/self/ns/pid", ec).string();  // "pid:[4026531836]"
  std::string n;
  for (char c : ns)
    if (std::isdigit(static_cast<unsigned char>(c))) n += c;
  return "agent-run." + (h.empty() ? std::string("host") : h) + "." + (n.empty() ? std::string("0") : n) + ".";
}

// The start time of a process (clock ticks since boot, /proc/PID/stat field 22), or "" if it is
// gone or unreadable. With its pid it names one process: a reused pid has another start time.
std::string process_start(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return "";
  std::size_t close = stat.rfind(')');  // the name before it may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return "";
}

// Whether the process that made a workspace (its pid and start time, from the folder's name; ""
// for an older agent-run's folder, which has none) is still running. Any program may own
// workspaces (agent-run, its unit tests, a library user), so the running program's name is not
// asked; the start time tells a reused pid apart.
bool owner_alive(pid_t pid, const std::string& start) {
  if (pid == getpid()) return true;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  if (start.empty()) return true;  // no start time in the name: a live pid may be its owner, leave it
  std::string now = process_start(pid);
  if (now.empty()) return true;  // cannot tell: leave it
  return now == start;
}

}  // namespace

std::string human_bytes(int64_t n) {
  if (n < 10 * 1024) return std::to_string(n) + " B";
  if (n < 10 * 1024 * 1024) return std::to_string(n / 1024) + " KiB";
  if (n < 10LL * 1024 * 1024 * 1024) return std::to_string(n / (1024 * 1024)) + " MiB";
  return std::to_string(n / (1024LL * 1024 * 1024)) + " GiB";
}

void set_workspace_base(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec))
    throw EnvironmentError("workspace folder '" + dir + "' is not a directory (--workspace-dir)");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw EnvironmentError("workspace folder '" + dir + "' is not writable (--workspace-dir)");
  g_base = fs::absolute(dir, ec).lexically_normal().string();
  while (g_base.size() > 1 && g_base.back() == '/') g_base.pop_back();
}

const std::string& workspace_base() {
  if (g_base.empty()) {
    const char* t = std::getenv("TMPDIR");
    set_workspace_base(t && *t ? t : "/tmp");
  }
  return g_base;
}

std::string make_owned_dir(const std::string& tag) {
  const std::string start = process_start(getpid());  // not cached: a forked child is another process
  std::string templ = workspace_base() + "/" + this_host_prefix() + std::to_string(getpid()) + "." +
                      (start.empty() ? std::string("0") : start) + "." + tag + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw EnvironmentError("cannot create a workspace under " + workspace_base() + ": " + std::strerror(errno));
  return buf.data();  // mkdtemp makes it 0700
}

int clean_stale_workspaces() {
  const std::string prefix = this_host_prefix();
  int removed = 0;
  Fd base(open(workspace_base().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!base) return 0;
  for (const std::string& name : entries_of(base.fd)) {
    if (name.rfind(prefix, 0) != 0) continue;
    // PREFIX PID.START.TAG+random; an older agent-run's folders have no START (PID.TAG+random).
    std::string rest = name.substr(prefix.size());
    std::size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
    pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    std::size_t dot2 = rest.find('.', dot + 1);
    std::string start;
    if (dot2 != std::string::npos && dot2 > dot + 1 && rest.find_first_not_of("0123456789", dot + 1) == dot2)
      start = rest.substr(dot + 1, dot2 - dot - 1);
    if (owner_alive(pid, start)) continue;
    struct stat st {};
    if (fstatat(base.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (st.st_uid != geteuid() && geteuid() != 0) continue;  // another user's: theirs to clean
    if (remove_at(base.fd, name)) ++removed;
    else log::warn("cannot remove the stale workspace ", workspace_base(), "/", name);
  }
  return removed;
}

bool remove_tree(const std::string& path) {
  fs::path p(path);
  Fd parent(open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return parent && remove_at(parent.fd, p.filename().string());
}

Workspace::Workspace(const std::string& skill, const std::string& model_code, int64_t cap_bytes)
    : dir_(make_owned_dir("")), cap_bytes_(cap_bytes) {
  root_ = dir_ + "/ws";
  tmp_ = dir_ + "/tmp";
  try {
    if (mkdir(root_.c_str(), 0700) != 0 || mkdir(tmp_.c_str(), 0700) != 0 ||
        mkdir((root_ + "/kernels").c_str(), 0755) != 0)
      throw EnvironmentError("cannot create the workspace " + root_ + ": " + std::strerror(errno));
    root_fd_ = open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (root_fd_ < 0) throw EnvironmentError("cannot open the workspace " + root_ + ": " + std::strerror(errno));
    for (const char* name : {"SKILL.md", "model.py", "plan.yaml"}) {
      const std::string& text = name[0] == 'S' ? skill : name[0] == 'm' ? model_code : std::string();
      std::string why = write_at(root_fd_, name, text);
      if (!why.empty()) throw EnvironmentError("cannot write " + root_ + "/" + name + ": " + why);
    }
  } catch (...) {
    if (root_fd_ >= 0) ::close(root_fd_);
    remove_tree(dir_);
    throw;
  }
}

Workspace::~Workspace() {
  if (root_fd_ >= 0) ::close(root_fd_);
  if (!remove_tree(dir_)) log::warn("workspace ", dir_, " could not be removed in full");
}

std::string Workspace::resolve(const std::string& path, std::string* why) const {
  const fs::path root = fs::weakly_canonical(root_);
  std::string rel = path.empty() ? "." : path;
  if (rel == "/workspace" || rel.rfind("/workspace/", 0) == 0) rel = "." + rel.substr(10);
  if (!rel.empty() && rel[0] == '/') {
    *why = "'" + path + "' is outside the workspace (paths are relative to /workspace)";
    return "";
  }
  // weakly_canonical follows symlinks that exist, so a link pointing out of the workspace is caught.
  fs::path p = fs::weakly_canonical(root / rel);
  if (!under(p, root)) {
    *why = "'" + path + "' is outside the workspace";
    return "";
  }
  return p.string();
}

std::string Workspace::sandbox_path(const std::string& host_path) const {
  fs::path root = fs::weakly_canonical(root_);
  fs::path rel = fs::path(host_path).lexically_relative(root);
  return rel.empty() || rel == "." ? "/workspace" : "/workspace/" + rel.string();
}

ToolAnswer Workspace::read_file(const std::string& path, int64_t max_chars) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) return ToolAnswer::error("'" + path + "' is a directory (use list_files)");
  if (!fs::exists(fs::symlink_status(p, ec))) return ToolAnswer::error("'" + path + "' does not exist");
  Fd dir(open(fs::path(p).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::string text;
  std::string bad = dir ? read_regular_at(dir.fd, fs::path(p).filename().string(), text, max_chars + 1, true)
                        : std::string(std::strerror(errno));
  if (!bad.empty()) return ToolAnswer::error("'" + path + "' is not a readable regular file (" + bad + ")");
  if (static_cast<int64_t>(text.size()) > max_chars) {
    text = cut_utf8(text, static_cast<std::size_t>(max_chars));
    text += "\n[... cut at " + std::to_string(max_chars) + " characters; use grep or bash (sed -n) for the rest]";
  }
  return {marked_text(text, path), true};
}

ToolAnswer Workspace::write_file(const std::string& path, const std::string& content) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  if (static_cast<int64_t>(content.size()) > kMaxFileBytes)
    return ToolAnswer::error("content is " + std::to_string(content.size()) + " bytes; the limit is " +
                             std::to_string(kMaxFileBytes));
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(p, ec))) return ToolAnswer::error("'" + path + "' is a directory");
  DiskUsage u = usage();
  if (!over_cap(u).empty() || u.bytes + static_cast<int64_t>(content.size()) > cap_bytes_)
    return ToolAnswer::error("the workspace would exceed its cap of " + human_bytes(cap_bytes_) + " (it holds " +
                             human_bytes(u.bytes) + "); remove files first");
  fs::create_directories(fs::path(p).parent_path(), ec);
  if (ec) return ToolAnswer::error("cannot create the folder for '" + path + "': " + ec.message());
  // A symlink in the way is replaced by the file (rename over it), never written through.
  std::string bad = write_host_path(p, content);
  if (!bad.empty()) return ToolAnswer::error("'" + path + "': " + bad);
  return {"wrote " + std::to_string(content.size()) + " bytes to " + path, true};
}

ToolAnswer Workspace::edit_file(const std::string& path, const std::string& old_text,
                                const std::string& new_text) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  Fd dir(open(fs::path(p).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::string text;
  std::string bad = dir ? read_regular_at(dir.fd, fs::path(p).filename().string(), text, kMaxFileBytes, false)
                        : std::string(std::strerror(errno));
  if (!bad.empty()) return ToolAnswer::error("'" + path + "' is not a readable file (" + bad + ")");
  if (old_text.empty()) return ToolAnswer::error("'old' is empty; give the exact text to replace");
  std::size_t first = text.find(old_text);
  if (first == std::string::npos) return ToolAnswer::error("'old' does not occur in " + path + " (it must match exactly, whitespace included)");
  std::size_t count = 0;
  for (std::size_t at = first; at != std::string::npos; at = text.find(old_text, at + 1)) ++count;
  if (count > 1)
    return ToolAnswer::error("'old' occurs " + std::to_string(count) + " times in " + path +
                             "; include more context so it is unique");
  text.replace(first, old_text.size(), new_text);
  if (static_cast<int64_t>(text.size()) > kMaxFileBytes) return ToolAnswer::error("the file would exceed 1 MiB");
  DiskUsage u = usage();
  if (!over_cap(u).empty() || u.bytes + static_cast<int64_t>(new_text.size()) > cap_bytes_)
    return ToolAnswer::error("the workspace would exceed its cap of " + human_bytes(cap_bytes_));
  bad = write_at(dir.fd, fs::path(p).filename().string(), text);
  if (!bad.empty()) return ToolAnswer::error("'" + path + "': " + bad);
  int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(first), '\n'));
  return {"replaced 1 occurrence in " + path + " at line " + std::to_string(line), true};
}

ToolAnswer Workspace::list_files(const std::string& path) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(p, ec))) return ToolAnswer::error("'" + path + "' is not a directory");
  std::vector<std::string> lines;
  const fs::path base(p);
  int shown = 0, total = 0;
  // recursive_directory_iterator does not follow directory symlinks unless told to.
  for (auto it = fs::recursive_directory_iterator(base, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    ++total;
    if (it.depth() >= 4) it.disable_recursion_pending();
    if (shown >= 500) continue;
    ++shown;
    std::string rel = it->path().lexically_relative(base).string();
    auto st = it->symlink_status(ec);
    if (fs::is_symlink(st)) lines.push_back(rel + " -> (symlink)");
    else if (fs::is_directory(st)) lines.push_back(rel + "/");
    else if (fs::is_regular_file(st)) lines.push_back(rel + "  (" + human_bytes(static_cast<int64_t>(it->file_size(ec))) + ")");
    else lines.push_back(rel + "  (" + (fs::is_fifo(st) ? "a FIFO" : fs::is_socket(st) ? "a socket" : "a device") + ")");
  }
  std::sort(lines.begin(), lines.end());
  std::ostringstream out;
  for (auto& l : lines) out << l << "\n";
  if (total > shown) out << "[... " << (total - shown) << " more entries]\n";
  if (lines.empty()) out << "(empty)\n";
  return {marked_text(out.str(), "the file names"), true};
}

BundleRead Workspace::read_bundle() const {
  BundleRead r;
  Json kernels = Json::object();
  auto refuse = [&](const std::string& what) {
    r.refused.push_back(what);
    r.notes += what + "\n";
  };
  const char* nofollow = "(the workspace is read without following symlinks)";
  struct stat st {};
  Fd kdir(openat(root_fd_, "kernels", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!kdir) {
    if (fstatat(root_fd_, "kernels", &st, AT_SYMLINK_NOFOLLOW) != 0) r.notes += "kernels/: missing\n";
    else if (S_ISLNK(st.st_mode)) refuse(std::string("kernels: a symlink, refused ") + nofollow);
    else if (!S_ISDIR(st.st_mode)) refuse(std::string("kernels: ") + kind_of(st.st_mode) + ", refused (a folder is expected)");
    else refuse(std::string("kernels: cannot be opened (") + std::strerror(errno) + ")");
  } else {
    std::vector<std::string> names = entries_of(kdir.fd);
    std::sort(names.begin(), names.end());
    int kept = 0;
    for (const std::string& raw : names) {
      const std::string name = valid_text(raw);  // a file name is a JSON key
      std::string text;
      std::string bad = read_regular_at(kdir.fd, raw, text, kMaxFileBytes, false);
      if (bad == "a folder") {
        r.notes += "kernels/" + name + ": a folder, left out\n";
        continue;
      }
      if (bad == "a symlink") {
        refuse("kernels/" + name + ": a symlink, refused " + nofollow);
        continue;
      }
      if (!bad.empty()) {
        refuse("kernels/" + name + ": " + bad + ", refused (regular files of at most 1 MiB only)");
        continue;
      }
      if (kept >= kMaxKernelFiles) {
        refuse("kernels/" + name + ": more than " + std::to_string(kMaxKernelFiles) + " files, refused");
        continue;
      }
      int64_t replaced = 0;
      kernels[name] = valid_text(text, &replaced);
      if (replaced > 0)
        r.notes += "kernels/" + name + ": " + std::to_string(replaced) +
                   " byte sequences that are not valid UTF-8 are shown as U+FFFD\n";
      ++kept;
    }
  }
  std::string plan;
  if (fstatat(root_fd_, "plan.yaml", &st, AT_SYMLINK_NOFOLLOW) != 0) {
    r.notes += "plan.yaml: missing\n";
  } else {
    std::string bad = read_regular_at(root_fd_, "plan.yaml", plan, kMaxFileBytes, false);
    if (bad == "a symlink") refuse(std::string("plan.yaml: a symlink, refused ") + nofollow);
    else if (!bad.empty()) refuse("plan.yaml: " + bad + ", refused (a regular file of at most 1 MiB)");
    if (!bad.empty()) plan.clear();
    int64_t replaced = 0;
    plan = valid_text(plan, &replaced);
    if (replaced > 0)
      r.notes += "plan.yaml: " + std::to_string(replaced) + " byte sequences that are not valid UTF-8 are shown as U+FFFD\n";
  }
  r.bundle = Json{{"kernels", kernels}, {"plan", plan}};
  return r;
}

DiskUsage Workspace::usage() const {
  DiskUsage u;
  Fd dir(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    u.unreadable = true;
    return u;
  }
  measure(dir.fd, u);
  return u;
}

std::string Workspace::over_cap(const DiskUsage& u) const {
  if (u.too_deep) return "the workspace is nested deeper than " + std::to_string(kMaxTreeDepth) + " folders";
  if (u.too_many) return "the workspace holds more than " + std::to_string(kMaxTreeEntries) + " entries";
  if (u.unreadable) return "part of the workspace cannot be read";
  if (u.bytes > cap_bytes_)
    return "the workspace holds " + std::to_string(u.bytes / 1024) + " KiB, over its cap of " +
           std::to_string(cap_bytes_ / 1024) + " KiB (" + human_bytes(cap_bytes_) + ")";
  return "";
}

void Workspace::clear_tmp() const {
  Fd t(open(tmp_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (t) empty_dir(t.fd);
}

std::string Workspace::enforce_cap() {
  DiskUsage u = usage();
  std::string why = over_cap(u);
  if (why.empty()) return "";
  clear_tmp();
  std::string removed, still;
  // A pass trims by the entries' own measures; the whole tree is measured again after it, and a
  // second pass runs if that is still over (a measure that moved while it was taken).
  for (int pass = 0; pass < 3; ++pass) {
    trim_once(removed);
    still = over_cap(usage());
    if (still.empty()) break;
  }
  struct stat st {};
  if (fstatat(root_fd_, "kernels", &st, AT_SYMLINK_NOFOLLOW) != 0) mkdirat(root_fd_, "kernels", 0755);
  if (fstatat(root_fd_, "plan.yaml", &st, AT_SYMLINK_NOFOLLOW) != 0) write_at(root_fd_, "plan.yaml", "");
  return why + "; removed: " + (removed.empty() ? std::string("nothing") : removed) +
         (still.empty() ? std::string() : "; still: " + still);
}

void Workspace::trim_once(std::string& removed) {
  // Candidates: the top-level entries but kernels/, and the entries of kernels/; largest first.
  struct Entry {
    int dirfd;
    std::string name, shown;
    DiskUsage use;
    int64_t bytes() const { return use.measurable() ? use.bytes : INT64_MAX; }
  };
  std::vector<Entry> entries;
  Fd kdir(openat(root_fd_, "kernels", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  for (const std::string& name : entries_of(root_fd_)) {
    if (name == "kernels" && kdir) continue;
    entries.push_back({root_fd_, name, valid_text(name), usage_of_entry(root_fd_, name)});
  }
  if (kdir)
    for (const std::string& name : entries_of(kdir.fd))
      entries.push_back({kdir.fd, name, "kernels/" + valid_text(name), usage_of_entry(kdir.fd, name)});
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.bytes() > b.bytes(); });
  // The totals from the entries themselves, so trimming 100,000 small files is not 100,000 walks.
  // The folders themselves: the episode folder's ws/ and tmp/, and kernels/.
  int64_t bytes = 3 * 4096, count = 3, unmeasured = 0;
  for (const Entry& e : entries) {
    if (!e.use.measurable()) ++unmeasured;
    bytes += e.use.bytes;
    count += e.use.entries;
  }
  for (const Entry& e : entries) {
    if (unmeasured == 0 && bytes <= cap_bytes_ && count <= kMaxTreeEntries) break;
    remove_at(e.dirfd, e.name);
    if (!e.use.measurable()) --unmeasured;
    bytes -= e.use.bytes;
    count -= e.use.entries;
    removed += (removed.empty() ? "" : ", ") + e.shown +
               (e.use.measurable() ? " (" + human_bytes(e.use.bytes) + ")"
                                   : std::string(" (too deep or too many entries to measure)"));
  }
}

}  // namespace ca::agent
