// The native transformer's CUDA kernels (libcommon/nn_cuda/kernels/*.cu, compiled by NVRTC at run
// time as one translation unit), and the template instantiations the host code launches (name
// expressions: "rmsnorm_forward<__nv_bfloat16>").
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ca::nn_cuda {

// The sources by their path in the repository (embedded at build time), as compile_bundle takes them.
const std::map<std::string, std::string>& kernel_sources();
// Head sizes the fused attention kernels are instantiated for (the head size is a template argument
// so the per-thread rows live in registers).
inline constexpr int kHeadDims[] = {16, 32, 64, 128};
std::vector<std::string> kernel_names();
// Name expression of an attention kernel ("attention_forward", "attention_backward_dq",
// "attention_backward_dkv") for element type T ("float", "__nv_bfloat16") and head size D.
std::string attention_name(const std::string& kernel, const std::string& T, int D);
int attention_rows_per_block(int D);  // query rows (forward, dq) or key rows (dkv) per block
// The tensor-core (mma.sync, bf16) attention kernels: head sizes, and the name expression of
// "attention_forward_tc", "attention_backward_dq_tc" or "attention_backward_dkv_tc" for head size D.
inline constexpr int kTensorCoreHeadDims[] = {64, 128};
std::string attention_tc_name(const std::string& kernel, int D);
unsigned attention_tc_dynamic_smem(int D);  // bytes of dynamic shared memory each of the three takes

}  // namespace ca::nn_cuda
