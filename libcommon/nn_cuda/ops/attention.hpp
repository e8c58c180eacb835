// The attention family's tiles (ops/attention.cpp): the head sizes its kernels are instantiated for
// and the name expressions and block shapes that go with them, for the launchers and the tests that
// check them (tests/nn_cuda/compile_test.cpp, runtime_test.cpp).
#pragma once
#include <string>

namespace ca::nn_cuda {

// Head sizes the fused attention kernels (attention.cu) are instantiated for (the head size is a
// template argument so the per-thread rows live in registers).
inline constexpr int kHeadDims[] = {16, 32, 64, 128};
// Name expression of an attention kernel ("attention_forward", "attention_backward_dq",
// "attention_backward_dkv") for element type T ("float", "__nv_bfloat16") and head size D.
std::string attention_name(const std::string& kernel, const std::string& T, int D);
int attention_rows_per_block(int D);  // query rows (forward, dq) or key rows (dkv) per block
// The tensor-core (mma.sync, bf16) attention kernels (attention_tc.cu): head sizes, and the name
// expression of "attention_forward_tc", "attention_backward_dq_tc" or "attention_backward_dkv_tc" for
// head size D.
inline constexpr int kTensorCoreHeadDims[] = {64, 128};
std::string attention_tc_name(const std::string& kernel, int D);
unsigned attention_tc_dynamic_smem(int D);  // bytes of dynamic shared memory each of the three takes

}  // namespace ca::nn_cuda
