// LoRA adapters on the GPU (the CPU's libcommon/nn/lora.hpp, op for op): an adapter's fp32 master
// weights, their compute copy (bf16 or the master itself), fp32 gradients and AdamW moments, and per
// site the kept u = A x [T, r] for the backward. CudaModel runs it when given one (forward(tokens,
// &adapter)); the base is then frozen (CudaModelOptions::frozen: no fp32 master, gradient or moment of
// the base is allocated, so a 7B base is its 15 GB of bf16 weights).
//
//   ca::nn_cuda::CudaModel base(gpu, host_base, {DType::BF16, false, /*frozen=*/true});
//   ca::nn_cuda::CudaAdapter ad(base, host_adapter);
//   base.forward(tokens, &ad); auto lp = base.token_logprobs(targets);
//   base.backward_from_logprobs(c_lp, c_ent); ad.clip_grad_norm(1); ad.adamw_step(cfg); ad.download(host_adapter);
#pragma once
#include <vector>

#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/nn_cuda/ops.hpp"

namespace ca::nn_cuda {

class CudaModel;

class CudaAdapter {
 public:
  CudaAdapter(CudaModel& base, const nn::Adapter<float>& adapter);
  const nn::LoraConfig& config() const { return config_; }
  bool critic() const { return config_.value_head; }
  std::size_t num_parameters() const { return n_; }

  void upload(const nn::Adapter<float>& adapter);
  void download(nn::Adapter<float>& adapter) const;  // master weights
  std::vector<float> grads() const;                  // fp32, in the host adapter's layout
  void zero_grad();
  double clip_grad_norm(double max_norm);  // the norm before clipping
  void adamw_step(const nn::AdamWConfig& c);
  nn::AdamW optimizer_state() const;
  void set_optimizer_state(const nn::AdamW& state);

  // The site of (layer, module), or nullptr; w/g: compute weight and fp32 gradient at a host offset.
  const nn::LoraSite* site(int layer, nn::LoraModule m) const;
  Ptr w(std::size_t offset) const;
  Ptr g(std::size_t offset) const;
  std::size_t score_weight() const { return score_w_; }
  std::size_t score_bias() const { return score_b_; }

  // y [rows, out] (row stride ldy) += scaling * (x A^T) B^T, keeping x A^T for the backward.
  void forward(const nn::LoraSite& s, Ptr y, int ldy, Ptr x, int rows);
  // From dy [rows, out] (stride lddy): dB += s dy^T u, dA += du^T x, dx [rows, in] += du A, du = s dy B.
  void backward(const nn::LoraSite& s, Ptr dx, Ptr dy, int lddy, Ptr x, int rows);

 private:
  friend class CudaModel;
  void ensure(int rows);  // the u buffers and the du scratch hold `rows` rows
  CudaModel& base_;
  nn::LoraConfig config_;
  std::vector<nn::LoraSite> sites_;
  std::vector<int> site_index_;  // [layer * kLoraModules + module] -> index in sites_, or -1
  std::size_t n_ = 0, score_w_ = 0, score_b_ = 0;
  Buffer master_, compute_, grads_, adam_m_, adam_v_;
  long long adam_t_ = 0;
  std::vector<Buffer> u_;  // per site: x A^T [capacity, r] (act dtype)
  Buffer du_;
  int capacity_ = 0;
};

}  // namespace ca::nn_cuda
