// The CPU and CUDA models behind ppo-step's trainer (backend.hpp).
#include "tools/ppo-step/backend.hpp"

#include <cmath>
#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/nn_cuda/lora.hpp"
#include "libcommon/nn_cuda/model.hpp"

namespace ca::ppo_step {

namespace {

// The head's per-position scores from a [T, V] logits matrix (the CPU models).
TrainModel::Scores head_scores(const std::vector<float>& logits, int V, const std::vector<int>& targets, double temperature) {
  TrainModel::Scores s;
  s.logprob.assign(targets.size(), NAN);
  s.entropy.assign(targets.size(), NAN);
  for (std::size_t p = 0; p < targets.size(); ++p) {
    if (targets[p] < 0) continue;
    float lp, ent;
    nn::token_logprob_entropy(logits.data() + p * V, V, targets[p], temperature, lp, ent);
    s.logprob[p] = lp;
    s.entropy[p] = ent;
  }
  return s;
}

// dL/dlogits of sum_p c_lp[p] logprob[p] + c_ent[p] entropy[p] (the CPU models).
std::vector<float> head_dlogits(const std::vector<float>& logits, int V, const std::vector<int>& targets, double temperature,
                                const std::vector<float>& c_lp, const std::vector<float>& c_ent) {
  std::vector<float> d(logits.size(), 0.0f);
  for (std::size_t p = 0; p < targets.size(); ++p)
    if (targets[p] >= 0)
      nn::token_head_backward(logits.data() + p * V, V, targets[p], temperature, c_lp[p], c_ent[p], d.data() + p * V);
  return d;
}

// The GPU's per-position scores, NaN where the target is masked (the GPU models).
TrainModel::Scores gpu_scores(nn_cuda::CudaModel& m, const std::vector<int>& targets, double temperature) {
  nn_cuda::TokenLogprobs r = m.token_logprobs(targets, temperature);
  TrainModel::Scores s;
  s.logprob.assign(targets.size(), NAN);
  s.entropy.assign(targets.size(), NAN);
  for (std::size_t p = 0; p < targets.size(); ++p)
    if (targets[p] >= 0) s.logprob[p] = r.logprob[p], s.entropy[p] = r.entropy[p];
  return s;
}

// An adapter's first non-finite weight ("" when none), and its description for the metrics.
std::string adapter_non_finite(const nn::Adapter<float>& ad) {
  for (auto& t : ad.tensors()) {
    std::size_t n = 1;
    for (auto d : t.shape) n *= std::size_t(d);
    for (std::size_t i = 0; i < n; ++i)
      if (!std::isfinite(ad.weights[t.offset + i]))
        return "tensor '" + t.key + "' element " + std::to_string(i) + " is " + (std::isnan(ad.weights[t.offset + i]) ? "nan" : "inf");
  }
  return "";
}
Json adapter_json(const nn::Adapter<float>& ad, const std::string& base_dir) {
  const auto& c = ad.config();
  Json t = Json::array();
  for (auto m : c.targets) t.push_back(nn::lora_module_name(m));
  return Json{{"rank", c.r}, {"alpha", c.alpha}, {"targets", t}, {"base", base_dir},
              {"trainable_parameters", ad.num_parameters()}};
}

class CpuModel final : public TrainModel {
 public:
  explicit CpuModel(nn::Model<float> model) : m_(std::move(model)) {}
  const nn::Config& config() const override { return m_.config(); }
  std::size_t num_parameters() const override { return m_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    m_.forward(inputs, acts_);
    targets_ = targets;
    temperature_ = temperature;
    return head_scores(acts_.logits, m_.config().vocab_size, targets, temperature);
  }

  std::vector<double> values(const std::vector<int>& inputs) override {
    m_.forward(inputs, acts_);
    return {acts_.values.begin(), acts_.values.end()};
  }

  void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) override {
    m_.backward(acts_, head_dlogits(acts_.logits, m_.config().vocab_size, targets_, temperature_, c_lp, c_ent));
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

// An adapter on a frozen base (shared with the other models of the step that name the same folder).
class CpuLoraModel final : public TrainModel {
 public:
  CpuLoraModel(std::shared_ptr<nn::Model<float>> base, nn::Adapter<float> adapter, std::string base_dir)
      : base_(std::move(base)), ad_(std::move(adapter)), base_dir_(std::move(base_dir)) {}
  const nn::Config& config() const override { return base_->config(); }
  std::size_t num_parameters() const override { return ad_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    if (ad_.config().value_head) throw InternalError("ppo-step: a critic adapter has no logprobs");
    base_->forward(inputs, acts_, &ad_);
    targets_ = targets;
    temperature_ = temperature;
    return head_scores(acts_.logits, base_->config().vocab_size, targets, temperature);
  }
  std::vector<double> values(const std::vector<int>& inputs) override {
    if (!ad_.config().value_head) throw InternalError("ppo-step: a policy adapter has no values");
    base_->forward(inputs, acts_, &ad_);
    return {acts_.values.begin(), acts_.values.end()};
  }
  void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) override {
    base_->backward(acts_, head_dlogits(acts_.logits, base_->config().vocab_size, targets_, temperature_, c_lp, c_ent), &ad_);
  }
  void backward_values(const std::vector<float>& dvalues) override { base_->backward(acts_, dvalues, &ad_); }
  void zero_grad() override { ad_.zero_grad(); }
  double clip_grad_norm(double max_norm) override { return nn::clip_grad_norm(ad_.grads, max_norm); }
  void adamw_step(const nn::AdamWConfig& c) override { opt_.step(ad_.weights, ad_.grads, c); }
  bool load_optimizer(const std::string& path) override { return opt_.load(path, ad_.num_parameters()); }
  void save_optimizer(const std::string& path) override { opt_.save(path); }
  void save(const std::string& dir) override { nn::save_adapter(ad_, dir); }
  void save_merged(const std::string& dir) override {
    nn::Config c = base_->config();
    c.value_head = ad_.config().value_head;
    nn::Model<float> merged(c);
    for (auto& p : merged.params())
      if (p.name.rfind("score.", 0) != 0)
        std::copy_n(base_->weights.begin() + base_->param(p.name).offset, p.size, merged.weights.begin() + p.offset);
    merged.release_gradients();
    nn::merge_adapter(merged, ad_);
    nn::save_model(merged, dir);
  }
  Json lora() const override { return adapter_json(ad_, base_dir_); }
  std::string non_finite_weight() override { return adapter_non_finite(ad_); }

 private:
  std::shared_ptr<nn::Model<float>> base_;
  nn::Adapter<float> ad_;
  std::string base_dir_;
  nn::Activations<float> acts_;
  std::vector<int> targets_;
  double temperature_ = 1.0;
  nn::AdamW opt_;
};

// A model trained whole on the GPU. It is read from its checkpoint and written back tensor by tensor
// through the GPU's master weights: the host never holds its fp32 copy (28 GB at 7B), nor the moments
// whole when they live on the GPU.
class GpuModel final : public TrainModel {
 public:
  GpuModel(nn_cuda::Gpu& gpu, const std::string& dir, bool as_critic, nn_cuda::CudaModelOptions options,
           const nn::LoadFormat& format)
      : GpuModel(gpu, nn::open_checkpoint(dir, as_critic, format), options) {}
  const nn::Config& config() const override { return m_.config(); }
  std::size_t num_parameters() const override { return layout_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    m_.forward(inputs);
    return gpu_scores(m_, targets, temperature);
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
  bool load_optimizer(const std::string& path) override { return m_.load_optimizer(path); }
  void save_optimizer(const std::string& path) override { m_.save_optimizer(path); }
  void save(const std::string& dir) override {
    std::filesystem::create_directories(dir);
    const auto& params = layout_.params();
    std::vector<nn::TensorSpec> specs;
    for (auto& p : params) specs.push_back({p.name, p.shape});
    nn::WriteOptions o;
    o.ordered = true;  // fill on one thread: the downloads share the GPU's stream
    nn::write_checkpoint_tensors(
        dir, specs,
        [&](std::size_t i, std::size_t begin, std::size_t count, float* out) {
          m_.read_weights(params[i].offset + begin, count, out);
        },
        o);
    nn::write_checkpoint_config(dir, m_.config(), o.dtype);
  }
  std::string non_finite_weight() override {
    const std::size_t chunk = std::size_t(16) << 20;
    std::vector<float> host;
    for (auto& p : layout_.params())
      for (std::size_t i = 0; i < p.size; i += chunk) {
        host.resize(std::min(chunk, p.size - i));
        m_.read_weights(p.offset + i, host.size(), host.data());
        for (std::size_t k = 0; k < host.size(); ++k)
          if (!std::isfinite(host[k]))
            return "tensor '" + p.name + "' element " + std::to_string(i + k) + " is " + (std::isnan(host[k]) ? "nan" : "inf");
      }
    return "";
  }

 private:
  GpuModel(nn_cuda::Gpu& gpu, nn::OpenCheckpoint ck, nn_cuda::CudaModelOptions options)
      : layout_(ck.config, /*allocate=*/false), m_(gpu, ck.config, *ck.reader, options) {}
  nn::Model<float> layout_;  // names, shapes and offsets of the parameters (no weights)
  nn_cuda::CudaModel m_;
};

// An adapter on a frozen base on the GPU (shared with the other models of the step on the same base).
class GpuLoraModel final : public TrainModel {
 public:
  GpuLoraModel(std::shared_ptr<nn_cuda::CudaModel> base, nn::Adapter<float> host, std::string base_dir, nn::LoadFormat format)
      : base_(std::move(base)), host_(std::move(host)), ad_(*base_, host_), base_dir_(std::move(base_dir)), format_(format) {
    host_.grads.clear();
    host_.grads.shrink_to_fit();
  }
  const nn::Config& config() const override { return base_->config(); }
  std::size_t num_parameters() const override { return ad_.num_parameters(); }

  Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) override {
    if (ad_.critic()) throw InternalError("ppo-step: a critic adapter has no logprobs");
    base_->forward(inputs, &ad_);
    return gpu_scores(*base_, targets, temperature);
  }
  std::vector<double> values(const std::vector<int>& inputs) override {
    if (!ad_.critic()) throw InternalError("ppo-step: a policy adapter has no values");
    base_->forward(inputs, &ad_);
    auto v = base_->values();
    return {v.begin(), v.end()};
  }
  void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) override {
    base_->backward_from_logprobs(c_lp, c_ent);
  }
  void backward_values(const std::vector<float>& dvalues) override { base_->backward(dvalues); }
  void zero_grad() override { ad_.zero_grad(); }
  double clip_grad_norm(double max_norm) override { return ad_.clip_grad_norm(max_norm); }
  void adamw_step(const nn::AdamWConfig& c) override { ad_.adamw_step(c); }
  bool load_optimizer(const std::string& path) override {
    nn::AdamW state;
    if (!state.load(path, ad_.num_parameters())) return false;
    ad_.set_optimizer_state(state);
    return true;
  }
  void save_optimizer(const std::string& path) override { ad_.optimizer_state().save(path); }
  void save(const std::string& dir) override {
    ad_.download(host_);
    nn::save_adapter(host_, dir);
  }
  void save_merged(const std::string& dir) override {
    ad_.download(host_);
    nn::Model<float> merged = nn::load_model<float>(base_dir_, host_.config().value_head, format_);
    merged.release_gradients();
    nn::merge_adapter(merged, host_);
    nn::save_model(merged, dir);
  }
  Json lora() const override { return adapter_json(host_, base_dir_); }
  std::string non_finite_weight() override {
    ad_.download(host_);
    return adapter_non_finite(host_);
  }

 private:
  std::shared_ptr<nn_cuda::CudaModel> base_;
  nn::Adapter<float> host_;
  nn_cuda::CudaAdapter ad_;
  std::string base_dir_;
  nn::LoadFormat format_;  // the base's (save_merged reads it again on the host)
};

}  // namespace

Backend::Backend(DeviceOptions options) : options_(std::move(options)) {
  if (options_.load_format != "safetensors" && options_.load_format != "dummy")  // the option's own check refuses it first
    throw InternalError("load format '" + options_.load_format + "' reached the backend");
  format_.dummy = options_.load_format == "dummy";
  format_.seed = options_.seed;
  const int ordinal = nn_cuda::parse_device(options_.device);
  cuda_ = ordinal >= 0;
  ordinal_ = cuda_ ? ordinal : 0;
  if (cuda_) {
    nn_cuda::parse_dtype(options_.dtype);  // a bad --dtype fails before any model is read
  } else {
    if (options_.checkpointing) log::warn("--checkpointing does nothing on the CPU");
    if (options_.host_optimizer) log::warn("--optimizer-on-host does nothing on the CPU (the moments are in host memory)");
  }
}

Backend::~Backend() = default;

std::shared_ptr<nn::Model<float>> Backend::base(const std::string& dir) {
  const std::string key = std::filesystem::absolute(dir).lexically_normal().string();
  auto it = bases_.find(key);
  if (it != bases_.end()) return it->second;
  say_dummy(key);
  auto m = std::make_shared<nn::Model<float>>(nn::load_model<float>(key, false, format_));
  m->release_gradients();  // frozen: no gradient is ever kept for it
  bases_.emplace(key, m);
  return m;
}

std::shared_ptr<nn_cuda::CudaModel> Backend::gpu_base(const std::string& dir) {
  const std::string key = std::filesystem::absolute(dir).lexically_normal().string();
  auto it = gpu_bases_.find(key);
  if (it != gpu_bases_.end()) return it->second;
  open_gpu();
  nn_cuda::CudaModelOptions o;
  o.dtype = nn_cuda::parse_dtype(options_.dtype);
  o.checkpointing = options_.checkpointing;
  o.frozen = true;
  // Streamed tensor by tensor from the checkpoint's maps (or init's draw): no host copy of the model (a
  // 32B base is 128 GB in fp32), and a frozen base is never written back.
  const nn::Config config = nn::read_checkpoint_config(key);
  if (config.value_head) throw InputError("checkpoint '" + key + "' is a critic (score head): a LoRA base is a causal LM");
  say_dummy(key);
  const nn::OpenCheckpoint ck = nn::open_checkpoint(key, false, format_);
  auto m = std::make_shared<nn_cuda::CudaModel>(*gpu_, ck.config, *ck.reader, o);
  gpu_bases_.emplace(key, m);
  return m;
}

void Backend::say_dummy(const std::string& dir) {
  if (!format_.dummy || !dummy_said_.insert(std::filesystem::absolute(dir).lexically_normal().string()).second) return;
  bool files = false;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    files = files || it->path().extension() == ".safetensors";
  log::warn("--load-format dummy: the weights of '", dir, "' are random (ppo-step init's draw with --seed ", format_.seed,
            ", in its config's torch_dtype)", files ? "; its .safetensors files are not read" : "",
            ": a benchmark, not training");
}

void Backend::profile_reset() {
  if (gpu_) gpu_->profile_reset();
}

void Backend::profile_report(const std::string& title) {
  if (gpu_) gpu_->profile_report(title);
}

void Backend::sync() {
  if (gpu_) gpu_->sync();
}

void Backend::open_gpu() {
  if (gpu_) return;
  gpu_ = std::make_unique<nn_cuda::Gpu>(ordinal_);
  log::verbose("ppo-step on cuda:", ordinal_, " (", gpu_->info().name, "), ", options_.dtype,
               options_.checkpointing ? ", activation checkpointing" : "");
}

std::unique_ptr<TrainModel> Backend::load(const std::string& dir, bool as_critic) {
  const LoraOptions& lo = options_.lora;
  const bool adapter_dir = nn::is_adapter_dir(dir);
  // Random weights have nothing to continue: no adapter on them, no optimizer state or step count for them.
  if (format_.dummy && (adapter_dir || std::filesystem::exists(std::filesystem::path(dir) / "trainer_state")))
    throw UsageError("--load-format dummy: '" + dir + "' is " +
                     (adapter_dir ? "a LoRA adapter folder" : "a trained step's checkpoint (trainer_state/)") +
                     "; a dummy step starts afresh from a config.json: random weights are not continued");
  if (adapter_dir || lo.rank > 0) {
    // The adapter's shape: an adapter folder's own, else the options'.
    nn::LoraConfig lc;
    std::string base_dir;
    bool fresh = true;
    if (adapter_dir) {
      const std::string cpath = dir + "/adapter_config.json";
      lc = nn::LoraConfig::from_json(parse_json(read_file(cpath), "'" + cpath + "'"), cpath);
      base_dir = nn::adapter_base_dir(lc, dir);
      if (lc.value_head && !as_critic) throw InputError("'" + cpath + "' is a critic adapter (TOKEN_CLS), not a policy");
      fresh = lc.value_head != as_critic;  // a critic started from the policy's adapter folder: a new adapter
      if (!fresh && lo.rank > 0 && lo.rank != lc.r)
        log::warn("--lora-rank ", lo.rank, " ignored: '", dir, "' is an adapter of rank ", lc.r);
    } else {
      base_dir = std::filesystem::absolute(dir).lexically_normal().string();
    }
    if (fresh && (lo.rank > 0 || !adapter_dir)) {
      lc.r = lo.rank;
      lc.alpha = lo.alpha > 0 ? lo.alpha : 2.0 * lo.rank;
      lc.targets = nn::LoraConfig::parse_targets(lo.targets);
    }
    lc.value_head = as_critic;
    nn::Config base_config;
    std::shared_ptr<nn::Model<float>> b;
    std::shared_ptr<nn_cuda::CudaModel> gb;
    if (cuda_) {
      gb = gpu_base(base_dir);
      base_config = gb->config();
    } else {
      b = base(base_dir);
      base_config = b->config();
    }
    auto ad = fresh ? nn::Adapter<float>(base_config, lc) : nn::load_adapter<float>(dir, base_config);
    if (fresh) {
      ad.init(as_critic ? lo.seed ^ 0xC817C0FFEEull : lo.seed);
      // A critic's value head starts at zero, as a full critic started from a policy does.
      if (as_critic) std::fill_n(ad.weights.begin() + ad.score_weight, base_config.hidden_size + 1, 0.0f);
    }
    ad.set_base_path(base_dir);
    if (cuda_) return std::make_unique<GpuLoraModel>(gb, std::move(ad), base_dir, format_);
    return std::make_unique<CpuLoraModel>(b, std::move(ad), base_dir);
  }
  say_dummy(dir);
  if (!cuda_) return std::make_unique<CpuModel>(nn::load_model<float>(dir, as_critic, format_));
  open_gpu();
  nn_cuda::CudaModelOptions o;
  o.dtype = nn_cuda::parse_dtype(options_.dtype);
  o.checkpointing = options_.checkpointing;
  o.host_optimizer = options_.host_optimizer;
  return std::make_unique<GpuModel>(*gpu_, dir, as_critic, o, format_);
}

Json Backend::describe() const {
  if (!cuda_) return Json{{"device", "cpu"}, {"dtype", "f32"}};
  Json d{{"device", "cuda:" + std::to_string(ordinal_)}, {"dtype", options_.dtype},
         {"checkpointing", options_.checkpointing}, {"optimizer_on_host", options_.host_optimizer}};
  if (gpu_) d["name"] = gpu_->info().name, d["peak_bytes"] = gpu_->peak_bytes();
  return d;
}

}  // namespace ca::ppo_step
