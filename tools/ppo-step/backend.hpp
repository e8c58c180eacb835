// Where ppo-step's models live: the CPU (nn::Model<float>, the reference every CUDA op is tested
// against) or a GPU (nn_cuda::CudaModel: bf16 or fp32 compute, fp32 master weights, gradients and
// AdamW moments). The trainer sees one interface, so both run the same loss code and differ only in
// the model's arithmetic.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/nn_cuda/fwd.hpp"

namespace ca::ppo_step {

// LoRA (libcommon/nn/lora.hpp): adapters trained on a frozen base. A checkpoint folder that holds
// adapter_config.json is an adapter (its base named inside); with rank > 0 a full checkpoint given as
// --policy or --critic is the base a new adapter starts on. The policy and the critic share one base
// in memory when they name the same folder.
struct LoraOptions {
  int rank = 0;                        // > 0: new adapters of this rank (0: full fine-tuning, or what an adapter folder says)
  double alpha = 0;                    // 0: 2 * rank
  std::string targets = "all-linear";  // module names, comma-separated, or all-linear
  uint64_t seed = 0;                   // a new adapter's A (B starts at zero)
};

struct DeviceOptions {
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string dtype = "bf16";  // compute dtype on cuda: bf16 | f32 (the CPU is always fp32)
  bool checkpointing = false;  // cuda: keep each layer's input only and recompute the layer in the backward
  bool host_optimizer = false; // cuda: AdamW's moments in host memory, streamed through the GPU at each step
  LoraOptions lora;
  // --load-format: "safetensors" reads every full checkpoint's weights; "dummy" reads only its config.json
  // and draws the weights as `ppo-step init --seed S` would have written them (nn::LoadFormat; S = the
  // run's --seed): benchmarks at shapes whose weights the disk cannot hold, never training.
  std::string load_format = "safetensors";
  uint64_t seed = 0;  // the run's --seed (the dummy weights')
};

// A model being trained or scored, on one sequence at a time. Positions p = 0..T-1 of `inputs`;
// targets[p] < 0 leaves position p out (its logprob and entropy are NaN, its gradient zero).
class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual const nn::Config& config() const = 0;
  virtual std::size_t num_parameters() const = 0;

  struct Scores {
    std::vector<double> logprob, entropy;  // of targets[p] under logits[p] / temperature
  };
  // Forward, then the per-position logprob and entropy (a policy).
  virtual Scores score(const std::vector<int>& inputs, const std::vector<int>& targets, double temperature) = 0;
  // Forward, then the value of every position (a critic).
  virtual std::vector<double> values(const std::vector<int>& inputs) = 0;
  // Adds the gradient of sum_p c_lp[p] * logprob[p] + c_ent[p] * entropy[p] (after score()).
  virtual void backward_scores(const std::vector<float>& c_lp, const std::vector<float>& c_ent) = 0;
  // Adds the gradient of sum_p dvalues[p] * value[p] (after values()).
  virtual void backward_values(const std::vector<float>& dvalues) = 0;

  virtual void zero_grad() = 0;
  virtual double clip_grad_norm(double max_norm) = 0;  // the norm before clipping
  virtual void adamw_step(const nn::AdamWConfig& config) = 0;
  virtual bool load_optimizer(const std::string& path) = 0;  // false when there is no state yet
  virtual void save_optimizer(const std::string& path) = 0;
  virtual void save(const std::string& dir) = 0;  // weights and config.json (HF layout), or the adapter (PEFT's)
  // A full checkpoint with the adapter merged into its base (W + s B A); a full model: save().
  virtual void save_merged(const std::string& dir) { save(dir); }
  // {"rank", "alpha", "targets", "base", "trainable_parameters"} for an adapter; null for a full model.
  virtual Json lora() const { return nullptr; }
  // "" when every weight is finite, else the first that is not ("tensor 'x' element 3 is nan").
  virtual std::string non_finite_weight() = 0;
};

// Opens the device on the first load (so usage errors come first; no GPU: EnvironmentError, exit 3).
class Backend {
 public:
  explicit Backend(DeviceOptions options);
  ~Backend();
  // A full checkpoint, an adapter folder (on its base), or, with options.lora.rank > 0, a new adapter
  // on the full checkpoint `dir`. With load_format dummy the full checkpoint's weights are random (said
  // on stderr) and an adapter folder is a UsageError.
  std::unique_ptr<TrainModel> load(const std::string& dir, bool as_critic = false);
  bool dummy() const { return format_.dummy; }
  // For the metrics: {"device": "cuda:0", "name": "NVIDIA H200", "dtype": "bf16", "peak_bytes": ...}.
  Json describe() const;
  // With CA_NN_CUDA_PROFILE=1 on a GPU: the kernels' time since the reset, by kernel, on stderr
  // (nn_cuda::Gpu::profile_report); nothing otherwise.
  void profile_reset();
  void profile_report(const std::string& title);
  // On a GPU: waits for the work launched so far (a phase's time then includes its kernels).
  void sync();

 private:
  std::shared_ptr<nn::Model<float>> base(const std::string& dir);  // a frozen base, loaded once per folder
  std::shared_ptr<nn_cuda::CudaModel> gpu_base(const std::string& dir);  // the same on the GPU
  void open_gpu();
  void say_dummy(const std::string& dir);  // once per folder, on stderr
  DeviceOptions options_;
  nn::LoadFormat format_;  // options_.load_format and seed
  std::set<std::string> dummy_said_;
  std::map<std::string, std::shared_ptr<nn::Model<float>>> bases_;
  bool cuda_ = false;
  int ordinal_ = 0;
  std::unique_ptr<nn_cuda::Gpu> gpu_;
  std::map<std::string, std::shared_ptr<nn_cuda::CudaModel>> gpu_bases_;  // after gpu_: freed before it
};

}  // namespace ca::ppo_step
