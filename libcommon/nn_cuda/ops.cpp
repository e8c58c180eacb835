// Host launchers of the GPU ops: shapes to grids, the row-major to cuBLASLt column-major mapping.
#include "libcommon/nn_cuda/ops.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/kernels.hpp"

namespace ca::nn_cuda {

namespace {
std::string k(const char* name, DType dt) { return std::string(name) + "<" + dtype_cpp(dt) + ">"; }
unsigned cdiv(long long a, long long b) { return unsigned((a + b - 1) / b); }
// Column sums run 256 columns per block and this many rows per block, finished with atomics.
constexpr int kColumnRows = 64;
}  // namespace

// Row-major out[rows, N] = in[rows, K] w[N, K]^T is, column-major, out^T (N x rows) = w^T... :
// A = w seen as K x N (lda K) transposed, B = in seen as K x rows (ldb K), C = out (ldc N).
void matmul_forward(Gpu& gpu, DType dt, Ptr out, Ptr in, Ptr w, Ptr bias, int rows, int K, int N, Ptr residual) {
  Gpu::Gemm g;
  g.trans_a = true;
  g.m = N, g.n = rows, g.k = K;
  g.a = w, g.lda = K;
  g.b = in, g.ldb = K;
  g.c = residual ? residual : out, g.d = out, g.ldc = N;
  g.beta = residual ? 1.f : 0.f;
  g.bias = bias;
  g.in = g.out = dt;
  if (bias && residual) throw InternalError("nn_cuda matmul_forward: bias and residual together are not supported");
  gpu.gemm(g);
}

void matmul_backward(Gpu& gpu, DType dt, Ptr din, bool accumulate_din, Ptr dw, Ptr dbias, Ptr dout, Ptr in, Ptr w,
                     int rows, int K, int N) {
  if (din) {  // din (K x rows) = w (K x N, ld K) * dout (N x rows, ld N)
    Gpu::Gemm g;
    g.m = K, g.n = rows, g.k = N;
    g.a = w, g.lda = K;
    g.b = dout, g.ldb = N;
    g.d = din, g.ldc = K;
    g.beta = accumulate_din ? 1.f : 0.f;
    g.in = g.out = dt;
    gpu.gemm(g);
  }
  if (dw) {  // dw (K x N, ld K) += in (K x rows) * dout^T (rows x N)
    Gpu::Gemm g;
    g.trans_b = true;
    g.m = K, g.n = N, g.k = rows;
    g.a = in, g.lda = K;
    g.b = dout, g.ldb = N;
    g.d = dw, g.ldc = K;
    g.beta = 1.f;
    g.in = dt, g.out = DType::F32;
    gpu.gemm(g);
  }
  if (dbias) {
    Ptr none = 0;
    int rpb = kColumnRows;
    gpu.launch(k("column_sum_add", dt), {cdiv(N, 256), cdiv(rows, rpb)}, {256}, 0,
               {&dbias, &dout, &none, &none, &rows, &N, &N, &rpb});
  }
}

void rmsnorm_forward(Gpu& gpu, DType dt, Ptr y, Ptr rstd, Ptr x, Ptr w, int rows, int C, float eps) {
  gpu.launch(k("rmsnorm_forward", dt), {unsigned(rows)}, {256}, 0, {&y, &rstd, &x, &w, &C, &eps});
}

void rmsnorm_backward(Gpu& gpu, DType dt, Ptr dx, Ptr dw, Ptr dy, Ptr x, Ptr w, Ptr rstd, int rows, int C) {
  gpu.launch(k("rmsnorm_backward", dt), {unsigned(rows)}, {256}, 0, {&dx, &dy, &x, &w, &rstd, &C});
  if (dw) {
    int rpb = kColumnRows;
    gpu.launch(k("column_sum_add", dt), {cdiv(C, 256), cdiv(rows, rpb)}, {256}, 0, {&dw, &dy, &x, &rstd, &rows, &C, &C, &rpb});
  }
}

RopeTable::RopeTable(Gpu& gpu, int max_pos_, int D_, double theta) : max_pos(max_pos_), D(D_) {
  const int half = D / 2;
  std::vector<float> c(std::size_t(max_pos) * half), s(c.size());
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < half; ++i) {
      double angle = p * std::pow(theta, -2.0 * i / D);  // as libcommon/nn/ops.hpp rope_forward
      c[std::size_t(p) * half + i] = float(std::cos(angle));
      s[std::size_t(p) * half + i] = float(std::sin(angle));
    }
  cos = to_device(gpu, c, DType::F32);
  sin = to_device(gpu, s, DType::F32);
}

void rope(Gpu& gpu, DType dt, Ptr x, int ld, int rows, int heads, int D, const RopeTable& table, int pos0, bool inverse) {
  if (table.D != D) throw InternalError("nn_cuda rope: table built for another head size");
  if (pos0 + rows > table.max_pos)
    throw InputError("nn_cuda rope: position " + std::to_string(pos0 + rows - 1) + " beyond the table of " +
                     std::to_string(table.max_pos));
  Ptr c = table.cos.ptr(), s = table.sin.ptr();
  int inv = inverse ? 1 : 0;
  gpu.launch(k("rope", dt), {unsigned(rows)}, {128}, 0, {&x, &ld, &heads, &D, &c, &s, &pos0, &inv});
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
  gpu.launch(k("attention_backward_delta", dt), {unsigned(Tq)}, {128}, 0, {&delta, &dout, &out, &ldo, &Tq, &H, &D});
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

void swiglu_forward(Gpu& gpu, DType dt, Ptr act, Ptr gate, Ptr up, int ld_in, int rows, int F) {
  gpu.launch(k("swiglu_forward", dt), {unsigned(rows)}, {256}, 0, {&act, &gate, &up, &ld_in, &F});
}

void swiglu_backward(Gpu& gpu, DType dt, Ptr dgate, Ptr dup, int ld_out, Ptr dact, Ptr gate, Ptr up, int ld_in, int rows,
                     int F) {
  gpu.launch(k("swiglu_backward", dt), {unsigned(rows)}, {256}, 0, {&dgate, &dup, &ld_out, &dact, &gate, &up, &ld_in, &F});
}

void token_logprob_forward(Gpu& gpu, DType dt, Ptr logprob, Ptr entropy, Ptr lse, Ptr logits, Ptr targets, int rows,
                           int V, double temperature) {
  float inv = float(1.0 / temperature);
  gpu.launch(k("token_logprob_forward", dt), {unsigned(rows)}, {512}, 0, {&logprob, &entropy, &lse, &logits, &targets, &V, &inv});
}

void token_logprob_backward(Gpu& gpu, DType dt, Ptr dlogits, Ptr logits, Ptr targets, Ptr lse, Ptr entropy, Ptr c_lp,
                            Ptr c_ent, int rows, int V, double temperature) {
  float inv = float(1.0 / temperature);
  gpu.launch(k("token_logprob_backward", dt), {unsigned(rows)}, {512}, 0,
             {&dlogits, &logits, &targets, &lse, &entropy, &c_lp, &c_ent, &V, &inv});
}

void embedding_forward(Gpu& gpu, DType dt, Ptr x, Ptr tokens, Ptr table, int rows, int C) {
  gpu.launch(k("embedding_forward", dt), {unsigned(rows)}, {256}, 0, {&x, &tokens, &table, &C});
}

void embedding_backward(Gpu& gpu, DType dt, Ptr dtable, Ptr tokens, Ptr dx, int rows, int C) {
  gpu.launch(k("embedding_backward", dt), {unsigned(rows)}, {256}, 0, {&dtable, &tokens, &dx, &C});
}

void copy_rows(Gpu& gpu, DType dt, Ptr dst, int ldd, Ptr src, int lds, int rows, int cols) {
  gpu.launch(k("copy_rows", dt), {unsigned(rows)}, {256}, 0, {&dst, &ldd, &src, &lds, &rows, &cols});
}

void convert(Gpu& gpu, DType to, Ptr out, DType from, Ptr in, std::size_t n) {
  long long nn = (long long)n;
  if (to == from) {
    gpu.check(gpu.drv().cuMemcpyDtoDAsync(out, in, n * dtype_size(to), gpu.stream()), "cuMemcpyDtoD");
    return;
  }
  std::string name = std::string("convert<") + dtype_cpp(to) + ", " + dtype_cpp(from) + ">";
  gpu.launch(name, {cdiv(nn, 256)}, {256}, 0, {&out, &in, &nn});
}

double l2_norm(Gpu& gpu, Ptr x, std::size_t n) {
  Buffer acc(gpu, sizeof(double));
  gpu.memset0(acc.ptr(), sizeof(double));
  long long nn = (long long)n;
  Ptr a = acc.ptr();
  unsigned blocks = std::min<unsigned>(1024, std::max<unsigned>(1, cdiv(nn, 256)));
  gpu.launch("sum_squares", {blocks}, {256}, 0, {&a, &x, &nn});
  double ss = 0;
  gpu.download(&ss, acc.ptr(), sizeof(double));
  return std::sqrt(ss);
}

void scale(Gpu& gpu, Ptr x, std::size_t n, float alpha) {
  long long nn = (long long)n;
  gpu.launch("scale_inplace", {cdiv(nn, 256)}, {256}, 0, {&x, &nn, &alpha});
}

void adamw_step(Gpu& gpu, Ptr w, Ptr g, Ptr m, Ptr v, Ptr copy_bf16, std::size_t n, double lr, double beta1, double beta2,
                double eps, double weight_decay, long long t) {
  long long nn = (long long)n;
  float flr = float(lr), b1 = float(beta1), b2 = float(beta2), e = float(eps), wd = float(weight_decay);
  float omb1 = float(1.0 - beta1), omb2 = float(1.0 - beta2);
  float bc1 = float(1.0 - std::pow(beta1, double(t))), bc2 = float(1.0 - std::pow(beta2, double(t)));
  gpu.launch("adamw_step<__nv_bfloat16>", {cdiv(nn, 256)}, {256}, 0,
             {&w, &g, &m, &v, &copy_bf16, &nn, &flr, &b1, &b2, &omb1, &omb2, &e, &wd, &bc1, &bc2});
}

}  // namespace ca::nn_cuda
