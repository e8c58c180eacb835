// Compiling a bundle: its file names checked, the flags and CUDA's include folders, the cache looked
// up, NVRTC run (confined in a child, or here for the toolchain's own kernels), the result read; the
// toolchain's trusted kernels compiled and loaded. The parts: nvrtc_compile.cpp, compile_child.cpp,
// compile_cache.cpp, compile_report.cpp, cubin.cpp.
#include "libcommon/bundle/compile.hpp"

#include <cxxabi.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "libcommon/bundle/compile_detail.hpp"
#include "libcommon/byte_regex.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "libcommon/paths.hpp"

namespace fs = std::filesystem;

namespace ca::bundle {

using detail::c_header_shims;
using detail::confined_compile;
using detail::explain_failure;
using detail::load_cached;
using detail::nvrtc_compile;
using detail::parse_ptxas_report;
using detail::quote_only_bundle;
using detail::read_cubin_resources;
using detail::store_cached;

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

}  // namespace

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
  if (options.use_cache) store_cached(base, r);
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

namespace {

// The identifiers of a demangled name's qualified name, scopes and templates' own names alike, not
// its template arguments, parameters or return type: "void a::b::ca_k<2>(float*)" -> a, b, ca_k;
// "std::ca_k(int)" -> std, ca_k; "(anonymous namespace)::ca_k()" -> ca_k.
std::vector<std::string> qualified_name_parts(std::string d) {
  const std::string anonymous = "(anonymous namespace)";
  for (size_t at = d.find(anonymous); at != std::string::npos; at = d.find(anonymous, at)) d.replace(at, anonymous.size(), "anon");
  std::vector<std::string> parts;
  std::string word;
  int angle = 0;
  for (char ch : d) {
    const bool ident = std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '$';
    if (ident && angle == 0) {
      word += ch;
      continue;
    }
    if (!word.empty()) parts.push_back(word);
    word.clear();
    if (ch == '<') ++angle;
    else if (ch == '>' && angle > 0) --angle;
    else if (ch == '(' && angle == 0) return parts;  // the parameter list
    else if (ch == ' ' && angle == 0) parts.clear();  // what came before was the return type
  }
  if (!word.empty()) parts.push_back(word);
  return parts;
}

}  // namespace

bool reserved_kernel_name(const std::string& name) {
  const std::string prefix = kReservedKernelPrefix;
  auto reserved = [&](const std::string& id) { return id.rfind(prefix, 0) == 0; };
  if (reserved(name)) return true;
  if (name.rfind("_Z", 0) != 0) return false;
  // A mangled name, read by the C++ runtime's own demangler, so that every way of qualifying it
  // counts (_Z15ca_scrub_sharedj, _ZN2ns6ca_fooEv, _ZSt5ca_kv in namespace std, templates,
  // anonymous namespaces): any part of its qualified name in the namespace.
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  if (status == 0 && d) {
    for (const auto& part : qualified_name_parts(d.get()))
      if (reserved(part)) return true;
    return false;
  }
  // Not a name the demangler reads (ptxas would not accept it as a kernel's either): each
  // <length><identifier> of it.
  for (size_t i = 2; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i])) || std::isdigit(static_cast<unsigned char>(name[i - 1]))) continue;
    size_t len = 0, k = i;
    while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k])) && len < (size_t(1) << 20))
      len = len * 10 + size_t(name[k++] - '0');
    if (len > 0 && k + len <= name.size() && name.compare(k, prefix.size(), prefix) == 0) return true;
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
