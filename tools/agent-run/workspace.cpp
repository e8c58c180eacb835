// Workspace files and the confined file tools.
#include "tools/agent-run/workspace.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "libcommon/errors.hpp"

namespace fs = std::filesystem;

namespace ca::agent {
namespace {

bool under(const fs::path& p, const fs::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

std::string human_size(uintmax_t n) {
  if (n < 10 * 1024) return std::to_string(n) + " B";
  if (n < 10 * 1024 * 1024) return std::to_string(n / 1024) + " KiB";
  return std::to_string(n / (1024 * 1024)) + " MiB";
}

// Reads a regular file without following a final symlink.
bool read_regular(const fs::path& p, std::string& out, int64_t cap) {
  std::error_code ec;
  auto st = fs::symlink_status(p, ec);
  if (ec || !fs::is_regular_file(st)) return false;
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), {});
  if (static_cast<int64_t>(out.size()) > cap) out.resize(static_cast<std::size_t>(cap));
  return true;
}

}  // namespace

Workspace::Workspace(const std::string& skill, const std::string& model_code) : dir_("agent-run-ws") {
  fs::path root = dir_.path();
  fs::create_directories(root / "kernels");
  write_file_atomic((root / "SKILL.md").string(), skill);
  write_file_atomic((root / "model.py").string(), model_code);
  write_file_atomic((root / "plan.yaml").string(), "");
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
}

std::string Workspace::resolve(const std::string& path, std::string* why) const {
  const fs::path root = fs::weakly_canonical(dir_.path());
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
  fs::path root = fs::weakly_canonical(dir_.path());
  fs::path rel = fs::path(host_path).lexically_relative(root);
  return rel.empty() || rel == "." ? "/workspace" : "/workspace/" + rel.string();
}

ToolAnswer Workspace::read_file(const std::string& path, int64_t max_chars) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return ToolAnswer::error("'" + path + "' is a directory (use list_files)");
  if (!fs::exists(p, ec)) return ToolAnswer::error("'" + path + "' does not exist");
  std::string text;
  if (!read_regular(p, text, max_chars + 1)) return ToolAnswer::error("'" + path + "' is not a readable regular file");
  if (static_cast<int64_t>(text.size()) > max_chars) {
    text.resize(static_cast<std::size_t>(max_chars));
    text += "\n[... cut at " + std::to_string(max_chars) + " characters; use grep or bash (sed -n) for the rest]";
  }
  return {text, true};
}

ToolAnswer Workspace::write_file(const std::string& path, const std::string& content) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  if (static_cast<int64_t>(content.size()) > kMaxFileBytes)
    return ToolAnswer::error("content is " + std::to_string(content.size()) + " bytes; the limit is " +
                             std::to_string(kMaxFileBytes));
  std::error_code ec;
  if (fs::is_directory(p, ec)) return ToolAnswer::error("'" + path + "' is a directory");
  if (fs::is_symlink(p, ec)) fs::remove(p, ec);  // write the file itself, never through a link
  fs::create_directories(fs::path(p).parent_path(), ec);
  if (ec) return ToolAnswer::error("cannot create the folder for '" + path + "': " + ec.message());
  try {
    write_file_atomic(p, content);
  } catch (const std::exception& e) {
    return ToolAnswer::error(e.what());
  }
  return {"wrote " + std::to_string(content.size()) + " bytes to " + path, true};
}

ToolAnswer Workspace::edit_file(const std::string& path, const std::string& old_text,
                                const std::string& new_text) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  std::string text;
  if (!read_regular(p, text, kMaxFileBytes + 1)) return ToolAnswer::error("'" + path + "' is not a readable file");
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
  write_file_atomic(p, text);
  int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(first), '\n'));
  return {"replaced 1 occurrence in " + path + " at line " + std::to_string(line), true};
}

ToolAnswer Workspace::list_files(const std::string& path) const {
  std::string why;
  std::string p = resolve(path, &why);
  if (p.empty()) return ToolAnswer::error(why);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return ToolAnswer::error("'" + path + "' is not a directory");
  std::vector<std::string> lines;
  const fs::path base(p);
  int shown = 0, total = 0;
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
    else lines.push_back(rel + "  (" + human_size(fs::is_regular_file(st) ? it->file_size(ec) : 0) + ")");
  }
  std::sort(lines.begin(), lines.end());
  std::ostringstream out;
  for (auto& l : lines) out << l << "\n";
  if (total > shown) out << "[... " << (total - shown) << " more entries]\n";
  if (lines.empty()) out << "(empty)\n";
  return {out.str(), true};
}

Record Workspace::bundle(std::string* notes) const {
  Record kernels = Record::object();
  fs::path root = dir_.path();
  std::error_code ec;
  std::vector<fs::path> files;
  for (auto it = fs::directory_iterator(root / "kernels", ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    files.push_back(it->path());
  std::sort(files.begin(), files.end());
  int kept = 0;
  for (auto& f : files) {
    std::string name = f.filename().string();
    std::string text;
    auto st = fs::symlink_status(f, ec);
    if (!fs::is_regular_file(st)) {
      if (notes) *notes += "kernels/" + name + ": not a regular file, left out\n";
      continue;
    }
    if (kept >= kMaxKernelFiles) {
      if (notes) *notes += "kernels/" + name + ": more than " + std::to_string(kMaxKernelFiles) + " files, left out\n";
      continue;
    }
    if (!read_regular(f, text, kMaxFileBytes + 1) || static_cast<int64_t>(text.size()) > kMaxFileBytes) {
      if (notes) *notes += "kernels/" + name + ": unreadable or over 1 MiB, left out\n";
      continue;
    }
    kernels[name] = text;
    ++kept;
  }
  std::string plan;
  if (!read_regular(root / "plan.yaml", plan, kMaxFileBytes) && notes) *notes += "plan.yaml: missing or not a regular file\n";
  return Record{{"kernels", kernels}, {"plan", plan}};
}

}  // namespace ca::agent
