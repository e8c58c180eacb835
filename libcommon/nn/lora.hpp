// LoRA adapters on the native transformer (ca::nn::Model): y = W x + (alpha / r) * B (A x) on the
// linear layers a LoraConfig names, with the base W frozen. One adapter is a policy's trainable part,
// or a critic's (its adapter plus a value head `score` on the same base, PEFT's modules_to_save).
//
// On disk an adapter is PEFT's folder, so transformers + peft, vLLM and SGLang load it unchanged:
//   adapter_config.json        peft_type LORA, r, lora_alpha, target_modules, base_model_name_or_path,
//                              task_type CAUSAL_LM (policy) or TOKEN_CLS with modules_to_save [score]
//   adapter_model.safetensors  F32: base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight [r, in],
//                              ...lora_B.weight [out, r]; a critic's base_model.model.score.weight [1, C]
//                              and base_model.model.score.bias [1]
// Weights, gradients and optimizer moments of an adapter are kept in T (fp32 on the CPU and GPU).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/nn/model.hpp"

namespace ca::nn {

// The seven linear layers of a decoder layer, in the order LoRA sites are laid out.
enum class LoraModule { q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj };
constexpr int kLoraModules = 7;
const char* lora_module_name(LoraModule m);  // "q_proj", ...
// Where a module's base weight starts in the model's flat parameter vector.
std::size_t lora_base_offset(const LayerOffsets& offsets, LoraModule m);

struct LoraConfig {
  int r = 0;
  double alpha = 0;  // scaling = alpha / r (PEFT without rslora)
  std::vector<LoraModule> targets;  // in LoraModule order, no repeats
  std::string base_model_name_or_path;  // the base checkpoint folder (absolute when written by ppo-step)
  bool value_head = false;  // a critic: task_type TOKEN_CLS, modules_to_save ["score"]
  Json extra = Json::object();  // keys of adapter_config.json we do not use, written back unchanged

  double scaling() const { return alpha / double(r); }
  bool targets_module(LoraModule m) const;
  // "all-linear" (PEFT's shorthand: every linear layer but the head), or a comma list of module names.
  static std::vector<LoraModule> parse_targets(const std::string& spec);
  // adapter_config.json; InputError naming the key (peft_type not LORA, r < 1, an unknown target module,
  // use_dora / use_rslora / bias other than "none", which this model does not compute).
  static LoraConfig from_json(const Json& j, const std::string& origin);
  Json to_json() const;
};

// One adapted linear layer: A [r, in] and B [out, r] at offsets into Adapter::weights.
struct LoraSite {
  int layer = 0;
  LoraModule module = LoraModule::q_proj;
  int in = 0, out = 0;
  std::size_t a = 0, b = 0;
};

template <class T> class Adapter {
 public:
  Adapter(const Config& base, LoraConfig config);
  const LoraConfig& config() const { return config_; }
  // The base folder written into adapter_config.json (ppo-step writes it absolute, so an adapter saved in
  // another folder still finds its base).
  void set_base_path(std::string dir) { config_.base_model_name_or_path = std::move(dir); }
  const Config& base_config() const { return base_; }
  const std::vector<LoraSite>& sites() const { return sites_; }
  // The site of (layer, module), or nullptr when the module is not a target.
  const LoraSite* site(int layer, LoraModule m) const;
  std::size_t num_parameters() const { return weights.size(); }
  // PEFT's initialisation: A kaiming-uniform (a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B zero, so a new
  // adapter leaves the base's outputs unchanged; a critic's score head Normal(0, 0.02), bias 0. Seeded.
  void init(uint64_t seed);
  void zero_grad() { grads.assign(weights.size(), T(0)); }
  // (PEFT key, offset, shape) of every tensor, in layout order: what save and load walk.
  struct Tensor {
    std::string key;
    std::size_t offset = 0;
    std::vector<int64_t> shape;
  };
  const std::vector<Tensor>& tensors() const { return tensors_; }

  std::vector<T> weights, grads;
  std::size_t score_weight = 0, score_bias = 0;  // critic only

 private:
  Config base_;
  LoraConfig config_;
  std::vector<LoraSite> sites_;
  std::vector<int> site_index_;  // [layer * kLoraModules + module] -> index in sites_, or -1
  std::vector<Tensor> tensors_;
};

// True when `dir` holds adapter_config.json (an adapter folder, not a full checkpoint).
bool is_adapter_dir(const std::string& dir);
// Reads an adapter for `base`: every tensor the config implies must be in adapter_model.safetensors
// with its shape (and none other), every weight finite; InputError naming the file and tensor otherwise.
template <class T> Adapter<T> load_adapter(const std::string& dir, const Config& base);
// Writes adapter_config.json and adapter_model.safetensors (F32) into `dir` (a CheckpointWriter's
// staging folder, or any folder); a non-finite weight is an InputError and nothing is written.
template <class T> void save_adapter(const Adapter<T>& adapter, const std::string& dir);
// W += scaling * B A on every site (and, for a critic, the base's head replaced by the score head, so
// the result is a critic checkpoint): what `--merge` writes, and how a sampler without LoRA kernels
// runs an adapter. The base must have the adapter's shape.
template <class T> void merge_adapter(Model<T>& model, const Adapter<T>& adapter);
// A policy to sample with: a full checkpoint as load_model reads it, or an adapter folder merged into the
// base it names (what the native samplers run: ppo-step sample, agent-run's native policy).
template <class T> Model<T> load_policy(const std::string& dir);
// The base folder an adapter names, resolved against the adapter folder when relative; UsageError when
// it names no checkpoint folder (config.json).
std::string adapter_base_dir(const LoraConfig& config, const std::string& adapter_dir);

// The adapted linear on one site, what Model::forward and Model::backward call after the base's matmul:
// y [rows, out] += scaling * B (A x); u [rows, r] = scaling * A x is kept for the backward.
template <class T>
void lora_forward(const Adapter<T>& adapter, const LoraSite& site, T* y, const T* x, int rows, std::vector<T>& u);
// dx [rows, in] += the adapter's share of the input gradient; dA and dB accumulate in adapter.grads.
template <class T>
void lora_backward(Adapter<T>& adapter, const LoraSite& site, T* dx, const T* dy, const T* x, const std::vector<T>& u, int rows);

}  // namespace ca::nn
