// The transformer's ops on the GPU, one host function per op with the same name and argument order as
// its CPU twin (libcommon/nn/ops.hpp, mostly): device pointers, a dtype (f32 or bf16 activations; sums
// in fp32), and row strides where the model reads a slice of a wider matrix (q/k/v of the fused qkv
// projection, gate/up of the fused gate_up projection). Parameter gradients are always fp32.
// Every function is enqueued on gpu.stream() and returns at once.
//
// An op family lives in three files found from its name, llm.c's layout with ggml's test:
//   libcommon/nn_cuda/ops/<family>.cu     its kernels (NVRTC at run time, embedded at build time)
//   libcommon/nn_cuda/ops/<family>.cpp    its launchers, and ops::<family>_kernels(): the name
//                                         expressions it launches; its first lines name the CPU twin
//   tests/nn_cuda/ops/<family>_test.cpp   each op against its CPU twin (nmse under a dtype's bound)
// The build finds all three by globbing (a new file re-runs CMake at the next build); it stops at
// configure time when an ops/<family>.cpp has no test file or its opening comment does not name its
// CPU twin and test.
// Adding an op: its kernel in a .cu, its launcher and name expressions in the .cpp beside it, its
// declaration below, its case in the family's test, its CPU twin in libcommon/nn/ops.hpp.
#pragma once
#include "libcommon/nn_cuda/gpu.hpp"

namespace ca::nn_cuda {

using Ptr = CUdeviceptr;

// ---- ops/matmul.cpp (cuBLASLt) ----
// out[t, n] = sum_k in[t, k] w[n, k] + bias[n] (+ residual[t, n] when residual != 0; may be out)
void matmul_forward(Gpu& gpu, DType dt, Ptr out, Ptr in, Ptr w, Ptr bias, int rows, int K, int N, Ptr residual = 0);
// din (=, or += when accumulate_din) dout w;  dw += dout^T in (fp32);  dbias += sum_t dout (fp32).
// din, dw, dbias may be 0 to skip them.
void matmul_backward(Gpu& gpu, DType dt, Ptr din, bool accumulate_din, Ptr dw, Ptr dbias, Ptr dout, Ptr in, Ptr w,
                     int rows, int K, int N);

// ---- ops/rmsnorm.cpp ----
void rmsnorm_forward(Gpu& gpu, DType dt, Ptr y, Ptr rstd, Ptr x, Ptr w, int rows, int C, float eps);
// dx += ...;  dw (fp32) += sum_t dy * x * rstd
void rmsnorm_backward(Gpu& gpu, DType dt, Ptr dx, Ptr dw, Ptr dy, Ptr x, Ptr w, Ptr rstd, int rows, int C);

// ---- ops/rope.cpp ----
// cos/sin of pos * theta^(-2i/D), [max_pos, D/2], computed in double on the host as the CPU path does.
struct RopeTable {
  RopeTable() = default;
  RopeTable(Gpu& gpu, int max_pos, int D, double theta);
  Buffer cos, sin;
  int max_pos = 0, D = 0;
};
// In place on `heads` heads of D per row (row stride ld), positions pos0 .. pos0+rows-1; inverse:
// the backward (turn back).
void rope(Gpu& gpu, DType dt, Ptr x, int ld, int rows, int heads, int D, const RopeTable& table, int pos0, bool inverse);

// ---- ops/attention.cpp ----
// Causal grouped-query attention over Tq query rows at positions pos0.. and Tk keys (Tk >= pos0 + Tq
// for a whole prefix). lse [H, Tq] fp32 is kept for the backward.
void attention_forward(Gpu& gpu, DType dt, Ptr out, int ldo, Ptr lse, Ptr q, int ldq, Ptr k, Ptr v, int ldkv, int Tq,
                       int Tk, int pos0, int H, int KV, int D);
// Overwrites dq [Tq, H*D] (stride lddq) and dk, dv [Tk, KV*D] (stride lddkv); delta: [H, Tq] fp32 scratch.
void attention_backward(Gpu& gpu, DType dt, Ptr dq, int lddq, Ptr dk, Ptr dv, int lddkv, Ptr dout, Ptr out, int ldo,
                        Ptr lse, Ptr delta, Ptr q, int ldq, Ptr k, Ptr v, int ldkv, int Tq, int Tk, int pos0, int H,
                        int KV, int D);
bool attention_supports(int D);  // head sizes the fused kernels are built for

// ---- ops/swiglu.cpp ----
// act [rows, F] = silu(gate) * up, gate/up rows of stride ld_in
void swiglu_forward(Gpu& gpu, DType dt, Ptr act, Ptr gate, Ptr up, int ld_in, int rows, int F);
// overwrites dgate, dup (row stride ld_out)
void swiglu_backward(Gpu& gpu, DType dt, Ptr dgate, Ptr dup, int ld_out, Ptr dact, Ptr gate, Ptr up, int ld_in, int rows,
                     int F);

// ---- ops/lm_head.cpp ----
// Per row: logprob = log_softmax(logits / temperature)[target] (0 where target < 0), entropy, lse (fp32).
void token_logprob_forward(Gpu& gpu, DType dt, Ptr logprob, Ptr entropy, Ptr lse, Ptr logits, Ptr targets, int rows,
                           int V, double temperature);
// dlogits = d(c_lp * logprob + c_ent * entropy)/dlogits per row (overwrites; may alias logits).
void token_logprob_backward(Gpu& gpu, DType dt, Ptr dlogits, Ptr logits, Ptr targets, Ptr lse, Ptr entropy, Ptr c_lp,
                            Ptr c_ent, int rows, int V, double temperature);

// ---- ops/embedding.cpp ----
// x[t] = table[tokens[t]];  dtable (fp32) += dx at tokens
void embedding_forward(Gpu& gpu, DType dt, Ptr x, Ptr tokens, Ptr table, int rows, int C);
void embedding_backward(Gpu& gpu, DType dt, Ptr dtable, Ptr tokens, Ptr dx, int rows, int C);

// ---- ops/copy.cpp ----
// dst[r, :cols] = src[r, :cols] with row strides
void copy_rows(Gpu& gpu, DType dt, Ptr dst, int ldd, Ptr src, int lds, int rows, int cols);
void convert(Gpu& gpu, DType to, Ptr out, DType from, Ptr in, std::size_t n);

// ---- ops/optim.cpp ----
// L2 norm of an fp32 vector (synchronizes); scale in place.
double l2_norm(Gpu& gpu, Ptr x, std::size_t n);
void scale(Gpu& gpu, Ptr x, std::size_t n, float alpha);
// torch.optim.AdamW step `t` (1-based) on fp32 master weights w with fp32 moments m, v; copy: bf16
// compute weights refreshed when not 0.
void adamw_step(Gpu& gpu, Ptr w, Ptr g, Ptr m, Ptr v, Ptr copy_bf16, std::size_t n, double lr, double beta1, double beta2,
                double eps, double weight_decay, long long t);

}  // namespace ca::nn_cuda
