// NVRTC compile with an on-disk cubin cache, resources from the ptxas report and the cubin's ELF.
#include "libcommon/bundle/compile.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>

#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"

namespace fs = std::filesystem;

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

std::string default_cache_dir() {
  if (const char* e = std::getenv("CUDA_AGENT_CACHE"); e && *e) return std::string(e) + "/cubin";
  if (const char* e = std::getenv("XDG_CACHE_HOME"); e && *e) return std::string(e) + "/cuda-agent/cubin";
  if (const char* e = std::getenv("HOME"); e && *e) return std::string(e) + "/.cache/cuda-agent/cubin";
  return "/tmp/cuda-agent-cache/cubin";
}

std::map<std::string, int64_t> cubin_sections(const std::string& elf) {
  std::map<std::string, int64_t> out;
  auto rd = [&](size_t off, size_t n) -> uint64_t {
    if (off + n > elf.size()) throw std::runtime_error("truncated");
    uint64_t v = 0;
    std::memcpy(&v, elf.data() + off, n);
    return v;
  };
  try {
    if (elf.size() < 64 || elf.compare(0, 4, "\x7f" "ELF") != 0 || elf[4] != 2) return out;
    uint64_t shoff = rd(0x28, 8);
    uint64_t shentsize = rd(0x3A, 2), shnum = rd(0x3C, 2), shstrndx = rd(0x3E, 2);
    if (shstrndx >= shnum) return out;
    uint64_t strtab = rd(shoff + shstrndx * shentsize + 0x18, 8);
    for (uint64_t i = 0; i < shnum; ++i) {
      uint64_t sh = shoff + i * shentsize;
      uint64_t name_off = rd(sh, 4);
      uint64_t size = rd(sh + 0x20, 8);
      size_t start = strtab + name_off;
      if (start >= elf.size()) continue;
      std::string name(elf.data() + start, strnlen(elf.data() + start, elf.size() - start));
      out[name] += static_cast<int64_t>(size);
    }
  } catch (const std::exception&) {
  }
  return out;
}

std::string ptx_precision(const std::string& ptx) {
  // Ordered from the lowest precision: the first found is what the kernel's accuracy rests on.
  static const std::vector<std::pair<std::regex, const char*>> probes = {
      {std::regex(R"(\.e4m3|\.e5m2)"), "fp8"},
      {std::regex(R"(\b(mma|wgmma|fma|mul|add|sub|hfma2?)\S*\.f16\b|\.f16x2|mma\S*\.f16)"), "fp16"},
      {std::regex(R"(\b(mma|wgmma|fma|mul|add|sub)\S*\.bf16|\.bf16x2|mma\S*\.bf16)"), "bf16"},
      {std::regex(R"(\.tf32)"), "tf32"},
  };
  for (auto& [re, name] : probes)
    if (std::regex_search(ptx, re)) return name;
  return "fp32";
}

namespace {

std::string first_error_of(const std::string& log) {
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    std::string line = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (line.find("error") != std::string::npos) return line;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  // No "error" line: the first non-empty line that is not a ptxas report.
  std::string s = log.substr(0, log.find('\n'));
  return s.empty() ? "compilation failed" : s;
}

void parse_ptxas_report(const std::string& log, CompileResult& r) {
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex props(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::string current;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    std::string line = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    std::smatch m;
    if (std::regex_search(line, m, entry)) {
      current = m[1];
      r.resources[current].mangled = current;
    } else if (!current.empty()) {
      auto& k = r.resources[current];
      if (std::regex_search(line, m, props)) {
        k.stack_bytes = std::stoll(m[1]);
        k.spill_store_bytes = std::stoll(m[2]);
        k.spill_load_bytes = std::stoll(m[3]);
      }
      if (std::regex_search(line, m, used)) {
        k.registers = std::stoi(m[1]);
        if (std::regex_search(line, m, smem)) k.static_shared_bytes = std::stoll(m[1]);
      }
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
}

void read_cubin_resources(CompileResult& r) {
  auto sections = cubin_sections(r.cubin);
  r.module_global_bytes = 0;
  r.module_constant_bytes = 0;
  for (auto& [name, size] : sections) {
    if (name == ".nv.global" || name == ".nv.global.init") r.module_global_bytes += size;
    if (name == ".nv.constant3" || name == ".nv.constant1") r.module_constant_bytes += size;
    if (name.rfind(".nv.shared.", 0) == 0) {
      std::string fn = name.substr(11);
      if (r.resources.count(fn)) r.resources[fn].static_shared_bytes = size;
    }
  }
}

Json meta_json(const CompileResult& r) {
  Json lowered = r.lowered;
  Json res = Json::object();
  for (auto& [k, v] : r.resources) res[k] = v.to_json();
  return Json{{"log", r.log}, {"lowered", lowered}, {"resources", res}, {"flags", r.flags}, {"nvrtc", r.nvrtc_version}};
}

bool load_cached(const std::string& base, CompileResult& r) {
  if (!file_exists(base + ".json") || !file_exists(base + ".cubin") || !file_exists(base + ".ptx")) return false;
  try {
    Json meta = Json::parse(read_file(base + ".json"));
    r.cubin = read_file(base + ".cubin");
    r.ptx = read_file(base + ".ptx");
    r.log = meta.value("log", "");
    for (auto& [k, v] : meta["lowered"].items()) r.lowered[k] = v.get<std::string>();
    for (auto& [k, v] : meta["resources"].items()) {
      KernelResources kr;
      kr.mangled = k;
      kr.registers = v.value("registers", 0);
      kr.static_shared_bytes = v.value("static_shared_bytes", 0);
      kr.stack_bytes = v.value("stack_bytes", 0);
      kr.spill_store_bytes = v.value("spill_store_bytes", 0);
      kr.spill_load_bytes = v.value("spill_load_bytes", 0);
      r.resources[k] = kr;
    }
    return !r.cubin.empty();
  } catch (const std::exception&) {
    return false;  // a damaged entry is recompiled and rewritten
  }
}

}  // namespace

CompileResult compile_bundle(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                             const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto& nv = cuda::Nvrtc::get();
  CompileResult r;
  r.nvrtc_version = nv.version_text();
  r.flags = {"-arch=" + options.arch, "-std=c++17", "-lineinfo", "-Xptxas=-v", "-default-device"};
  std::string include_dir;
  for (const char* dir : std::vector<const char*>{std::getenv("CUDA_HOME"), "/usr/local/cuda"})
    if (dir && *dir && file_exists(std::string(dir) + "/include/cuda_fp16.h")) {
      include_dir = std::string(dir) + "/include";
      break;
    }
  if (!include_dir.empty()) r.flags.push_back("-I" + include_dir);
  for (auto& f : options.extra_flags) r.flags.push_back(f);

  Json key_doc = {{"nvrtc", r.nvrtc_version}, {"flags", r.flags}, {"names", names}, {"kernels", kernels}};
  r.key = sha256_hex(canonical_json(key_doc));
  std::string dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  std::string base = dir + "/" + r.key.substr(0, 2) + "/" + r.key;
  if (options.use_cache && load_cached(base, r)) {
    r.ok = true;
    r.cached = true;
    read_cubin_resources(r);
    r.compile_ms = elapsed_ms();
    return r;
  }

  // One translation unit that includes each source file, so errors name the file and line.
  std::string main_tu;
  std::vector<const char*> header_src, header_names;
  for (auto& [name, src] : kernels) {
    header_names.push_back(name.c_str());
    header_src.push_back(src.c_str());
    std::string ext = fs::path(name).extension().string();
    if (ext == ".cu" || ext == ".cpp" || ext == ".cc" || ext == ".cxx" || ext.empty())
      main_tu += "#include \"" + name + "\"\n";
  }
  nvrtcProgram prog;
  nv.check(nv.createProgram(&prog, main_tu.c_str(), "bundle_main.cu", static_cast<int>(kernels.size()), header_src.data(),
                            header_names.data()),
           "nvrtcCreateProgram");
  struct Guard {
    const cuda::Nvrtc& nv;
    nvrtcProgram* p;
    ~Guard() { nv.destroyProgram(p); }
  } guard{nv, &prog};
  for (auto& n : names) nv.check(nv.addNameExpression(prog, n.c_str()), "nvrtcAddNameExpression");
  std::vector<const char*> flag_ptrs;
  for (auto& f : r.flags) flag_ptrs.push_back(f.c_str());
  nvrtcResult cr = nv.compileProgram(prog, static_cast<int>(flag_ptrs.size()), flag_ptrs.data());
  size_t log_size = 0;
  nv.getProgramLogSize(prog, &log_size);
  r.log.assign(log_size, '\0');
  if (log_size) nv.getProgramLog(prog, r.log.data());
  while (!r.log.empty() && (r.log.back() == '\0' || r.log.back() == '\n')) r.log.pop_back();
  if (cr != NVRTC_SUCCESS) {
    r.ok = false;
    r.first_error = first_error_of(r.log);
    if (r.log.empty()) r.first_error = std::string("NVRTC: ") + nv.getErrorString(cr);
    // Errors in the synthesized name map come from the plan's kernel names, not the sources.
    static const std::regex name_err(R"re(__nv_name_map.*\n\s*#pragma nv_mangled_name (.+))re");
    std::smatch m;
    bool all_in_map = true;
    size_t pos = 0;
    while (pos < r.log.size()) {
      size_t end = r.log.find('\n', pos);
      std::string line = r.log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      if (line.find(": error") != std::string::npos && line.rfind("__nv_name_map", 0) != 0) all_in_map = false;
      if (end == std::string::npos) break;
      pos = end + 1;
    }
    if (all_in_map && std::regex_search(r.log, m, name_err)) {
      r.name_error = true;
      r.failed_name = m[1];
      while (!r.failed_name.empty() && std::isspace(static_cast<unsigned char>(r.failed_name.back()))) r.failed_name.pop_back();
    }
    r.compile_ms = elapsed_ms();
    return r;
  }
  for (auto& n : names) {
    const char* lowered = nullptr;
    if (nv.getLoweredName(prog, n.c_str(), &lowered) == NVRTC_SUCCESS && lowered) r.lowered[n] = lowered;
  }
  size_t size = 0;
  nv.check(nv.getCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  r.cubin.assign(size, '\0');
  nv.check(nv.getCUBIN(prog, r.cubin.data()), "nvrtcGetCUBIN");
  nv.check(nv.getPTXSize(prog, &size), "nvrtcGetPTXSize");
  r.ptx.assign(size, '\0');
  nv.check(nv.getPTX(prog, r.ptx.data()), "nvrtcGetPTX");
  while (!r.ptx.empty() && r.ptx.back() == '\0') r.ptx.pop_back();
  parse_ptxas_report(r.log, r);
  read_cubin_resources(r);
  r.ok = true;
  if (options.use_cache) {
    std::error_code ec;
    fs::create_directories(fs::path(base).parent_path(), ec);
    try {
      // The .json is written last: an entry without it is incomplete and ignored.
      write_file_atomic(base + ".cubin", r.cubin);
      write_file_atomic(base + ".ptx", r.ptx);
      write_file_atomic(base + ".json", meta_json(r).dump());
    } catch (const std::exception&) {
      // A read-only cache is not fatal: the next run compiles again.
    }
  }
  r.compile_ms = elapsed_ms();
  return r;
}

std::map<std::string, KernelSignature> signatures_of(const CompileResult& r) {
  std::map<std::string, KernelSignature> out;
  for (auto& [name, mangled] : r.lowered) {
    auto sig = demangle_kernel(mangled);
    if (!sig) sig = ptx_signature(r.ptx, mangled);
    if (sig) out[name] = *sig;
  }
  return out;
}

}  // namespace ca::bundle
