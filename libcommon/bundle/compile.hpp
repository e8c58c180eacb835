// NVRTC compilation of a bundle's kernels, with a cubin cache on disk keyed by
// sha256(sources, name expressions, flags, NVRTC version), written atomically; per-kernel
// resources (registers, static shared memory, stack, spills) and module-scope device memory.
//
//   CompileOptions opt; opt.arch = "sm_90";
//   CompileResult r = compile_bundle(kernels, plan.kernel_names(), opt);
//   if (!r.ok) ... r.first_error ...; else r.cubin, r.lowered["softmax<256>"], r.resources
#pragma once
#include <cuda.h>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "libcommon/bundle/ptx_scan.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/jsonl.hpp"

namespace ca::bundle {

struct CompileOptions {
  std::string arch = "sm_90";             // sm_XX
  std::vector<std::string> extra_flags;   // appended to the defaults
  std::string cache_dir;                  // empty: default_cache_dir()
  bool use_cache = true;
  // NVRTC runs in a child confined with Landlock to CUDA's headers (a candidate's #include lines are
  // the attacker's): the program's own binary started as `<self> --nvrtc-child`, which every tool's
  // ca::Cli::run answers. false only for the project's own kernels (nn_cuda, benchmarks).
  bool confined = true;
};

// argv[1] of the confined compiler child, registered with libcommon/child_main.hpp where the child is
// launched (compile_child.cpp): a program's main hands it on through child_main_for() (ca::Cli::run
// does; so does the unit tests' main).
inline constexpr const char* kCompileChildFlag = "--nvrtc-child";
// The child: a request on stdin, the compile result on stdout. Returns the exit code.
int compile_child_main();

struct KernelResources {
  std::string mangled;
  int registers = 0;
  int64_t static_shared_bytes = 0, stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0;
  Json to_json() const;
};

struct CompileResult {
  bool ok = false;
  bool cached = false;
  double compile_ms = 0;
  std::string log;          // NVRTC's whole log (ptxas -v lines included)
  std::string first_error;  // "fused.cu(3): error: expected a \";\""
  bool name_error = false;  // the failure is in a kernel name expression (a plan problem)
  std::string failed_name;  // that name expression
  std::string cubin, ptx;
  std::map<std::string, std::string> lowered;  // name expression -> mangled name
  std::vector<std::string> flags;
  std::string nvrtc_version, key;
  std::string confinement;  // how the compiler ran: landlock, interpose, or empty (unconfined/cached)
  std::map<std::string, KernelResources> resources;  // by mangled name
  int64_t module_global_bytes = 0;    // writable __device__ memory (.nv.global + .nv.global.init)
  int64_t module_constant_bytes = 0;  // __constant__ memory (the constant banks that hold variables,
                                      // .nv.constant3): writable too, through a symbol's generic address
  // Per-thread local memory by function (cubin_local_bytes); nullopt: the cubin's could not be read.
  std::optional<std::map<std::string, int64_t>> local_bytes;
  Json resources_json() const;
};

// The compiler's warnings in a compile's log (a compile that succeeded may still warn of code it
// compiled to a trap: a store through a __constant__ variable's address), for the check record.
std::vector<std::string> compile_warnings(const std::string& log);

std::string default_cache_dir();
// The main translation unit includes every .cu/.cpp file of the bundle in name order; .cuh/.h files
// are headers only. Never throws for a compile error (r.ok = false); EnvironmentError without NVRTC.
CompileResult compile_bundle(const std::map<std::string, std::string>& kernels, const std::vector<std::string>& names,
                             const CompileOptions& options);
// The namespace of the toolchain's own kernels (ca_scrub_shared, ca_fingerprint, ca_compare, ...):
// a bundle kernel named in it is refused (rule reserved_name), and trusted_kernel takes no other name.
inline constexpr const char* kReservedKernelPrefix = "ca_";
// Whether a kernel's name (as the PTX or CUPTI spell it, mangled or not) is in that namespace: the
// name itself, or the unqualified name a mangled one carries (_Z15ca_scrub_sharedj, _ZN2ns6ca_fooEv).
bool reserved_kernel_name(const std::string& name);
// One of the toolchain's own kernels (trusted source, extern "C" `name`), compiled once per process
// and context for the current context's device, loaded, and returned. Thread-safe. Throws
// InternalError when it does not compile or `name` is not in kReservedKernelPrefix's namespace,
// cuda::CudaError when it does not load.
CUfunction trusted_kernel(const std::string& file, const char* source, const std::string& name);
// Signatures of the compiled kernels, by name expression (mangled name first, PTX as fallback).
std::map<std::string, KernelSignature> signatures_of(const CompileResult& r);
// (ptx_precision, kernel_precisions and the rest of the PTX reading: libcommon/bundle/ptx_scan.hpp.)
// Section sizes of a cubin (ELF): {".nv.global": 400, ".nv.shared._Z2k2ILi128EEvPf": 512, ...}.
std::map<std::string, int64_t> cubin_sections(const std::string& cubin);
// The module-scope variables of a cubin a kernel can write, by symbol name with their sizes: what the
// executor restores before every call. __device__ objects (.nv.global, .nv.global.init, managed
// ones too) and __constant__ ones (.nv.constant3 and any other bank but the parameters' bank 0): a
// kernel writes a constant table through the generic address of its symbol.
std::map<std::string, int64_t> cubin_writable_globals(const std::string& cubin);
// The same variables by section: each section's size (sh_size) and its variables' offsets in it (the
// symbols' values): the compile report's module-byte cap counts sections; the executor restores
// each variable (the driver does not keep a section's layout: Executor::keep_module_images). Throws
// when the ELF cannot be read.
struct ModuleObject {
  std::string name;
  int64_t offset = 0, bytes = 0;
};
struct ModuleSection {
  std::string name;
  int64_t bytes = 0;
  std::vector<ModuleObject> objects;
};
std::vector<ModuleSection> cubin_writable_sections(const std::string& cubin);
// The section of each of those variables ({"g_table": ".nv.global.init", "c_k": ".nv.constant3"}).
std::map<std::string, std::string> cubin_object_sections(const std::string& cubin);
// The functions a cubin calls but does not define (undefined FUNC symbols: malloc, free, vprintf, ...).
std::set<std::string> cubin_undefined_functions(const std::string& cubin);
// The local memory one thread of each function needs, by symbol (kernels, device functions and their
// per-kernel clones), from the cubin's .nv.info: the larger of its frame (EIATTR_FRAME_SIZE) and, for
// a kernel, its minimum stack (EIATTR_MIN_STACK_SIZE: its frame and its callees'). What the driver
// sizes a launch's local memory by (for every thread the GPU can hold at once), read from what runs,
// not from ptxas's log. nullopt when the section cannot be read that way.
std::optional<std::map<std::string, int64_t>> cubin_local_bytes(const std::string& cubin);

}  // namespace ca::bundle
