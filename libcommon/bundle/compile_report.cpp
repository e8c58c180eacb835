// What a compile reports: per-kernel resources (the ptxas -v lines, the cubin's sections), a failure's
// first error (in the sources or in a plan's name expression), and the log quoting only the bundle.
#include <algorithm>
#include <cctype>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/compile_detail.hpp"
#include "libcommon/byte_regex.hpp"

namespace ca::bundle {

Json KernelResources::to_json() const {
  return Json{{"registers", registers},
              {"static_shared_bytes", static_shared_bytes},
              {"stack_bytes", stack_bytes},
              {"spill_store_bytes", spill_store_bytes},
              {"spill_load_bytes", spill_load_bytes}};
}

Json CompileResult::resources_json() const {
  Json kernels = Json::object();
  for (auto& [name, mangled] : lowered)
    if (auto it = resources.find(mangled); it != resources.end()) kernels[name] = it->second.to_json();
  return Json{{"kernels", kernels},
              {"module_global_bytes", module_global_bytes},
              {"module_constant_bytes", module_constant_bytes}};
}

namespace {

// The log's lines, split at each '\n': n newlines make n + 1 lines (the last one empty after a final
// newline), so a text put back together with '\n' after each but the last is the log again.
std::vector<std::string> lines_of(const std::string& log) {
  std::vector<std::string> lines;
  size_t pos = 0;
  for (size_t end; (end = log.find('\n', pos)) != std::string::npos; pos = end + 1) lines.push_back(log.substr(pos, end - pos));
  lines.push_back(log.substr(pos));
  return lines;
}

std::string first_error_of(const std::string& log) {
  for (const std::string& line : lines_of(log))
    if (line.find("error") != std::string::npos) return line;
  // No "error" line: the first non-empty line that is not a ptxas report.
  std::string s = log.substr(0, log.find('\n'));
  return s.empty() ? "compilation failed" : s;
}

}  // namespace

// The compiler's warnings in a log (the front end's "file(line): warning #N-D: ..." and NVVM's
// "Warning: ..."), ptxas's resource lines left out: at most kMaxWarnings, each cut at kMaxChars.
std::vector<std::string> compile_warnings(const std::string& log) {
  constexpr size_t kMaxWarnings = 20, kMaxChars = 300;
  std::vector<std::string> out;
  for (std::string line : lines_of(log)) {
    if (out.size() == kMaxWarnings) break;
    // "file(line): warning ...", or a line NVVM opens with "warning: " (ptxas's lines open with "ptxas").
    const bool warning = line.rfind("warning: ", 0) == 0 || line.find("): warning") != std::string::npos ||
                         line.find("): Warning") != std::string::npos;
    if (!warning) continue;
    if (line.size() > kMaxChars) line = line.substr(0, kMaxChars) + "...";
    out.push_back(line);
  }
  return out;
}

namespace detail {

void parse_ptxas_report(const std::string& log, CompileResult& r) {
  // RE2 (linear, no recursion): the log quotes the policy's kernel names. Numbers of at most 9
  // digits, so they convert without overflow.
  static const re2::RE2 entry(R"(Compiling entry function '([^']+)')", ca::byte_regex_options());
  static const re2::RE2 props(R"((\d{1,9}) bytes stack frame, (\d{1,9}) bytes spill stores, (\d{1,9}) bytes spill loads)",
      ca::byte_regex_options());
  static const re2::RE2 used(R"(Used (\d{1,9}) registers)", ca::byte_regex_options());
  static const re2::RE2 smem(R"((\d{1,9}) bytes smem)", ca::byte_regex_options());
  std::string current;
  for (const std::string& line : lines_of(log)) {
    std::string name;
    int64_t a = 0, b = 0, c = 0;
    if (re2::RE2::PartialMatch(line, entry, &name)) {
      current = name;
      r.resources[current].mangled = current;
    } else if (!current.empty()) {
      auto& k = r.resources[current];
      if (re2::RE2::PartialMatch(line, props, &a, &b, &c)) {
        k.stack_bytes = a;
        k.spill_store_bytes = b;
        k.spill_load_bytes = c;
      }
      if (re2::RE2::PartialMatch(line, used, &a)) {
        k.registers = static_cast<int>(a);
        if (re2::RE2::PartialMatch(line, smem, &b)) k.static_shared_bytes = b;
      }
    }
  }
}

void read_cubin_resources(CompileResult& r) {
  auto sections = cubin_sections(r.cubin);
  // Constant banks that hold variables (__constant__ ones live in .nv.constant3); the compiler's own
  // banks (addresses of globals, literals) hold no symbol and are not counted.
  std::set<std::string> constant_banks;
  for (const auto& [name, section] : cubin_object_sections(r.cubin))
    if (section.rfind(".nv.constant", 0) == 0) constant_banks.insert(section);
  r.module_global_bytes = 0;
  r.module_constant_bytes = 0;
  for (auto& [name, size] : sections) {
    if (name == ".nv.global" || name == ".nv.global.init") r.module_global_bytes += size;
    if (constant_banks.count(name)) r.module_constant_bytes += size;
    if (name.rfind(".nv.shared.", 0) == 0) {
      std::string fn = name.substr(11);
      if (r.resources.count(fn)) r.resources[fn].static_shared_bytes = size;
    }
  }
  // Local memory per thread from the cubin: ptxas's log gives a kernel the frame of the last function
  // it lists after it (a callee's 0 hid a kernel's 512 KiB), and a message a bundle prints can add lines.
  r.local_bytes = cubin_local_bytes(r.cubin);
  if (r.local_bytes)
    for (auto& [fn, k] : r.resources)
      if (auto it = r.local_bytes->find(fn); it != r.local_bytes->end()) k.stack_bytes = std::max(k.stack_bytes, it->second);
}

// A failed compile's first error, and whether it is in a plan's kernel name expression.
void explain_failure(CompileResult& r) {
  r.first_error = first_error_of(r.log);
  // Errors in the synthesized name map come from the plan's kernel names, not the sources.
  static const re2::RE2 name_err(R"re(__nv_name_map.*\n\s*#pragma nv_mangled_name (.+))re", ca::byte_regex_options());
  bool all_in_map = true;
  for (const std::string& line : lines_of(r.log))
    if (line.find(": error") != std::string::npos && line.rfind("__nv_name_map", 0) != 0) all_in_map = false;
  std::string failed;
  if (all_in_map && re2::RE2::PartialMatch(r.log, name_err, &failed)) {
    r.name_error = true;
    r.failed_name = failed;
    while (!r.failed_name.empty() && std::isspace(static_cast<unsigned char>(r.failed_name.back()))) r.failed_name.pop_back();
  }
}

// The compiler's messages quote only the bundle's own files (and CUDA's headers): a message located
// in any other file, with the source lines NVRTC quotes under it, is withheld. Defence in depth:
// the confined compiler cannot open another file in the first place.
std::string quote_only_bundle(const std::string& log, const std::map<std::string, std::string>& kernels,
                              const std::vector<std::string>& include_dirs) {
  // NVVM's messages come as "warning: fused.cu(2): Warning: ...": the file after that prefix.
  static const re2::RE2 located(R"(^(?:(?:warning|error): )?(.+?)\((\d+)\): )", ca::byte_regex_options());
  auto allowed = [&](const std::string& file) {
    if (file == "bundle_main.cu" || file.rfind("__nv_name_map", 0) == 0 || kernels.count(file) || c_header_shims().count(file)) return true;
    for (const auto& d : include_dirs)
      if (!d.empty() && file.rfind(d + "/", 0) == 0 && file.find("/../") == std::string::npos) return true;
    return false;
  };
  std::string out;
  bool withholding = false;
  for (std::string line : lines_of(log)) {
    std::string file;
    if (re2::RE2::PartialMatch(line, located, &file)) {
      withholding = !allowed(file);
      if (withholding) line = "(a message located in a file outside the bundle was withheld)";
      out += line + "\n";
    } else if (!withholding || line.empty()) {
      out += line + "\n";
      if (line.empty()) withholding = false;
    }
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace detail
}  // namespace ca::bundle
