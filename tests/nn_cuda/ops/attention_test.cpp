// The attention family (libcommon/nn_cuda/ops/attention.cpp: the FMA and the tensor-core kernels)
// against its CPU twin ca::nn::attention_forward / attention_backward.
#include <tuple>

#include "tests/nn_cuda/ops/op_test.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

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
