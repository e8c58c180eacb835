// Reference kernels for the GPU tests and figures (see bench_kernels.hpp).
#include "tools/kernel-prof/bench_kernels.hpp"

#include <vector>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"

namespace ca::kernel_prof {

namespace {
// Grid-stride float4 copy: 16-byte loads and stores, enough blocks to fill every SM.
const char* kCopySource = R"(
extern "C" __global__ void copy_f4(const float4* __restrict__ src, float4* __restrict__ dst, unsigned long long n4) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n4;
       i += (unsigned long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}
)";

std::vector<CUdeviceptr> alloc_filled(std::size_t bytes, int count, unsigned base) {
  auto& drv = cuda::Driver::get();
  std::vector<CUdeviceptr> out;
  for (int i = 0; i < count; ++i) {
    CUdeviceptr p = 0;
    drv.check(drv.cuMemAlloc(&p, bytes), "cuMemAlloc");
    drv.check(drv.cuMemsetD32(p, base + unsigned(i), bytes / 4), "cuMemsetD32");
    out.push_back(p);
  }
  return out;
}
}  // namespace

CopyKernelTarget::CopyKernelTarget(std::size_t n_floats, int sets, const std::string& arch) : n_(n_floats) {
  auto& drv = cuda::Driver::get();
  bundle::CompileOptions opt;
  opt.confined = false;  // the project's own kernels
  opt.arch = arch;
  auto r = bundle::compile_bundle({{"copy.cu", kCopySource}}, {"copy_f4"}, opt);
  if (!r.ok) throw InternalError("copy kernel: " + r.first_error);
  drv.check(drv.cuModuleLoadData(&module_, r.cubin.data()), "cuModuleLoadData");
  drv.check(drv.cuModuleGetFunction(&fn_, module_, "copy_f4"), "cuModuleGetFunction");
  src_ = alloc_filled(n_ * 4, sets, 0x3f800000u);  // 1.0f, 1.0f+ulp, ...
  dst_ = alloc_filled(n_ * 4, sets, 0);
}

CopyKernelTarget::~CopyKernelTarget() {
  auto& drv = cuda::Driver::get();
  for (auto p : src_) drv.cuMemFree(p);
  for (auto p : dst_) drv.cuMemFree(p);
  if (module_) drv.cuModuleUnload(module_);
}

void CopyKernelTarget::enqueue(int set, CUstream stream) {
  auto& drv = cuda::Driver::get();
  unsigned long long n4 = n_ / 4;
  void* args[] = {&src_[set], &dst_[set], &n4};
  unsigned block = 256;
  unsigned long long want = (n4 + block - 1) / block;
  unsigned grid = unsigned(want < 132ull * 16 ? (want ? want : 1) : 132ull * 16);  // <= 16 blocks per SM, grid-stride beyond
  drv.check(drv.cuLaunchKernel(fn_, grid, 1, 1, block, 1, 1, 0, stream, args, nullptr), "cuLaunchKernel(copy_f4)");
}

bool CopyKernelTarget::verify(int set) const {
  auto& drv = cuda::Driver::get();
  std::vector<unsigned> a(1024), b(1024);
  std::size_t off = (n_ / 2) * 4;
  drv.check(drv.cuMemcpyDtoH(a.data(), src_[set] + off, 4096), "DtoH");
  drv.check(drv.cuMemcpyDtoH(b.data(), dst_[set] + off, 4096), "DtoH");
  return a == b;
}

MemcpyTarget::MemcpyTarget(std::size_t n_floats, int sets) : n_(n_floats) {
  src_ = alloc_filled(n_ * 4, sets, 7);
  dst_ = alloc_filled(n_ * 4, sets, 0);
}

MemcpyTarget::~MemcpyTarget() {
  auto& drv = cuda::Driver::get();
  for (auto p : src_) drv.cuMemFree(p);
  for (auto p : dst_) drv.cuMemFree(p);
}

void MemcpyTarget::enqueue(int set, CUstream stream) {
  auto& drv = cuda::Driver::get();
  drv.check(drv.cuMemcpyDtoDAsync(dst_[set], src_[set], n_ * 4, stream), "cuMemcpyDtoDAsync");
}

}  // namespace ca::kernel_prof
