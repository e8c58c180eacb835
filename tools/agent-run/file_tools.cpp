// The model's file tools on a workspace (read_file, write_file, edit_file, list_files), paths
// resolved inside it, and the bundle read back from it: all through confined_io, never a symlink.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "tools/agent-run/confined_io.hpp"
#include "tools/agent-run/text.hpp"
#include "tools/agent-run/workspace.hpp"

namespace fs = std::filesystem;

namespace ca::agent_run {

using detail::entries_of;
using detail::Fd;
using detail::kind_of;
using detail::read_regular_at;
using detail::write_at;
using detail::write_host_path;

namespace {

bool under(const fs::path& p, const fs::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

}  // namespace

std::string Workspace::resolve(const std::string& path, std::string* why) const {
  // A path the system cannot take is the model's error, said before any file call (a 200,000-byte
  // path made fs::weakly_canonical throw ENAMETOOLONG, which ended the episode).
  if (path.size() >= 4096 || path.find('\0') != std::string::npos) {
    *why = path.size() >= 4096 ? "the path is " + std::to_string(path.size()) + " bytes; at most 4095"
                               : "the path holds a NUL byte";
    return "";
  }
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

}  // namespace ca::agent_run
