// A workspace's disk use under its cap: the tree measured without following a symlink (allocated
// bytes, entries, depth), and the largest entries removed when it is over.
#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "tools/agent-run/confined_io.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/workspace.hpp"

namespace ca::agent_run {

using detail::empty_dir;
using detail::entries_of;
using detail::Fd;
using detail::open_dir_at;
using detail::remove_at;
using detail::write_at;

namespace {

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

}  // namespace

std::string human_bytes(int64_t n) {
  if (n < 10 * 1024) return std::to_string(n) + " B";
  if (n < 10 * 1024 * 1024) return std::to_string(n / 1024) + " KiB";
  if (n < 10LL * 1024 * 1024 * 1024) return std::to_string(n / (1024 * 1024)) + " MiB";
  return std::to_string(n / (1024LL * 1024 * 1024)) + " GiB";
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

}  // namespace ca::agent_run
