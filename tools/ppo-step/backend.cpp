// The CPU and CUDA models behind ppo-step's trainer (backend.hpp).
#include "tools/ppo-step/backend.hpp"

#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn_cuda/model.hpp"

namespace ca::ppo {

namespace {

class CpuModel final : public TrainModel {
 public:
  explicit CpuModel(nn::Model<float> model) : m_(std::move(model)) {}
  const nn::Config& config() const override { return m_.config(); }
  std::size_t num_parameters() const override { return m_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    m_.forward(inputs, acts_);
    targets_ = targets;
    temperature_ = temperature;
    const int V = m_.config().vocab_size;
    Scores s;
    s.logprob.assign(inputs.size(), NAN);
    s.entropy.assign(inputs.size(), NAN);
    for (std::size_t p = 0; p < inputs.size(); ++p) {
      if (targets[p] < 0) continue;
      float lp, ent;
      nn::token_logprob_entropy(acts_.logits.data() + p * V, V, targets[p], temperature, lp, ent);
      s.logprob[p] = lp;
      s.entropy[p] = ent;
    }
    return s;
  }

  std::vector<double> values(const std::vector<int>& inputs) override {
    m_.forward(inputs, acts_);
    return {acts_.values.begin(), acts_.values.end()};
  }

  void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) override {
    const int V = m_.config().vocab_size;
    std::vector<float> dlogits(acts_.logits.size(), 0.0f);
    for (std::size_t p = 0; p < targets_.size(); ++p)
      if (targets_[p] >= 0)
        nn::token_head_backward(acts_.logits.data() + p * V, V, targets_[p], temperature_, c_lp[p], c_ent[p],
                                dlogits.data() + p * V);
    m_.backward(acts_, dlogits);
  }

  void backward_values(const std::vector<float>& dvalues) override { m_.backward(acts_, dvalues); }
  void zero_grad() override { m_.zero_grad(); }
  double clip_grad_norm(double max_norm) override { return nn::clip_grad_norm(m_.grads, max_norm); }
  void adamw_step(const nn::AdamWConfig& c) override { opt_.step(m_.weights, m_.grads, c); }
  bool load_optimizer(const std::string& path) override { return opt_.load(path, m_.num_parameters()); }
  void save_optimizer(const std::string& path) override { opt_.save(path); }
  void save(const std::string& dir) override { nn::save_model(m_, dir); }
  std::string non_finite_weight() override { return nn::first_non_finite(m_); }

 private:
  nn::Model<float> m_;
  nn::Activations<float> acts_;
  std::vector<int> targets_;
  double temperature_ = 1.0;
  nn::AdamW opt_;
};

class GpuModel final : public TrainModel {
 public:
  GpuModel(nn_cuda::Gpu& gpu, nn::Model<float> host, nn_cuda::CudaModelOptions options)
      : host_(std::move(host)), m_(gpu, host_, options) {
    host_.release_gradients();  // the host copy is kept for its layout and to write the checkpoint
  }
  const nn::Config& config() const override { return m_.config(); }
  std::size_t num_parameters() const override { return host_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    m_.forward(inputs);
    nn_cuda::TokenLogprobs r = m_.token_logprobs(targets, temperature);
    Scores s;
    s.logprob.assign(inputs.size(), NAN);
    s.entropy.assign(inputs.size(), NAN);
    for (std::size_t p = 0; p < inputs.size(); ++p)
      if (targets[p] >= 0) s.logprob[p] = r.logprob[p], s.entropy[p] = r.entropy[p];
    return s;
  }

  std::vector<double> values(const std::vector<int>& inputs) override {
    m_.forward(inputs);
    auto v = m_.values();
    return {v.begin(), v.end()};
  }

  void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) override {
    m_.backward_from_logprobs(c_lp, c_ent);
  }
  void backward_values(const std::vector<float>& dvalues) override { m_.backward(dvalues); }
  void zero_grad() override { m_.zero_grad(); }
  double clip_grad_norm(double max_norm) override { return m_.clip_grad_norm(max_norm); }
  void adamw_step(const nn::AdamWConfig& c) override { m_.adamw_step(c); }
  bool load_optimizer(const std::string& path) override {
    nn::AdamW state;
    if (!state.load(path, host_.num_parameters())) return false;
    m_.set_optimizer_state(state);
    return true;
  }
  void save_optimizer(const std::string& path) override { m_.optimizer_state().save(path); }
  void save(const std::string& dir) override {
    m_.download_weights(host_);
    nn::save_model(host_, dir);
  }
  std::string non_finite_weight() override {
    m_.download_weights(host_);
    return nn::first_non_finite(host_);
  }

 private:
  nn::Model<float> host_;
  nn_cuda::CudaModel m_;
};

}  // namespace

Backend::Backend(DeviceOptions options) : options_(std::move(options)) {
  const int ordinal = nn_cuda::parse_device(options_.device);
  cuda_ = ordinal >= 0;
  ordinal_ = cuda_ ? ordinal : 0;
  if (cuda_) {
    nn_cuda::parse_dtype(options_.dtype);  // a bad --dtype fails before any model is read
  } else if (options_.checkpointing) {
    log::warn("--checkpointing does nothing on the CPU");
  }
}

Backend::~Backend() = default;

std::unique_ptr<TrainModel> Backend::load(const std::string& dir, bool as_critic) {
  nn::Model<float> model = nn::load_model<float>(dir, as_critic);
  if (!cuda_) return std::make_unique<CpuModel>(std::move(model));
  if (!gpu_) {
    gpu_ = std::make_unique<nn_cuda::Gpu>(ordinal_);
    log::verbose("ppo-step on cuda:", ordinal_, " (", gpu_->info().name, "), ", options_.dtype,
                 options_.checkpointing ? ", activation checkpointing" : "");
  }
  nn_cuda::CudaModelOptions o;
  o.dtype = nn_cuda::parse_dtype(options_.dtype);
  o.checkpointing = options_.checkpointing;
  return std::make_unique<GpuModel>(*gpu_, std::move(model), o);
}

Json Backend::describe() const {
  if (!cuda_) return Json{{"device", "cpu"}, {"dtype", "f32"}};
  Json d{{"device", "cuda:" + std::to_string(ordinal_)}, {"dtype", options_.dtype},
         {"checkpointing", options_.checkpointing}};
  if (gpu_) d["name"] = gpu_->info().name, d["peak_bytes"] = gpu_->peak_bytes();
  return d;
}

}  // namespace ca::ppo
