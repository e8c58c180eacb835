// Causal grouped-query attention on the GPU: attention_forward, attention_backward, attention_supports
// (declared in libcommon/nn_cuda/ops.hpp), on the FMA kernels of attention.cu (any T, head sizes
// kHeadDims) or the tensor-core kernels of attention_tc.cu (bf16, sm_80+, kTensorCoreHeadDims).
//   CPU twin  ca::nn::attention_forward, ca::nn::attention_backward (libcommon/nn/ops.hpp)
//   test      tests/nn_cuda/ops/attention_test.cpp
#include "libcommon/nn_cuda/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> attention_kernels() {
  std::vector<std::string> names = for_both_dtypes({"attention_backward_delta"});
  for (const char* T : {"float", "__nv_bfloat16"})
    for (int D : kHeadDims)
      for (const char* kernel : {"attention_forward", "attention_backward_dq", "attention_backward_dkv"})
        names.push_back(attention_name(kernel, T, D));
  for (int D : kTensorCoreHeadDims)
    for (const char* kernel : {"attention_forward_tc", "attention_backward_dq_tc", "attention_backward_dkv_tc"})
      names.push_back(attention_tc_name(kernel, D));
  names.push_back("attention_backward_kv_sum");
  return names;
}

}  // namespace ops

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

bool attention_supports(int D) {
  for (int d : kHeadDims)
    if (d == D) return true;
  return false;
}

namespace {
// The tensor-core kernels take bf16 rows whose starts are 16-byte aligned (they load 8 elements at a
// time) on sm_80 or newer; everything else, and fp32, goes to the FMA kernels.
bool use_tensor_cores(const Gpu& gpu, DType dt, int D, std::initializer_list<Ptr> ptrs, std::initializer_list<int> lds) {
  if (dt != DType::BF16 || !gpu.tensor_core_attention || gpu.info().cc_major < 8) return false;
  if (std::find(std::begin(kTensorCoreHeadDims), std::end(kTensorCoreHeadDims), D) == std::end(kTensorCoreHeadDims))
    return false;
  for (Ptr p : ptrs)
    if (p % 16 != 0) return false;
  for (int ld : lds)
    if (ld % 8 != 0) return false;
  return true;
}
void check_head_dim(int D) {
  if (!attention_supports(D)) throw InputError("nn_cuda attention: head_dim " + std::to_string(D) + " is not one of 16, 32, 64, 128");
}
constexpr int kTensorCoreRows = 64;  // query rows (forward, dq) or key rows (dkv) per block
using ops::cdiv;
}  // namespace

void attention_forward(Gpu& gpu, DType dt, Ptr out, int ldo, Ptr lse, Ptr q, int ldq, Ptr k_, Ptr v, int ldkv, int Tq,
                       int Tk, int pos0, int H, int KV, int D) {
  check_head_dim(D);
  float scale = float(1.0 / std::sqrt(double(D)));
  if (use_tensor_cores(gpu, dt, D, {out, q, k_, v}, {ldo, ldq, ldkv})) {
    gpu.launch(attention_tc_name("attention_forward_tc", D), {cdiv(Tq, kTensorCoreRows), unsigned(H)}, {128},
               attention_tc_dynamic_smem(D),
               {&out, &ldo, &lse, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
    return;
  }
  const int rows = attention_rows_per_block(D);
  gpu.launch(attention_name("attention_forward", dtype_cpp(dt), D), {cdiv(Tq, rows), unsigned(H)}, {unsigned(rows)}, 0,
             {&out, &ldo, &lse, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
}

void attention_backward(Gpu& gpu, DType dt, Ptr dq, int lddq, Ptr dk, Ptr dv, int lddkv, Ptr dout, Ptr out, int ldo,
                        Ptr lse, Ptr delta, Ptr q, int ldq, Ptr k_, Ptr v, int ldkv, int Tq, int Tk, int pos0, int H,
                        int KV, int D) {
  check_head_dim(D);
  float scale = float(1.0 / std::sqrt(double(D)));
  gpu.launch(ops::kernel("attention_backward_delta", dt), {unsigned(Tq)}, {128}, 0,
             {&delta, &dout, &out, &ldo, &Tq, &H, &D});
  if (use_tensor_cores(gpu, dt, D, {dq, dk, dv, dout, q, k_, v}, {lddq, lddkv, ldo, ldq, ldkv})) {
    gpu.launch(attention_tc_name("attention_backward_dq_tc", D), {cdiv(Tq, kTensorCoreRows), unsigned(H)}, {128},
               attention_tc_dynamic_smem(D),
               {&dq, &lddq, &dout, &ldo, &lse, &delta, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
    // Per-head fp32 partials of dk and dv, summed over each group by a second kernel.
    const std::size_t part = std::size_t(H) * Tk * D;
    Ptr dk_part = gpu.scratch(2 * part * 4), dv_part = dk_part + part * 4;
    gpu.launch(attention_tc_name("attention_backward_dkv_tc", D), {cdiv(Tk, kTensorCoreRows), unsigned(H)}, {128},
               attention_tc_dynamic_smem(D),
               {&dk_part, &dv_part, &dout, &ldo, &lse, &delta, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
    gpu.launch("attention_backward_kv_sum", {unsigned(Tk)}, {128}, 0,
               {&dk, &dv, &lddkv, &dk_part, &dv_part, &Tk, &H, &KV, &D});
    return;
  }
  const int rows = attention_rows_per_block(D);
  gpu.launch(attention_name("attention_backward_dq", dtype_cpp(dt), D), {cdiv(Tq, rows), unsigned(H)}, {unsigned(rows)}, 0,
             {&dq, &lddq, &dout, &ldo, &lse, &delta, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
  gpu.launch(attention_name("attention_backward_dkv", dtype_cpp(dt), D), {cdiv(Tk, rows), unsigned(KV)}, {unsigned(rows)}, 0,
             {&dk, &dv, &lddkv, &dout, &ldo, &lse, &delta, &q, &ldq, &k_, &v, &ldkv, &Tq, &Tk, &pos0, &H, &KV, &scale});
}

}  // namespace ca::nn_cuda
