// An episode's workspace: a private directory with SKILL.md, model.py, kernels/ and plan.yaml; the
// file tools' operations on it, confined to it; and the bundle read back from it.
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/paths.hpp"

namespace ca::agent {

// A file tool's answer: text for the model, and whether it is an error.
struct ToolAnswer {
  std::string text;
  bool ok = true;
  static ToolAnswer error(std::string t) { return {"error: " + std::move(t), false}; }
};

class Workspace {
 public:
  // Creates the directory and its files. `skill` is SKILL.md's text, `model_code` the task's code.
  Workspace(const std::string& skill, const std::string& model_code);
  const std::string& root() const { return dir_.path(); }

  ToolAnswer read_file(const std::string& path, int64_t max_chars) const;
  ToolAnswer write_file(const std::string& path, const std::string& content) const;
  ToolAnswer edit_file(const std::string& path, const std::string& old_text, const std::string& new_text) const;
  ToolAnswer list_files(const std::string& path) const;

  // The bundle as the workspace holds it now: {"kernels": {name: source}, "plan": text}. Only
  // regular files directly under kernels/ count (no symlinks: nothing outside the workspace can be
  // read through one). `notes` gets one line per file left out.
  Record bundle(std::string* notes = nullptr) const;

  // Resolves a path the model gave (relative, or absolute under /workspace) to a host path inside
  // the workspace; empty with `why` set when it points outside.
  std::string resolve(const std::string& path, std::string* why) const;
  // The same path as the sandbox sees it (/workspace/...).
  std::string sandbox_path(const std::string& host_path) const;

 private:
  PrivateTempDir dir_;
};

// Bytes allowed per file the agent writes, and files per bundle.
inline constexpr int64_t kMaxFileBytes = 1 << 20;
inline constexpr int kMaxKernelFiles = 32;

}  // namespace ca::agent
