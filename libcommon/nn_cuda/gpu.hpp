// The GPU the native transformer runs on: the primary context, one stream, the NVRTC-compiled module
// of ops/*.cu (kernels.hpp; cubins cached on disk by libcommon/bundle), a cuBLASLt handle with its
// workspace, and device buffers. Everything is opened with dlopen (libcommon/cuda): without a driver,
// Gpu's constructor throws EnvironmentError, and nothing else here touches the device.
//
//   ca::nn_cuda::Gpu gpu(0);
//   ca::nn_cuda::Buffer x(gpu, n * sizeof(float));
//   gpu.launch("rmsnorm_forward<float>", {rows}, {256}, 0, {&y, &rstd, &x, &w, &C, &eps});
#pragma once
#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libcommon/cuda/cublaslt.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::nn_cuda {

enum class DType { F32, BF16 };
inline std::size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
inline const char* dtype_cpp(DType t) { return t == DType::F32 ? "float" : "__nv_bfloat16"; }
inline const char* dtype_name(DType t) { return t == DType::F32 ? "f32" : "bf16"; }
DType parse_dtype(const std::string& name);  // "f32"/"fp32"/"float32", "bf16"/"bfloat16"; InputError otherwise
// A --device option of the tools that run the native model: "cpu" gives -1, "cuda" 0, "cuda:N" N;
// anything else is a UsageError naming `option`.
int parse_device(const std::string& spec, const std::string& option = "--device");

// Host-side bf16 (round to nearest even): libcommon/safetensors.hpp's.
using ca::bf16_to_float;
using ca::float_to_bf16;

class Gpu {
 public:
  explicit Gpu(int ordinal = 0);  // EnvironmentError without driver, GPU, NVRTC or cuBLASLt
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  const cuda::Driver& drv() const { return *drv_; }
  const cuda::DeviceInfo& info() const { return info_; }
  CUstream stream() const { return stream_; }
  void check(CUresult r, const char* what) const;
  void sync() const;
  // The driver's context is per thread: a thread other than the constructing one calls this before
  // its first GPU call. (Gpu is not thread-safe: callers serialize their use of it.)
  void make_current() const;

  // Launches a kernel of the module by its name expression (one of kernel_names(), kernels.hpp); args
  // are pointers to the arguments.
  void launch(const std::string& name, std::vector<unsigned> grid, std::vector<unsigned> block, unsigned shared_bytes,
              std::vector<void*> args) const;

  // Device memory through the driver, counted so a benchmark can report the peak (bytes in use
  // including the cuBLASLt workspace).
  CUdeviceptr alloc(std::size_t bytes);
  void free(CUdeviceptr p, std::size_t bytes);
  std::size_t bytes_in_use() const { return in_use_; }
  std::size_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = in_use_; }

  void upload(CUdeviceptr dst, const void* src, std::size_t bytes) const;
  void download(void* dst, CUdeviceptr src, std::size_t bytes) const;
  void memset0(CUdeviceptr dst, std::size_t bytes) const;

  // D[m, n] = alpha * op(A) op(B) + beta * C in cuBLASLt's column-major terms; see ops/matmul.cpp
  // for the row-major mapping. a/b in `in` dtype, c/d in `out` dtype, fp32 compute (no TF32).
  struct Gemm {
    bool trans_a = false, trans_b = false;
    int m = 0, n = 0, k = 0;
    CUdeviceptr a = 0, b = 0, c = 0, d = 0, bias = 0;  // bias: length m, `out` dtype (epilogue)
    int lda = 0, ldb = 0, ldc = 0;
    float alpha = 1.f, beta = 0.f;
    DType in = DType::F32, out = DType::F32;
  };
  void gemm(const Gemm& g);

  // Stream-ordered scratch memory: grows (contents lost) to at least `bytes` and stays allocated. Only
  // valid until the next call, which is safe because all work runs on one stream.
  CUdeviceptr scratch(std::size_t bytes);

  // bf16 attention on tensor cores (ops/attention.cpp); false selects the fp32-FMA kernels, for
  // comparison.
  // CA_NN_CUDA_ATTENTION=fma in the environment sets it false.
  bool tensor_core_attention = true;

  // Per-kernel GPU time, for finding where a step goes: with CA_NN_CUDA_PROFILE=1 in the environment
  // every launch and GEMM is bracketed by CUDA events (which costs a little), and profile_report()
  // writes the totals by kernel to stderr, largest first, and starts over.
  bool profiling() const { return profile_ != nullptr; }
  void profile_report(const std::string& title);
  void profile_reset();

 private:
  struct GemmPlan;
  struct Profile;
  void profile_begin(const std::string& name) const;
  void profile_end() const;
  std::unique_ptr<Profile> profile_;
  CUdeviceptr scratch_ = 0;
  std::size_t scratch_bytes_ = 0;
  const cuda::Driver* drv_ = nullptr;
  cuda::DeviceInfo info_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  std::map<std::string, CUfunction> functions_;
  const cuda::CublasLt* lt_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  CUdeviceptr workspace_ = 0;
  std::size_t workspace_bytes_ = 32u << 20;
  std::map<std::string, std::shared_ptr<GemmPlan>> gemm_plans_;
  std::size_t in_use_ = 0, peak_ = 0;
};

// An owned device allocation (moves, never copies).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Gpu& gpu, std::size_t bytes) : gpu_(&gpu), bytes_(bytes) { ptr_ = bytes ? gpu.alloc(bytes) : 0; }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : gpu_(o.gpu_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      gpu_ = o.gpu_, ptr_ = o.ptr_, bytes_ = o.bytes_;
      o.ptr_ = 0, o.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void reset() {
    if (ptr_) gpu_->free(ptr_, bytes_);
    ptr_ = 0;
    bytes_ = 0;
  }
  // Grows (contents lost) when smaller than `bytes`.
  void ensure(Gpu& gpu, std::size_t bytes) {
    if (bytes_ < bytes) {
      reset();
      gpu_ = &gpu;
      bytes_ = bytes;
      ptr_ = gpu.alloc(bytes);
    }
  }
  CUdeviceptr ptr() const { return ptr_; }
  CUdeviceptr at(std::size_t byte_offset) const { return ptr_ + byte_offset; }
  std::size_t bytes() const { return bytes_; }

 private:
  Gpu* gpu_ = nullptr;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

// Host vector <-> device buffer of a dtype (floats on the host side).
Buffer to_device(Gpu& gpu, const std::vector<float>& host, DType dtype);
std::vector<float> to_host(const Gpu& gpu, CUdeviceptr src, std::size_t count, DType dtype);

}  // namespace ca::nn_cuda
