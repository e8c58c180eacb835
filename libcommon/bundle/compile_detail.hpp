// What the compiler's files share (compile.cpp, nvrtc_compile.cpp, compile_child.cpp,
// compile_cache.cpp, compile_report.cpp): the compile in this process or in the confined child, the
// cubin cache's entries, and the reading of the compiler's log. Internal to libcommon/bundle.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "libcommon/bundle/compile.hpp"

namespace ca::bundle::detail {

// nvrtc_compile.cpp
// The C library headers SKILL.md allows, which CUDA 13 no longer has beside cuda_runtime.h, by name:
// each includes libcu++'s own. A bundle file of the same name wins.
const std::map<std::string, std::string>& c_header_shims();
// The compile itself: NVRTC on the bundle's sources, in whatever process calls it.
CompileResult nvrtc_compile(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                            const std::vector<std::string>& flags);

// compile_child.cpp
// The confined compile: this program again, as `<self> --nvrtc-child`, in a clean environment.
CompileResult confined_compile(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                               const std::vector<std::string>& flags, const std::vector<std::string>& include_dirs);

// compile_cache.cpp
// Reads the cache entry at `base` (base.json, .cubin, .ptx) into `r`; false when there is none or it
// is damaged (then it is compiled and written again).
bool load_cached(const std::string& base, CompileResult& r);
// Writes `r` as the cache entry at `base`, its .json last; a cache that cannot be written is not fatal.
void store_cached(const std::string& base, const CompileResult& r);

// compile_report.cpp
// Per-kernel resources from the ptxas -v lines of NVRTC's log.
void parse_ptxas_report(const std::string& log, CompileResult& r);
// Static shared memory per kernel and the module's __device__ and __constant__ bytes, from the cubin.
void read_cubin_resources(CompileResult& r);
// A failed compile's first error, and whether it is in a plan's kernel name expression.
void explain_failure(CompileResult& r);
// The log with every message located outside the bundle's files (and CUDA's headers) withheld.
std::string quote_only_bundle(const std::string& log, const std::map<std::string, std::string>& kernels,
                              const std::vector<std::string>& include_dirs);

}  // namespace ca::bundle::detail
