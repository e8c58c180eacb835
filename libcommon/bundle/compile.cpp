// NVRTC compile with an on-disk cubin cache, resources from the ptxas report and the cubin's ELF.
#include "libcommon/bundle/compile.hpp"

#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>


#include "libcommon/byte_regex.hpp"
#include "libcommon/confine.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"

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

namespace {

// The few ELF64 fields a cubin's section table needs, every read bounds-checked (a damaged cubin
// throws, and the callers report nothing rather than garbage).
struct Elf64View {
  const std::string& elf;
  uint64_t shoff = 0, shentsize = 0, shnum = 0, shstrndx = 0;
  explicit Elf64View(const std::string& bytes) : elf(bytes) {
    if (elf.size() < 64 || elf.compare(0, 4, "\x7f" "ELF") != 0 || elf[4] != 2) throw std::runtime_error("not ELF64");
    shoff = read(0x28, 8), shentsize = read(0x3A, 2), shnum = read(0x3C, 2), shstrndx = read(0x3E, 2);
    if (shstrndx >= shnum) throw std::runtime_error("no section names");
  }
  uint64_t read(size_t off, size_t n) const {
    if (off + n > elf.size()) throw std::runtime_error("truncated");
    uint64_t v = 0;
    std::memcpy(&v, elf.data() + off, n);
    return v;
  }
  uint64_t section(uint64_t i, uint64_t field, size_t n) const { return read(shoff + i * shentsize + field, n); }
  std::string string_at(uint64_t off) const {
    if (off >= elf.size()) return "";
    return std::string(elf.data() + off, strnlen(elf.data() + off, elf.size() - off));
  }
  std::string section_name(uint64_t i) const { return string_at(section(shstrndx, 0x18, 8) + section(i, 0, 4)); }
};

}  // namespace

std::map<std::string, int64_t> cubin_sections(const std::string& elf) {
  std::map<std::string, int64_t> out;
  try {
    Elf64View v(elf);
    for (uint64_t i = 0; i < v.shnum; ++i) out[v.section_name(i)] += static_cast<int64_t>(v.section(i, 0x20, 8));
  } catch (const std::exception&) {
  }
  return out;
}

namespace {

// Module data a kernel can write through a generic address: __device__ variables (.nv.global,
// .nv.global.init) and every constant bank but the kernel parameters' (.nv.constant0.<kernel>):
// .nv.constant3 holds __constant__ variables.
bool module_data_section(const std::string& name) {
  if (name == ".nv.global" || name.rfind(".nv.global.", 0) == 0) return true;
  return name.rfind(".nv.constant", 0) == 0 && name.rfind(".nv.constant0", 0) != 0;
}

}  // namespace

std::set<std::string> cubin_undefined_functions(const std::string& elf) {
  std::set<std::string> out;
  try {
    Elf64View v(elf);
    for (uint64_t i = 0; i < v.shnum; ++i) {
      if (v.section(i, 0x04, 4) != 2) continue;  // SHT_SYMTAB
      const uint64_t off = v.section(i, 0x18, 8), size = v.section(i, 0x20, 8), entsize = v.section(i, 0x38, 8);
      const uint64_t strtab = v.section(v.section(i, 0x28, 4), 0x18, 8);
      if (entsize < 24) continue;
      for (uint64_t sym = off; sym + 24 <= off + size; sym += entsize) {
        const uint64_t shndx = v.read(sym + 6, 2), type = v.read(sym + 4, 1) & 0xf;
        if (shndx != 0 || (type != 2 /* STT_FUNC */ && type != 0 /* STT_NOTYPE */)) continue;
        std::string name = v.string_at(strtab + v.read(sym, 4));
        if (!name.empty()) out.insert(name);
      }
    }
  } catch (const std::exception&) {
  }
  return out;
}

namespace {

// Every sized STT_OBJECT symbol in module data, with its size and its section's name.
std::map<std::string, std::pair<int64_t, std::string>> module_objects(const std::string& elf) {
  std::map<std::string, std::pair<int64_t, std::string>> out;
  try {
    Elf64View v(elf);
    std::vector<std::string> names(v.shnum);
    for (uint64_t i = 0; i < v.shnum; ++i) names[i] = v.section_name(i);
    for (uint64_t i = 0; i < v.shnum; ++i) {
      if (v.section(i, 0x04, 4) != 2) continue;  // SHT_SYMTAB
      const uint64_t off = v.section(i, 0x18, 8), size = v.section(i, 0x20, 8), entsize = v.section(i, 0x38, 8);
      const uint64_t strtab = v.section(v.section(i, 0x28, 4), 0x18, 8);  // sh_link: its string table
      if (entsize < 24) continue;
      for (uint64_t sym = off; sym + 24 <= off + size; sym += entsize) {
        const uint64_t shndx = v.read(sym + 6, 2), info = v.read(sym + 4, 1), sym_size = v.read(sym + 16, 8);
        if ((info & 0xf) != 1 /* STT_OBJECT */ || shndx >= v.shnum || !module_data_section(names[shndx]) || sym_size == 0) continue;
        std::string name = v.string_at(strtab + v.read(sym, 4));
        if (!name.empty()) out[name] = {static_cast<int64_t>(sym_size), names[shndx]};
      }
    }
  } catch (const std::exception&) {
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> cubin_object_sections(const std::string& elf) {
  std::map<std::string, std::string> out;
  for (const auto& [name, o] : module_objects(elf)) out[name] = o.second;
  return out;
}

std::map<std::string, int64_t> cubin_writable_globals(const std::string& elf) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, o] : module_objects(elf)) out[name] = o.first;
  return out;
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
  // RE2 (linear, no recursion): the log quotes the policy's kernel names. Numbers of at most 9
  // digits, so they convert without overflow.
  static const re2::RE2 entry(R"(Compiling entry function '([^']+)')", ca::byte_regex_options());
  static const re2::RE2 props(R"((\d{1,9}) bytes stack frame, (\d{1,9}) bytes spill stores, (\d{1,9}) bytes spill loads)",
      ca::byte_regex_options());
  static const re2::RE2 used(R"(Used (\d{1,9}) registers)", ca::byte_regex_options());
  static const re2::RE2 smem(R"((\d{1,9}) bytes smem)", ca::byte_regex_options());
  std::string current;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    std::string line = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
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
    if (end == std::string::npos) break;
    pos = end + 1;
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
    Json meta = parse_json(read_file(base + ".json"), base + ".json");
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

namespace {

// A bundle file's name goes into the main translation unit's #include lines and into messages: only
// plain relative names (letters, digits, _ . + - and / between parts; no "..", no leading dot) are
// taken, so a name cannot inject a line, a quote or a path outside the bundle.
std::string bad_file_name(const std::string& name) {
  static const re2::RE2 ok(R"([A-Za-z0-9_+\-][A-Za-z0-9_.+\-]*(/[A-Za-z0-9_+\-][A-Za-z0-9_.+\-]*)*)",
      ca::byte_regex_options());
  if (name.size() > 200) return "longer than 200 characters";
  if (!re2::RE2::FullMatch(name, ok)) return "only letters, digits and _ . + - (and / between folder names) may appear";
  if (name == "bundle_main.cu") return "the name of the compiler's main file";
  return "";
}

// The C library headers SKILL.md allows, which CUDA 13 no longer has beside cuda_runtime.h: each
// becomes libcu++'s own (include/cccl/cuda/std), which NVRTC can compile. A bundle file of the same
// name wins.
const std::map<std::string, std::string>& c_header_shims() {
  static const std::map<std::string, std::string> shims = {
      {"stdint.h", "#pragma once\n#include <cuda/std/cstdint>\n"}, {"cstdint", "#pragma once\n#include <cuda/std/cstdint>\n"},
      {"float.h", "#pragma once\n#include <cuda/std/cfloat>\n"},   {"cfloat", "#pragma once\n#include <cuda/std/cfloat>\n"},
      {"limits.h", "#pragma once\n#include <cuda/std/climits>\n"}, {"climits", "#pragma once\n#include <cuda/std/climits>\n"},
  };
  return shims;
}

// The compile itself: NVRTC on the bundle's sources, in whatever process calls it.
CompileResult nvrtc_compile(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                            const std::vector<std::string>& flags) {
  const auto& nv = cuda::Nvrtc::get();
  CompileResult r;
  r.flags = flags;
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
  for (const auto& [name, src] : c_header_shims())
    if (!kernels.count(name)) {
      header_names.push_back(name.c_str());
      header_src.push_back(src.c_str());
    }
  nvrtcProgram prog;
  nv.check(nv.createProgram(&prog, main_tu.c_str(), "bundle_main.cu", static_cast<int>(header_src.size()), header_src.data(),
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
    if (r.log.empty()) r.log = std::string("NVRTC: ") + nv.getErrorString(cr);
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
  r.ok = true;
  return r;
}

// A failed compile's first error, and whether it is in a plan's kernel name expression.
void explain_failure(CompileResult& r) {
  r.first_error = first_error_of(r.log);
  // Errors in the synthesized name map come from the plan's kernel names, not the sources.
  static const re2::RE2 name_err(R"re(__nv_name_map.*\n\s*#pragma nv_mangled_name (.+))re", ca::byte_regex_options());
  bool all_in_map = true;
  size_t pos = 0;
  while (pos < r.log.size()) {
    size_t end = r.log.find('\n', pos);
    std::string line = r.log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (line.find(": error") != std::string::npos && line.rfind("__nv_name_map", 0) != 0) all_in_map = false;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
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
  static const re2::RE2 located(R"(^(.+?)\((\d+)\): )", ca::byte_regex_options());
  auto allowed = [&](const std::string& file) {
    if (file == "bundle_main.cu" || file.rfind("__nv_name_map", 0) == 0 || kernels.count(file) || c_header_shims().count(file)) return true;
    for (const auto& d : include_dirs)
      if (!d.empty() && file.rfind(d + "/", 0) == 0 && file.find("/../") == std::string::npos) return true;
    return false;
  };
  std::string out;
  bool withholding = false;
  size_t pos = 0;
  while (pos <= log.size()) {
    size_t end = log.find('\n', pos);
    std::string line = log.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    std::string file;
    if (re2::RE2::PartialMatch(line, located, &file)) {
      withholding = !allowed(file);
      if (withholding) line = "(a message located in a file outside the bundle was withheld)";
      out += line + "\n";
    } else if (!withholding || line.empty()) {
      out += line + "\n";
      if (line.empty()) withholding = false;
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Where NVRTC lives (its builtins library is loaded from the same folder at the first compile).
std::string nvrtc_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(cuda::Nvrtc::get().version), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  auto real = fs::canonical(info.dli_fname, ec);
  return (ec ? fs::path(info.dli_fname) : real).parent_path().string();
}

std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, size_t(n));
  }
  return s;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

constexpr int kChildConfineFailed = 3;

// The confined compile: this program again, as `<self> --nvrtc-child`, in a clean environment; the
// request on stdin, the answer (a JSON line, then the cubin and PTX bytes) on stdout.
CompileResult confined_compile(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                               const std::vector<std::string>& flags, const std::vector<std::string>& include_dirs) {
  Json req = {{"kernels", kernels}, {"names", names}, {"flags", flags}, {"read_dirs", include_dirs}};
  SpawnOptions so;
  std::error_code ec;
  so.argv = {fs::read_symlink("/proc/self/exe", ec).string(), kCompileChildFlag};
  if (ec) throw EnvironmentError("compile: cannot find this program (/proc/self/exe): " + ec.message());
  so.clear_env = true;  // nothing of ours for the compiler to quote (/proc/self/environ)
  for (const char* keep : {"LD_LIBRARY_PATH", "CUDA_HOME", "PATH", "CUDA_AGENT_CONFINE", "CUDA_AGENT_UNCONFINED_COMPILE"})
    if (const char* v = std::getenv(keep)) so.env_overrides[keep] = v;
  so.capture_stderr = true;
  CommandResult res = run_command(so, req.dump(-1, ' ', false, Json::error_handler_t::replace), std::chrono::seconds(180),
                                  size_t(1) << 30);
  CompileResult r;
  r.flags = flags;
  if (res.timed_out) {
    r.log = "the compiler ran for more than 180 s and was stopped";
    return r;
  }
  size_t nl = res.out.find('\n');
  Json head;
  try {
    if (nl == std::string::npos) throw std::runtime_error("no answer");
    head = parse_json(std::string_view(res.out).substr(0, nl), "compiler child answer");
  } catch (const std::exception&) {
    if (res.exit_status == kChildConfineFailed) throw EnvironmentError("compile: " + res.err.substr(0, 500));
    // Killed from outside (the OOM killer, kill -9, a stop's SIGTERM): the environment failed, not
    // the candidate; never its compile_error. (Its own CPU limit ends it with SIGXCPU, a verdict.)
    if (const int sig = res.exit_status - 128; sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP)
      throw EnvironmentError("compile: the compiler was killed from outside (" + std::string(strsignal(sig)) +
                             "): not the candidate's verdict; judge it again");
    r.log = res.exit_status > 128 ? "the compiler crashed (" + std::string(strsignal(res.exit_status - 128)) + ")"
                                  : "the compiler stopped without an answer (exit " + std::to_string(res.exit_status) + ")";
    return r;
  }
  if (head.contains("confine_error"))
    throw EnvironmentError("compile: NVRTC cannot be confined to CUDA's headers: " + head["confine_error"].get<std::string>() +
                           " (set CUDA_AGENT_UNCONFINED_COMPILE=1 only for trusted bundles)");
  if (head.contains("internal_error")) throw InternalError("compile child: " + head["internal_error"].get<std::string>());
  r.ok = head.value("ok", false);
  r.log = head.value("log", "");
  r.confinement = head.value("confinement", "");
  const Json lowered = head.value("lowered", Json::object());
  for (auto& [k, v] : lowered.items()) r.lowered[k] = v.get<std::string>();
  const size_t cubin_bytes = head.value("cubin_bytes", size_t(0)), ptx_bytes = head.value("ptx_bytes", size_t(0));
  if (res.out.size() < nl + 1 + cubin_bytes + ptx_bytes) throw InternalError("compile child: answer truncated");
  r.cubin = res.out.substr(nl + 1, cubin_bytes);
  r.ptx = res.out.substr(nl + 1 + cubin_bytes, ptx_bytes);
  return r;
}

}  // namespace

int compile_child_main() {
  // Bounded like any untrusted job: memory, CPU, no files written, no core dumps.
  auto limit = [](int resource, rlim_t value) {
    struct rlimit rl{value, value};
    setrlimit(resource, &rl);
  };
  limit(RLIMIT_AS, rlim_t(8) << 30);
  {
    // Soft below hard: past 150 s of CPU it ends with SIGXCPU (the candidate's verdict); SIGKILL is
    // then always someone else's (an equal hard limit would send SIGKILL itself).
    struct rlimit cpu{150, 160};
    setrlimit(RLIMIT_CPU, &cpu);
  }
  limit(RLIMIT_FSIZE, 0);
  limit(RLIMIT_CORE, 0);
  auto answer = [](const Json& head, const std::string& tail = "") {
    write_all(1, head.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n" + tail);
  };
  try {
    Json req = parse_json(read_all(0), "compiler child request");
    std::map<std::string, std::string> kernels = req.at("kernels").get<std::map<std::string, std::string>>();
    std::vector<std::string> names = req.at("names").get<std::vector<std::string>>();
    std::vector<std::string> flags = req.at("flags").get<std::vector<std::string>>();
    // NVRTC and its builtins are loaded before the confinement; reading is then allowed beneath
    // CUDA's include folders, and mapping code beneath NVRTC's own.
    cuda::Nvrtc::get();
    const std::string lib_dir = nvrtc_library_dir();
    Confinement c;
    for (const auto& d : req.at("read_dirs")) {
      c.read_dirs.push_back(d.get<std::string>());
      std::error_code ec;
      auto real = fs::canonical(d.get<std::string>(), ec);
      if (!ec) c.read_dirs.push_back(real.string());
    }
    if (!lib_dir.empty()) {
      c.exec_dirs.push_back(lib_dir);
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(lib_dir, ec)) {
        std::string f = e.path().filename().string();
        if (f.rfind("libnvrtc-builtins.so", 0) == 0) dlopen(e.path().c_str(), RTLD_NOW | RTLD_GLOBAL);
      }
    }
    std::string why, mode = confinement_mode();
    const char* opt_out = std::getenv("CUDA_AGENT_UNCONFINED_COMPILE");
    bool confined = mode == "landlock"    ? confine_process(c, &why)
                    : mode == "interpose" ? confine_by_interposition(c, &why)
                                          : (why = "CUDA_AGENT_CONFINE=" + mode + ": expected landlock or interpose", false);
    if (!confined) {
      if (!(opt_out && std::string(opt_out) == "1")) {
        answer({{"confine_error", mode + ": " + why}});
        return kChildConfineFailed;
      }
      mode = "none (CUDA_AGENT_UNCONFINED_COMPILE=1)";
    }
    CompileResult r = nvrtc_compile(kernels, names, flags);
    answer({{"ok", r.ok}, {"log", r.log}, {"lowered", r.lowered}, {"cubin_bytes", r.cubin.size()}, {"ptx_bytes", r.ptx.size()},
            {"confinement", mode}},
           r.cubin + r.ptx);
    return 0;
  } catch (const std::exception& e) {
    answer({{"internal_error", e.what()}});
    return kExitInternal;
  }
}

CompileResult compile_bundle(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                             const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<std::string> flags = {"-arch=" + options.arch, "-std=c++17", "-lineinfo", "-Xptxas=-v", "-default-device"};
  // CUDA's headers: include/, and include/cccl, where CUDA 13 keeps cooperative_groups, cuda/std and
  // the C library headers (stdint.h, float.h, limits.h) NVRTC offers.
  std::vector<std::string> include_dirs;
  for (const char* dir : std::vector<const char*>{std::getenv("CUDA_HOME"), "/usr/local/cuda"})
    if (dir && *dir && file_exists(std::string(dir) + "/include/cuda_fp16.h")) {
      include_dirs.push_back(std::string(dir) + "/include");
      if (fs::is_directory(std::string(dir) + "/include/cccl")) include_dirs.push_back(std::string(dir) + "/include/cccl");
      break;
    }
  for (const auto& d : include_dirs) flags.push_back("-I" + d);
  for (auto& f : options.extra_flags) flags.push_back(f);

  CompileResult r;
  r.flags = flags;
  for (const auto& [name, src] : kernels)
    if (std::string why = bad_file_name(name); !why.empty()) {
      r.first_error = "bundle file name " + Json(name).dump(-1, ' ', true, Json::error_handler_t::replace) + ": " + why;
      r.log = r.first_error;
      r.compile_ms = elapsed_ms();
      return r;
    }
  const auto& nv = cuda::Nvrtc::get();  // EnvironmentError without NVRTC, before anything else
  r.nvrtc_version = nv.version_text();
  Json key_doc = {{"nvrtc", r.nvrtc_version}, {"flags", r.flags}, {"names", names}, {"kernels", kernels}, {"shims", c_header_shims()}};
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

  CompileResult built = options.confined ? confined_compile(kernels, names, flags, include_dirs) : nvrtc_compile(kernels, names, flags);
  built.nvrtc_version = r.nvrtc_version;
  built.key = r.key;
  r = std::move(built);
  r.log = quote_only_bundle(r.log, kernels, include_dirs);
  if (!r.ok) {
    explain_failure(r);
    r.compile_ms = elapsed_ms();
    return r;
  }
  parse_ptxas_report(r.log, r);
  read_cubin_resources(r);
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

bool reserved_kernel_name(const std::string& name) {
  const std::string prefix = kReservedKernelPrefix;
  if (name.rfind(prefix, 0) == 0) return true;
  // A mangled name: each <length><identifier> of its qualified name (_Z15ca_scrub_sharedj,
  // _ZN2ns6ca_fooEv, _ZL6ca_barv), not its parameter types.
  if (name.rfind("_Z", 0) != 0) return false;
  size_t i = 2;
  if (i < name.size() && name[i] == 'L') ++i;
  const bool nested = i < name.size() && name[i] == 'N';
  if (nested) ++i;
  while (i < name.size() && (name[i] == 'r' || name[i] == 'V' || name[i] == 'K')) ++i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    size_t len = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && len < (size_t(1) << 20))
      len = len * 10 + size_t(name[i++] - '0');
    if (len == 0 || i + len > name.size()) return false;
    if (name.compare(i, prefix.size(), prefix) == 0) return true;
    i += len;
    if (!nested) break;
  }
  return false;
}

CUfunction trusted_kernel(const std::string& file, const char* source, const std::string& name) {
  if (!reserved_kernel_name(name)) throw InternalError("trusted kernel " + name + ": not named " + kReservedKernelPrefix + "...");
  static std::mutex mu;
  static std::map<std::pair<CUcontext, std::string>, CUfunction> loaded;
  auto& d = cuda::Driver::get();
  CUcontext ctx = nullptr;
  d.check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(ctx, name);
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  CUdevice dev;
  d.check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int major = 0, minor = 0;
  d.check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "compute capability");
  d.check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "compute capability");
  CompileOptions opt;
  opt.arch = "sm_" + std::to_string(major * 10 + minor);
  opt.confined = false;  // our own source: no confinement, no policy
  CompileResult r = compile_bundle({{file, source}}, {name}, opt);
  if (!r.ok) throw InternalError(name + " kernel: " + r.first_error);
  CUmodule module;
  d.check(d.cuModuleLoadData(&module, r.cubin.data()), "cuModuleLoadData(" + name + ")");
  CUfunction fn;
  d.check(d.cuModuleGetFunction(&fn, module, name.c_str()), "cuModuleGetFunction(" + name + ")");
  loaded[key] = fn;
  return fn;
}

}  // namespace ca::bundle
