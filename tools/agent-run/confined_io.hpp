// Confined file I/O in a workspace: every read, write and removal goes through a directory fd with
// O_NOFOLLOW, so a symlink the agent planted is refused, never followed; a FIFO never blocks a read.
// Internal to agent-run (workspace.cpp, file_tools.cpp, disk_cap.cpp, ownership.cpp).
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ca::agent_run::detail {

// An owned file descriptor, closed when it goes.
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

// Opens the folder `name` in `dirfd` without following a symlink; a folder the agent took our own
// permissions from is made ours again first (when we are not root). -1 when it cannot be opened.
int open_dir_at(int dirfd, const char* name);
// The names in the folder open at `dirfd` (not . and ..).
std::vector<std::string> entries_of(int dirfd);
// "a symlink", "a folder", "a FIFO", "a socket", "a device" or "not a regular file".
const char* kind_of(mode_t m);
// Reads `name` in `dirfd` if it is a regular file of at most `cap` bytes, never following a symlink
// and never blocking on a FIFO. Returns "" on success, else why not ("a symlink", "over 1 MiB").
std::string read_regular_at(int dirfd, const std::string& name, std::string& out, int64_t cap, bool cut_to_cap);
// Replaces `name` in `dirfd` with `content` (a fresh file renamed over it). "" or why not.
std::string write_at(int dirfd, const std::string& name, const std::string& content);
// write_at on a host path inside the workspace, split into its folder fd and file name.
std::string write_host_path(const std::string& host_path, const std::string& content);
// Empties the directory open at `top_fd`, any depth, with one fd at a time: it descends into a
// folder it cannot remove and climbs back by "..", checking it is home by device and inode.
bool empty_dir(int top_fd);
// Removes `name` in `dirfd`, a file or a tree of any depth. True when it is gone.
bool remove_at(int dirfd, const std::string& name);

}  // namespace ca::agent_run::detail
