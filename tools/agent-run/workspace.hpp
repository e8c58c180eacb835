// An episode's workspace: a private directory with SKILL.md, model.py, kernels/ and plan.yaml (and the
// sandbox's /tmp beside it); the file tools' operations on it, confined to it; its size under a cap;
// and the bundle read back from it without following a symlink.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::agent_run {

// A file tool's answer: text for the model, and whether it is an error.
struct ToolAnswer {
  std::string text;
  bool ok = true;
  static ToolAnswer error(std::string t) { return {"error: " + std::move(t), false}; }
};

// Where episode directories are made (--workspace-dir; default $TMPDIR or /tmp, on disk: a RAM
// tmpfs would let -j N episodes fill the node's memory). Throws EnvironmentError when `dir` is not a
// writable directory.
void set_workspace_base(const std::string& dir);
const std::string& workspace_base();
// A new directory (0700) under the base named agent-run.<host>.<pid namespace>.<pid>.<tag>XXXXXX, so
// that a later run on this host can tell the leftovers of a process that is gone (kill -9) from
// the workspaces of one still running.
std::string make_owned_dir(const std::string& tag);
// Removes the directories of agent-run processes of this host and pid namespace that are gone.
// Returns how many.
int clean_stale_workspaces();
// Removes a directory tree of any depth without following a symlink, making the folders it must
// enter writable first (an agent's `chmod 000`). False when something stayed.
bool remove_tree(const std::string& path);

// Disk use of a tree: allocated bytes (each entry at least one 4 KiB block: an inode and a
// directory entry are not free), entries, and whether it was too deep or too wide to measure.
struct DiskUsage {
  int64_t bytes = 0;
  int64_t entries = 0;
  bool too_deep = false, too_many = false, unreadable = false;
  bool measurable() const { return !too_deep && !too_many && !unreadable; }
};
inline constexpr int kMaxTreeDepth = 64;
inline constexpr int64_t kMaxTreeEntries = 100000;

// The bundle as read from the workspace, and what was refused: a symlink (kernels/ itself, a file in
// it, plan.yaml), a FIFO, socket or device, a file over 1 MiB, more than 32 files. Refusals name the
// path, never what it points at.
struct BundleRead {
  Json bundle;                     // {"kernels": {name: source}, "plan": text}
  std::vector<std::string> refused;  // "kernels/x.cu: a symlink, refused ..."
  std::string notes;                 // one line per refusal, file left out or text made valid UTF-8
};

class Workspace {
 public:
  // Creates the directory and its files. `skill` is SKILL.md's text, `model_code` the task's code;
  // `cap_bytes` bounds the disk use of the workspace and the sandbox's /tmp together.
  Workspace(const std::string& skill, const std::string& model_code, int64_t cap_bytes);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  const std::string& root() const { return root_; }  // bound at /workspace in the sandbox
  const std::string& tmp() const { return tmp_; }    // bound at /tmp in the sandbox
  int64_t cap_bytes() const { return cap_bytes_; }

  ToolAnswer read_file(const std::string& path, int64_t max_chars) const;
  ToolAnswer write_file(const std::string& path, const std::string& content) const;
  ToolAnswer edit_file(const std::string& path, const std::string& old_text, const std::string& new_text) const;
  ToolAnswer list_files(const std::string& path) const;

  // The bundle as the workspace holds it now. Only regular files directly under kernels/ count.
  BundleRead read_bundle() const;

  // Resolves a path the model gave (relative, or absolute under /workspace) to a host path inside
  // the workspace; empty with `why` set when it points outside.
  std::string resolve(const std::string& path, std::string* why) const;
  // The same path as the sandbox sees it (/workspace/...).
  std::string sandbox_path(const std::string& host_path) const;

  // Disk use of the workspace and /tmp together.
  DiskUsage usage() const;
  // "" when usage() is within the cap (and measurable); else why not, for the model.
  std::string over_cap(const DiskUsage& u) const;
  // Brings the workspace back under its cap: /tmp emptied, then the largest entries (top-level
  // files and folders, files of kernels/) removed until it fits. "" when nothing had to go; else
  // what was over and what was removed.
  std::string enforce_cap();
  // Empties the sandbox's /tmp (each command gets a fresh one).
  void clear_tmp() const;

 private:
  // One pass of enforce_cap's trimming; appends what it removed to `removed`.
  void trim_once(std::string& removed);
  std::string dir_, root_, tmp_;
  int root_fd_ = -1;
  int64_t cap_bytes_;
};

// Bytes allowed per file the agent writes, and files per bundle.
inline constexpr int64_t kMaxFileBytes = 1 << 20;
inline constexpr int kMaxKernelFiles = 32;

// "1.5 MiB"
std::string human_bytes(int64_t n);

}  // namespace ca::agent_run
