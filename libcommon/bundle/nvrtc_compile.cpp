// The compile itself: NVRTC on a bundle's sources (one main translation unit including each source
// file, the C header shims beside them), in whatever process calls it.
#include <filesystem>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/bundle/compile_detail.hpp"
#include "libcommon/cuda/nvrtc.hpp"

namespace fs = std::filesystem;

namespace ca::bundle::detail {

// <float.h>'s macros: libcu++'s <cuda/std/cfloat> is empty under NVRTC (FLT_MAX "is undefined"),
// while its <cuda/std/climits> defines their __FLT_*__ / __DBL_*__ spellings there.
#define CA_FLOAT_MACRO(name, builtin) "#ifndef " name "\n#define " name " " builtin "\n#endif\n"
const char* const kFloatShim =
    "#pragma once\n#include <cuda/std/climits>\n"
    CA_FLOAT_MACRO("FLT_RADIX", "__FLT_RADIX__") CA_FLOAT_MACRO("FLT_MANT_DIG", "__FLT_MANT_DIG__")
    CA_FLOAT_MACRO("DBL_MANT_DIG", "__DBL_MANT_DIG__") CA_FLOAT_MACRO("FLT_DIG", "__FLT_DIG__") CA_FLOAT_MACRO("DBL_DIG", "__DBL_DIG__")
    CA_FLOAT_MACRO("FLT_MIN_EXP", "__FLT_MIN_EXP__") CA_FLOAT_MACRO("DBL_MIN_EXP", "__DBL_MIN_EXP__")
    CA_FLOAT_MACRO("FLT_MIN_10_EXP", "__FLT_MIN_10_EXP__") CA_FLOAT_MACRO("DBL_MIN_10_EXP", "__DBL_MIN_10_EXP__")
    CA_FLOAT_MACRO("FLT_MAX_EXP", "__FLT_MAX_EXP__") CA_FLOAT_MACRO("DBL_MAX_EXP", "__DBL_MAX_EXP__")
    CA_FLOAT_MACRO("FLT_MAX_10_EXP", "__FLT_MAX_10_EXP__") CA_FLOAT_MACRO("DBL_MAX_10_EXP", "__DBL_MAX_10_EXP__")
    CA_FLOAT_MACRO("FLT_MAX", "__FLT_MAX__") CA_FLOAT_MACRO("DBL_MAX", "__DBL_MAX__") CA_FLOAT_MACRO("FLT_MIN", "__FLT_MIN__")
    CA_FLOAT_MACRO("DBL_MIN", "__DBL_MIN__") CA_FLOAT_MACRO("FLT_EPSILON", "__FLT_EPSILON__")
    CA_FLOAT_MACRO("DBL_EPSILON", "__DBL_EPSILON__") CA_FLOAT_MACRO("FLT_TRUE_MIN", "__FLT_DENORM_MIN__")
    CA_FLOAT_MACRO("DBL_TRUE_MIN", "__DBL_DENORM_MIN__");
#undef CA_FLOAT_MACRO

// The C library headers SKILL.md allows, which CUDA 13 no longer has beside cuda_runtime.h: each
// becomes libcu++'s own (include/cccl/cuda/std), which NVRTC can compile, or (float.h) the
// compiler's predefined values. A bundle file of the same name wins.
const std::map<std::string, std::string>& c_header_shims() {
  static const std::map<std::string, std::string> shims = {
      {"stdint.h", "#pragma once\n#include <cuda/std/cstdint>\n"}, {"cstdint", "#pragma once\n#include <cuda/std/cstdint>\n"},
      {"float.h", kFloatShim},                                     {"cfloat", kFloatShim},
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

}  // namespace ca::bundle::detail
