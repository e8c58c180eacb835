// Confined file I/O in a workspace: reads, writes and removals through a directory fd, never
// following a symlink (see confined_io.hpp).
#include "tools/agent-run/confined_io.hpp"

#include <dirent.h>
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;

namespace ca::agent_run {
namespace detail {

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

}  // namespace detail

using detail::Fd;
using detail::remove_at;

bool remove_tree(const std::string& path) {
  fs::path p(path);
  Fd parent(open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return parent && remove_at(parent.fd, p.filename().string());
}

}  // namespace ca::agent_run
