// What the host launches of the native transformer's kernels (their sources: kernels/*.cu, one kernel
// per job, T float or __nv_bfloat16, every sum accumulated in fp32; each kernel's CPU twin is the
// function of the same name in libcommon/nn/ops.hpp), and the tile sizes the launches depend on.
#include "libcommon/nn_cuda/kernels.hpp"

#include <algorithm>

namespace ca::nn_cuda {

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const char* t : {"float", "__nv_bfloat16"}) {
    std::string T = t;
    for (const char* k : {"copy_rows", "embedding_forward", "embedding_backward", "rmsnorm_forward", "rmsnorm_backward",
                          "column_sum_add", "rope", "swiglu_forward", "swiglu_backward", "attention_backward_delta",
                          "token_logprob_forward", "token_logprob_backward", "adamw_step"})
      names.push_back(std::string(k) + "<" + T + ">");
    for (int D : kHeadDims) {
      names.push_back(attention_name("attention_forward", T, D));
      names.push_back(attention_name("attention_backward_dq", T, D));
      names.push_back(attention_name("attention_backward_dkv", T, D));
    }
  }
  for (int D : kTensorCoreHeadDims)
    for (const char* kernel : {"attention_forward_tc", "attention_backward_dq_tc", "attention_backward_dkv_tc"})
      names.push_back(attention_tc_name(kernel, D));
  names.push_back("attention_backward_kv_sum");
  names.push_back("convert<float, __nv_bfloat16>");
  names.push_back("convert<__nv_bfloat16, float>");
  names.push_back("sum_squares");
  names.push_back("scale_inplace");
  return names;
}

// Tiles: a query tile of 64 rows (32 when D = 128, to stay under 48 KiB of static shared memory) and
// key tiles of 32 (forward) or 16 (backward, where each thread holds two D-vectors in registers).
std::string attention_name(const std::string& kernel, const std::string& T, int D) {
  const int rows = D <= 64 ? 64 : 32;
  std::string d = std::to_string(D);
  if (kernel == "attention_forward") return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", 32>";
  if (kernel == "attention_backward_dq") return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", " + (D <= 64 ? "16" : "8") + ">";
  return kernel + "<" + T + ", " + d + ", " + std::to_string(rows) + ", " + (D <= 64 ? "16" : "8") + ">";
}

int attention_rows_per_block(int D) { return D <= 64 ? 64 : 32; }

// Tensor-core tiles: 64 rows per block; the streamed tile is 64 rows, or 32 at D = 128, which keeps
// each kernel under 48 KiB of shared memory (two stages of two streamed tiles).
namespace {
int tc_stream_rows(int D) { return D <= 64 ? 64 : 32; }
}  // namespace

std::string attention_tc_name(const std::string& kernel, int D) {
  return kernel + "<" + std::to_string(D) + ", " + std::to_string(tc_stream_rows(D)) + ">";
}

unsigned attention_tc_dynamic_smem(int D) {
  const int ld = D + 8, rows = 64, stream = tc_stream_rows(D);
  // the block's own two 64-row tiles first, then two stages of two streamed tiles (bf16)
  return unsigned(std::max(2 * rows * ld, 4 * stream * ld) * 2);
}

}  // namespace ca::nn_cuda
