// Every GPU op of libcommon/nn_cuda against its CPU oracle in libcommon/nn/ops.hpp (computed in double
// from the same inputs), on random inputs of several shapes, in fp32 and bf16: the normalized error
// nmse = sum((gpu - cpu)^2) / sum(cpu^2) stays under the dtype's bound (ggml's test-backend-ops).
#include <algorithm>
#include <cstring>

#include "libcommon/nn/model.hpp"
#include "libcommon/nn/ops.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/nn_cuda/ops.hpp"
#include "tests/nn_cuda/common.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

namespace {
const DType kDTypes[] = {DType::F32, DType::BF16};

Buffer ints_to_device(Gpu& g, const std::vector<int>& v) {
  Buffer b(g, v.size() * 4);
  g.upload(b.ptr(), v.data(), v.size() * 4);
  return b;
}
std::size_t es(DType dt) { return dtype_size(dt); }
}  // namespace

TEST_CASE("matmul forward and backward (cuBLASLt) match the CPU loops") {
  std::mt19937_64 rng(1);
  struct Shape { int rows, K, N; };
  for (DType dt : kDTypes)
    for (Shape s : {Shape{1, 16, 8}, Shape{7, 32, 64}, Shape{64, 128, 96}, Shape{130, 256, 264}, Shape{5, 24, 1}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(s.rows);
      CAPTURE(s.K);
      CAPTURE(s.N);
      auto in = as_dtype(randn(std::size_t(s.rows) * s.K, rng), dt);
      auto w = as_dtype(randn(std::size_t(s.N) * s.K, rng, 0.1), dt);
      auto bias = as_dtype(randn(s.N, rng), dt);
      auto res = as_dtype(randn(std::size_t(s.rows) * s.N, rng), dt);
      std::vector<double> want(std::size_t(s.rows) * s.N), want_nb(want.size());
      auto in_d = to_double(in), w_d = to_double(w), b_d = to_double(bias);
      nn::matmul_forward(want.data(), in_d.data(), w_d.data(), b_d.data(), s.rows, s.K, s.N);
      nn::matmul_forward(want_nb.data(), in_d.data(), w_d.data(), nullptr, s.rows, s.K, s.N);
      Buffer in_g = to_device(gpu(), in, dt), w_g = to_device(gpu(), w, dt), b_g = to_device(gpu(), bias, dt);
      Buffer out_g(gpu(), want.size() * es(dt));
      matmul_forward(gpu(), dt, out_g.ptr(), in_g.ptr(), w_g.ptr(), b_g.ptr(), s.rows, s.K, s.N);
      CHECK_NMSE(to_host(gpu(), out_g.ptr(), want.size(), dt), want, bound(dt));
      // residual folded in: out = res + in w^T
      Buffer res_g = to_device(gpu(), res, dt);
      matmul_forward(gpu(), dt, out_g.ptr(), in_g.ptr(), w_g.ptr(), 0, s.rows, s.K, s.N, res_g.ptr());
      std::vector<double> want_res(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) want_res[i] = want_nb[i] + res[i];
      CHECK_NMSE(to_host(gpu(), out_g.ptr(), want.size(), dt), want_res, bound(dt));

      // backward: din accumulates onto a start value, dw and dbias accumulate in fp32
      auto dout = as_dtype(randn(want.size(), rng), dt);
      auto din0 = as_dtype(randn(in.size(), rng), dt);
      auto dw0 = randn(w.size(), rng), db0 = randn(bias.size(), rng);
      std::vector<double> din(din0.begin(), din0.end()), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
      auto dout_d = to_double(dout);
      nn::matmul_backward(din.data(), dw.data(), db.data(), dout_d.data(), in_d.data(), w_d.data(), s.rows, s.K, s.N);
      Buffer dout_g = to_device(gpu(), dout, dt), din_g = to_device(gpu(), din0, dt);
      Buffer dw_g = to_device(gpu(), dw0, DType::F32), db_g = to_device(gpu(), db0, DType::F32);
      matmul_backward(gpu(), dt, din_g.ptr(), true, dw_g.ptr(), db_g.ptr(), dout_g.ptr(), in_g.ptr(), w_g.ptr(), s.rows,
                      s.K, s.N);
      CHECK_NMSE(to_host(gpu(), din_g.ptr(), din.size(), dt), din, bound(dt));
      CHECK_NMSE(to_host(gpu(), dw_g.ptr(), dw.size(), DType::F32), dw, bound(dt));
      CHECK_NMSE(to_host(gpu(), db_g.ptr(), db.size(), DType::F32), db, bound(dt));
    }
}

TEST_CASE("rmsnorm forward and backward") {
  std::mt19937_64 rng(2);
  for (DType dt : kDTypes)
    for (auto [rows, C] : {std::pair{1, 64}, std::pair{17, 96}, std::pair{64, 1000}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(rows);
      CAPTURE(C);
      auto x = as_dtype(randn(std::size_t(rows) * C, rng, 2.0), dt);
      auto w = as_dtype(randn(C, rng), dt);
      std::vector<double> y(x.size()), rstd(rows);
      auto x_d = to_double(x), w_d = to_double(w);
      nn::rmsnorm_forward(y.data(), rstd.data(), x_d.data(), w_d.data(), rows, C, 1e-6);
      Buffer x_g = to_device(gpu(), x, dt), w_g = to_device(gpu(), w, dt);
      Buffer y_g(gpu(), x.size() * es(dt)), r_g(gpu(), rows * 4);
      rmsnorm_forward(gpu(), dt, y_g.ptr(), r_g.ptr(), x_g.ptr(), w_g.ptr(), rows, C, 1e-6f);
      CHECK_NMSE(to_host(gpu(), y_g.ptr(), y.size(), dt), y, bound(dt));
      CHECK_NMSE(to_host(gpu(), r_g.ptr(), rows, DType::F32), rstd, 1e-10);

      auto dy = as_dtype(randn(x.size(), rng), dt);
      auto dx0 = as_dtype(randn(x.size(), rng), dt);
      auto dw0 = randn(C, rng);
      std::vector<double> dx(dx0.begin(), dx0.end()), dw(dw0.begin(), dw0.end());
      auto dy_d = to_double(dy);
      nn::rmsnorm_backward(dx.data(), dw.data(), dy_d.data(), x_d.data(), w_d.data(), rstd.data(), rows, C);
      Buffer dy_g = to_device(gpu(), dy, dt), dx_g = to_device(gpu(), dx0, dt), dw_g = to_device(gpu(), dw0, DType::F32);
      rmsnorm_backward(gpu(), dt, dx_g.ptr(), dw_g.ptr(), dy_g.ptr(), x_g.ptr(), w_g.ptr(), r_g.ptr(), rows, C);
      CHECK_NMSE(to_host(gpu(), dx_g.ptr(), dx.size(), dt), dx, bound(dt));
      CHECK_NMSE(to_host(gpu(), dw_g.ptr(), dw.size(), DType::F32), dw, bound(dt));
    }
}

TEST_CASE("rope forward and backward, strided rows, offset positions") {
  std::mt19937_64 rng(3);
  for (DType dt : kDTypes)
    for (auto [rows, heads, D, pos0] : {std::tuple{1, 1, 16, 0}, std::tuple{9, 3, 32, 5}, std::tuple{40, 4, 64, 100},
                                        std::tuple{8, 2, 128, 2000}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(D);
      const double theta = 1e6;
      const int ld = heads * D + 8;  // a wider row, as q inside the fused qkv
      RopeTable table(gpu(), 2048 + 16, D, theta);
      auto x = as_dtype(randn(std::size_t(rows) * ld, rng), dt);
      std::vector<double> want = to_double(x), back = to_double(x);
      for (int t = 0; t < rows; ++t)
        for (int h = 0; h < heads; ++h) {
          nn::rope_forward(want.data() + std::size_t(t) * ld + h * D, pos0 + t, D, theta);
          nn::rope_backward(back.data() + std::size_t(t) * ld + h * D, pos0 + t, D, theta);
        }
      Buffer a = to_device(gpu(), x, dt), b = to_device(gpu(), x, dt);
      rope(gpu(), dt, a.ptr(), ld, rows, heads, D, table, pos0, false);
      rope(gpu(), dt, b.ptr(), ld, rows, heads, D, table, pos0, true);
      CHECK_NMSE(to_host(gpu(), a.ptr(), x.size(), dt), want, bound(dt));
      CHECK_NMSE(to_host(gpu(), b.ptr(), x.size(), dt), back, bound(dt));
    }
}

// bf16 at head sizes 64 and 128 runs the tensor-core kernels; `tensor_cores` false runs the FMA ones
// on the same shapes. The longer shapes cross several 64-row tiles with ragged ends.
TEST_CASE("causal GQA attention forward and backward (fused kernels)") {
  std::mt19937_64 rng(4);
  for (bool tensor_cores : {true, false})
  for (DType dt : kDTypes)
    for (auto [T, H, KV, D] : {std::tuple{1, 2, 1, 16}, std::tuple{37, 4, 2, 32}, std::tuple{100, 4, 4, 64},
                               std::tuple{70, 2, 1, 128}, std::tuple{129, 6, 2, 64}, std::tuple{333, 6, 2, 64},
                               std::tuple{261, 4, 1, 128}}) {
      if (!tensor_cores && dt == DType::F32) continue;  // fp32 has one path
      gpu().tensor_core_attention = tensor_cores;
      std::string dtype = dtype_name(dt);
      CAPTURE(tensor_cores);
      CAPTURE(dtype);
      CAPTURE(T);
      CAPTURE(H);
      CAPTURE(KV);
      CAPTURE(D);
      const int QD = H * D, KD = KV * D;
      auto q = as_dtype(randn(std::size_t(T) * QD, rng), dt);
      auto k = as_dtype(randn(std::size_t(T) * KD, rng), dt);
      auto v = as_dtype(randn(std::size_t(T) * KD, rng), dt);
      auto q_d = to_double(q), k_d = to_double(k), v_d = to_double(v);
      std::vector<double> out(q.size()), probs(std::size_t(H) * T * T);
      nn::attention_forward(out.data(), probs.data(), q_d.data(), k_d.data(), v_d.data(), T, H, KV, D);
      Buffer q_g = to_device(gpu(), q, dt), k_g = to_device(gpu(), k, dt), v_g = to_device(gpu(), v, dt);
      Buffer o_g(gpu(), q.size() * es(dt)), lse_g(gpu(), std::size_t(H) * T * 4);
      attention_forward(gpu(), dt, o_g.ptr(), QD, lse_g.ptr(), q_g.ptr(), QD, k_g.ptr(), v_g.ptr(), KD, T, T, 0, H, KV, D);
      auto o_host = to_host(gpu(), o_g.ptr(), out.size(), dt);
      CHECK_NMSE(o_host, out, bound(dt));

      auto dout = as_dtype(randn(q.size(), rng), dt);
      auto dout_d = to_double(dout);
      std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
      nn::attention_backward(dq.data(), dk.data(), dv.data(), dout_d.data(), probs.data(), q_d.data(), k_d.data(),
                             v_d.data(), T, H, KV, D);
      Buffer do_g = to_device(gpu(), dout, dt), delta(gpu(), std::size_t(H) * T * 4);
      Buffer dq_g(gpu(), q.size() * es(dt)), dk_g(gpu(), k.size() * es(dt)), dv_g(gpu(), v.size() * es(dt));
      attention_backward(gpu(), dt, dq_g.ptr(), QD, dk_g.ptr(), dv_g.ptr(), KD, do_g.ptr(), o_g.ptr(), QD, lse_g.ptr(),
                         delta.ptr(), q_g.ptr(), QD, k_g.ptr(), v_g.ptr(), KD, T, T, 0, H, KV, D);
      // bf16: the GPU's softmax backward uses its own bf16-rounded output (delta = dout . out), a
      // second rounding the double oracle does not have.
      const double bwd = dt == DType::F32 ? bound(dt) : 4 * bound(dt);
      CHECK_NMSE(to_host(gpu(), dq_g.ptr(), dq.size(), dt), dq, bwd);
      CHECK_NMSE(to_host(gpu(), dk_g.ptr(), dk.size(), dt), dk, bwd);
      CHECK_NMSE(to_host(gpu(), dv_g.ptr(), dv.size(), dt), dv, bwd);

      // Decoding: the last rows (positions pos0..T-1) against the whole cached prefix give the same rows.
      if (T > 4) {
        const int pos0 = T - 3, Tq = 3;
        Buffer o2(gpu(), std::size_t(Tq) * QD * es(dt)), lse2(gpu(), std::size_t(H) * Tq * 4);
        attention_forward(gpu(), dt, o2.ptr(), QD, lse2.ptr(), q_g.ptr() + std::size_t(pos0) * QD * es(dt), QD, k_g.ptr(),
                          v_g.ptr(), KD, Tq, T, pos0, H, KV, D);
        std::vector<double> tail(out.end() - std::size_t(Tq) * QD, out.end());
        CHECK_NMSE(to_host(gpu(), o2.ptr(), tail.size(), dt), tail, bound(dt));
      }
    }
  gpu().tensor_core_attention = true;
}

TEST_CASE("swiglu forward and backward, gate and up strided in one matrix") {
  std::mt19937_64 rng(5);
  for (DType dt : kDTypes)
    for (auto [rows, F] : {std::pair{1, 32}, std::pair{33, 100}, std::pair{64, 1024}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(F);
      auto gu = as_dtype(randn(std::size_t(rows) * 2 * F, rng, 2.0), dt);
      std::vector<double> gate(std::size_t(rows) * F), up(gate.size());
      for (int t = 0; t < rows; ++t)
        for (int f = 0; f < F; ++f) {
          gate[std::size_t(t) * F + f] = gu[std::size_t(t) * 2 * F + f];
          up[std::size_t(t) * F + f] = gu[std::size_t(t) * 2 * F + F + f];
        }
      std::vector<double> act(gate.size());
      nn::swiglu_forward(act.data(), gate.data(), up.data(), gate.size());
      Buffer gu_g = to_device(gpu(), gu, dt), act_g(gpu(), act.size() * es(dt));
      swiglu_forward(gpu(), dt, act_g.ptr(), gu_g.ptr(), gu_g.ptr() + F * es(dt), 2 * F, rows, F);
      CHECK_NMSE(to_host(gpu(), act_g.ptr(), act.size(), dt), act, bound(dt));

      auto dact = as_dtype(randn(act.size(), rng), dt);
      auto dact_d = to_double(dact);
      std::vector<double> dgate(act.size()), dup(act.size());
      nn::swiglu_backward(dgate.data(), dup.data(), dact_d.data(), gate.data(), up.data(), act.size());
      Buffer dact_g = to_device(gpu(), dact, dt), dgu_g(gpu(), gu.size() * es(dt));
      swiglu_backward(gpu(), dt, dgu_g.ptr(), dgu_g.ptr() + F * es(dt), 2 * F, dact_g.ptr(), gu_g.ptr(),
                      gu_g.ptr() + F * es(dt), 2 * F, rows, F);
      auto dgu = to_host(gpu(), dgu_g.ptr(), gu.size(), dt);
      std::vector<float> got_gate(act.size()), got_up(act.size());
      for (int t = 0; t < rows; ++t)
        for (int f = 0; f < F; ++f) {
          got_gate[std::size_t(t) * F + f] = dgu[std::size_t(t) * 2 * F + f];
          got_up[std::size_t(t) * F + f] = dgu[std::size_t(t) * 2 * F + F + f];
        }
      CHECK_NMSE(got_gate, dgate, bound(dt));
      CHECK_NMSE(got_up, dup, bound(dt));
    }
}

TEST_CASE("token logprob, entropy and their backward (log-softmax with gather)") {
  std::mt19937_64 rng(6);
  for (DType dt : kDTypes)
    for (auto [rows, V, temp] : {std::tuple{1, 50, 1.0}, std::tuple{9, 1000, 0.7}, std::tuple{16, 5003, 1.3}}) {
      std::string dtype = dtype_name(dt);
      CAPTURE(dtype);
      CAPTURE(V);
      auto z = as_dtype(randn(std::size_t(rows) * V, rng, 3.0), dt);
      std::vector<int> targets(rows);
      for (auto& y : targets) y = int(rng() % V);
      auto c_lp = randn(rows, rng), c_ent = randn(rows, rng);
      auto z_d = to_double(z);
      std::vector<double> lp(rows), ent(rows), dz(z.size(), 0.0);
      for (int t = 0; t < rows; ++t) {
        nn::token_logprob_entropy(z_d.data() + std::size_t(t) * V, V, targets[t], temp, lp[t], ent[t]);
        nn::token_head_backward(z_d.data() + std::size_t(t) * V, V, targets[t], temp, double(c_lp[t]), double(c_ent[t]),
                                dz.data() + std::size_t(t) * V);
      }
      Buffer z_g = to_device(gpu(), z, dt), y_g = ints_to_device(gpu(), targets);
      Buffer lp_g(gpu(), rows * 4), ent_g(gpu(), rows * 4), lse_g(gpu(), rows * 4);
      token_logprob_forward(gpu(), dt, lp_g.ptr(), ent_g.ptr(), lse_g.ptr(), z_g.ptr(), y_g.ptr(), rows, V, temp);
      CHECK_NMSE(to_host(gpu(), lp_g.ptr(), rows, DType::F32), lp, 1e-9);
      CHECK_NMSE(to_host(gpu(), ent_g.ptr(), rows, DType::F32), ent, 1e-9);
      Buffer clp_g = to_device(gpu(), c_lp, DType::F32), cent_g = to_device(gpu(), c_ent, DType::F32);
      // in place, as the model does: dlogits overwrite the logits
      token_logprob_backward(gpu(), dt, z_g.ptr(), z_g.ptr(), y_g.ptr(), lse_g.ptr(), ent_g.ptr(), clp_g.ptr(),
                             cent_g.ptr(), rows, V, temp);
      CHECK_NMSE(to_host(gpu(), z_g.ptr(), z.size(), dt), dz, bound(dt));
    }
}

TEST_CASE("embedding forward and backward (repeated tokens accumulate)") {
  std::mt19937_64 rng(7);
  for (DType dt : kDTypes) {
    const int V = 50, C = 96, rows = 40;
    auto table = as_dtype(randn(std::size_t(V) * C, rng), dt);
    std::vector<int> tokens(rows);
    for (auto& t : tokens) t = int(rng() % 7);  // many repeats
    auto dx = as_dtype(randn(std::size_t(rows) * C, rng), dt);
    std::vector<double> x(std::size_t(rows) * C), dtable(table.size(), 0.0);
    for (int t = 0; t < rows; ++t)
      for (int c = 0; c < C; ++c) {
        x[std::size_t(t) * C + c] = table[std::size_t(tokens[t]) * C + c];
        dtable[std::size_t(tokens[t]) * C + c] += dx[std::size_t(t) * C + c];
      }
    Buffer tab_g = to_device(gpu(), table, dt), tok_g = ints_to_device(gpu(), tokens), x_g(gpu(), x.size() * es(dt));
    embedding_forward(gpu(), dt, x_g.ptr(), tok_g.ptr(), tab_g.ptr(), rows, C);
    CHECK_NMSE(to_host(gpu(), x_g.ptr(), x.size(), dt), x, 0.0);
    Buffer dx_g = to_device(gpu(), dx, dt), dt_g(gpu(), dtable.size() * 4);
    gpu().memset0(dt_g.ptr(), dtable.size() * 4);
    embedding_backward(gpu(), dt, dt_g.ptr(), tok_g.ptr(), dx_g.ptr(), rows, C);
    CHECK_NMSE(to_host(gpu(), dt_g.ptr(), dtable.size(), DType::F32), dtable, 1e-12);
  }
}

TEST_CASE("AdamW with fp32 master weights and gradient clipping match the CPU optimizer") {
  std::mt19937_64 rng(8);
  const std::size_t n = 10007;
  auto w = randn(n, rng), g = randn(n, rng);
  std::vector<double> w_d(w.begin(), w.end()), g_d(g.begin(), g.end());
  ca::nn::AdamW cpu(n);
  ca::nn::AdamWConfig c;
  c.lr = 1e-3;
  c.weight_decay = 0.1;
  Buffer w_g = to_device(gpu(), w, DType::F32), g_g = to_device(gpu(), g, DType::F32);
  Buffer m_g(gpu(), n * 4), v_g(gpu(), n * 4), copy_g(gpu(), n * 2);
  gpu().memset0(m_g.ptr(), n * 4);
  gpu().memset0(v_g.ptr(), n * 4);
  double norm = l2_norm(gpu(), g_g.ptr(), n);
  double cpu_norm = ca::nn::clip_grad_norm(g_d, 50.0);
  CHECK(std::abs(norm - cpu_norm) <= 1e-5 * cpu_norm);
  scale(gpu(), g_g.ptr(), n, float(50.0 / (norm + 1e-6)));
  for (int t = 1; t <= 3; ++t) {
    cpu.step(w_d, g_d, c);
    adamw_step(gpu(), w_g.ptr(), g_g.ptr(), m_g.ptr(), v_g.ptr(), copy_g.ptr(), n, c.lr, c.beta1, c.beta2, c.eps,
               c.weight_decay, t);
  }
  auto w_after = to_host(gpu(), w_g.ptr(), n, DType::F32);
  CHECK_NMSE(w_after, w_d, 1e-10);
  CHECK_NMSE(to_host(gpu(), m_g.ptr(), n, DType::F32), cpu.m, 1e-10);
  CHECK_NMSE(to_host(gpu(), v_g.ptr(), n, DType::F32), cpu.v, 1e-10);
  CHECK_NMSE(to_host(gpu(), copy_g.ptr(), n, DType::BF16), w_after, bound(DType::BF16));
}
