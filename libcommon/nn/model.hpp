// The native decoder-only transformer (Llama / Qwen2 family) on the CPU: RMSNorm, RoPE, grouped-query
// attention, SwiGLU, tied or untied embeddings, an LM head (policy) or a value head (critic).
// Plain loops in the style of llm.c; templated on the scalar so a float64 twin checks the float32 path.
// Checkpoints are Hugging Face folders (config.json + model.safetensors) that vLLM and transformers load.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"

namespace ca::nn {

template <class T> class Adapter;  // lora.hpp

struct Config {
  std::string model_type = "qwen2";  // "qwen2" (q/k/v biases) or "llama"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;  // hidden_size / num_attention_heads unless config.json says otherwise
  int max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool attention_bias = true;  // Qwen2 always has q/k/v biases; Llama's `attention_bias` key
  // A critic: the backbone and a value head `score` (HF *ForTokenClassification, num_labels 1)
  // instead of the LM head.
  bool value_head = false;
  Json extra = Json::object();  // keys we do not use, written back unchanged

  // Reads the keys Qwen2/Llama use; throws InputError naming a missing or bad key.
  static Config from_json(const Json& j);
  Json to_json() const;
  // Throws InputError when the shapes do not fit together (heads dividing, sizes positive, no int overflow).
  void validate() const;
  // Parameters the config implies (tied embeddings counted once); -1 past 2^60 or on overflow.
  int64_t parameter_count() const;
};

// Every tensor the config implies, in layout order, as (Hugging Face name, shape); `f` returns false to
// stop. The one description of the layout: the model's offsets and the checkpoint checks both use it.
void for_each_param(const Config& c, const std::function<bool(const std::string&, const std::vector<int64_t>&)>& f);

// The standard deviation of the random init (Model::init_random, ppo-step init's --std default).
inline constexpr double kInitStd = 0.02;

// Where a named tensor lives in the flat parameter vector.
struct ParamInfo {
  std::string name;  // Hugging Face name, e.g. model.layers.0.self_attn.q_proj.weight
  std::vector<int64_t> shape;
  std::size_t offset = 0;
  std::size_t size = 0;
};

// Offsets of one layer's tensors in the flat parameter vector.
struct LayerOffsets {
  std::size_t input_norm, q, k, v, q_bias, k_bias, v_bias, o, post_norm, gate, up, down;
};

// Activations of one sequence kept for the backward pass.
template <class T> struct LayerActivations {
  std::vector<T> x_in;     // [T, C] residual stream entering the layer
  std::vector<T> xn1;      // [T, C] after input_layernorm
  std::vector<T> rstd1;    // [T]
  std::vector<T> q, k, v;  // [T, H*D], [T, KV*D], [T, KV*D]; q and k after RoPE
  std::vector<T> probs;    // [H, T, T] attention probabilities (causal, zero above the diagonal)
  std::vector<T> att;      // [T, H*D] attention output before o_proj
  std::vector<T> x_mid;    // [T, C] residual after attention
  std::vector<T> xn2;      // [T, C] after post_attention_layernorm
  std::vector<T> rstd2;    // [T]
  std::vector<T> gate, up, act;  // [T, F]; act = silu(gate) * up
  std::vector<std::vector<T>> lora_u;  // with an adapter: per LoraModule, scaling * A x [T, r] (empty: no site)
};

template <class T> struct Activations {
  int seq_len = 0;
  std::vector<int> tokens;
  std::vector<LayerActivations<T>> layers;
  std::vector<T> x_out;   // [T, C] residual stream after the last layer
  std::vector<T> xf;      // [T, C] after model.norm
  std::vector<T> rstdf;   // [T]
  std::vector<T> logits;  // [T, V] (policy)
  std::vector<T> values;  // [T] (critic): value head on position t
};

template <class T> class Model {
 public:
  explicit Model(const Config& config);
  // The layout alone (params(), the offsets), no weights or gradients allocated: for a GPU model that
  // streams its weights from a checkpoint without a host copy.
  Model(const Config& config, bool allocate);

  const Config& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  std::size_t num_parameters() const { return params_.empty() ? 0 : params_.back().offset + params_.back().size; }
  const ParamInfo& param(const std::string& name) const;  // throws InternalError when unknown

  // Normal(0, std) weights (norms set to 1, biases 0), seeded: for tests and toy tasks.
  void init_random(uint64_t seed, double std = kInitStd);

  // Forward over one sequence (positions 0..T-1); fills `acts` (logits for a policy, values for a critic).
  // With an adapter (lora.hpp) its sites add to the base's linear layers, and a critic adapter's score
  // head replaces the LM head (values, not logits).
  void forward(const std::vector<int>& tokens, Activations<T>& acts, const Adapter<T>* adapter = nullptr) const;
  // Backward from dL/dlogits [T, V] (policy) or dL/dvalues [T] (critic); adds into `grads`. With an
  // adapter the base is frozen: only adapter->grads accumulate, `grads` is neither read nor allocated.
  void backward(const Activations<T>& acts, const std::vector<T>& dout, Adapter<T>* adapter = nullptr);
  void zero_grad();
  // Frees the gradients of a model that only runs forward (sampling; the host copy of a GPU model):
  // as many bytes as the weights. zero_grad or backward allocates them again.
  void release_gradients() { std::vector<T>().swap(grads); }

  // Flat parameters and their gradients, in the order of params().
  std::vector<T> weights;
  std::vector<T> grads;

  // Offsets into `weights` (public for the decoder with a KV cache, which reuses them).
  std::vector<LayerOffsets> layer_offsets;
  std::size_t embed_offset = 0, final_norm_offset = 0, lm_head_offset = 0, score_weight_offset = 0,
              score_bias_offset = 0;

 private:
  std::size_t add_param(const std::string& name, std::vector<int64_t> shape);
  // forward's steps: one decoder layer on the residual stream `x` (keeping what the backward needs in
  // L), and the final norm with the head (logits, or a critic's values).
  void layer_forward(int l, std::vector<T>& x, LayerActivations<T>& L, const Adapter<T>* adapter) const;
  void head_forward(const std::vector<T>& x, Activations<T>& a, const Adapter<T>* adapter, bool critic) const;
  Config config_;
  std::vector<ParamInfo> params_;
};

// How load_model and open_checkpoint (checkpoint.hpp) get a folder's weights. By default its
// *.safetensors are read. dummy (vLLM's --load-format dummy): only config.json is read and the weights
// are those `ppo-step init --seed seed --std std` writes for that config in its torch_dtype (F32 when
// it names none), as read back, bit for bit, drawn as they are loaded and never on disk: benchmarks at
// shapes whose weights the disk cannot hold.
struct LoadFormat {
  bool dummy = false;
  uint64_t seed = 0;
  double std = kInitStd;
};

// config.json of a checkpoint folder; InputError naming the file and the key otherwise.
Config read_checkpoint_config(const std::string& dir);

// Hugging Face layout. load: config.json and every *.safetensors in the folder (F32, F64, BF16, F16
// converted); a critic folder holds score.weight [1, C] (and score.bias) instead of lm_head.weight.
// `as_critic` loads a causal-LM folder as a critic (value head zero) when it has no score tensor.
// Before allocating, the files' headers are checked against config.json (every tensor there, with
// its shape; none in two files); after reading, every weight must be finite. InputError naming the
// file and tensor otherwise.
// With format.dummy only config.json is read (see LoadFormat).
template <class T> Model<T> load_model(const std::string& dir, bool as_critic = false, const LoadFormat& format = {});
// save: config.json (+ architectures, torch_dtype float32) and model.safetensors in F32, each written
// whole (AtomicFile). A non-finite weight is an InputError and nothing is written.
template <class T> void save_model(const Model<T>& model, const std::string& dir);
// "" when every weight is finite, else which tensor and element is not ("tensor 'x' element 3 is nan").
template <class T> std::string first_non_finite(const Model<T>& model);

// A checkpoint folder written complete or not at all: files go to a fresh staging folder beside `dir`
// (.NAME.staging-PID-N), and commit() syncs it and renames it into place. An earlier checkpoint at
// `dir` is replaced as a whole, so no weight file of it survives into the new one. A `dir` that
// exists and is neither empty nor a checkpoint (no config.json, or adapter_config.json for a LoRA adapter) is a UsageError, before and at commit.
// Not committed (an exception): the staging folder is removed and `dir` is as it was. An earlier
// checkpoint is swapped out in one renameat2(RENAME_EXCHANGE) where the file system has it (else moved
// aside, then replaced). What writers to `dir` killed mid-write left (their PID gone) is cleared at
// construction: staging folders removed, a checkpoint moved aside put back if `dir` is missing.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string dir);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  const std::string& path() const { return stage_; }  // where the files go until commit()
  const std::string& target() const { return dir_; }
  void commit();

 private:
  std::string dir_, stage_;
  bool committed_ = false;
};
// The check CheckpointWriter makes, for a tool to fail before its work rather than after.
void check_checkpoint_target(const std::string& dir);

// Converts the weights of one precision into another (float64 twin of a float32 model).
template <class To, class From> Model<To> convert_model(const Model<From>& from);

// ---- Per-token head math shared by training and sampling ----
// log-softmax of logits/temperature at `target`, and the entropy of that distribution.
template <class T> void token_logprob_entropy(const T* logits, int vocab, int target, double temperature,
                                              T& logprob, T& entropy);
// Adds into dlogits the gradient of (c_logprob * logprob + c_entropy * entropy) for the same row.
template <class T> void token_head_backward(const T* logits, int vocab, int target, double temperature,
                                            T c_logprob, T c_entropy, T* dlogits);

}  // namespace ca::nn
