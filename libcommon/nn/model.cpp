// The native transformer: config, parameter layout, forward and backward over one sequence, and the
// Hugging Face checkpoint layout. Every op is a plain loop; the CUDA path (libcommon/nn_cuda) is tested against it.
#include "libcommon/nn/model.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <climits>
#include <cmath>
#include <map>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/log.hpp"
#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/ops.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::nn {

// ---------------------------------------------------------------------------------------------
// Config

namespace {
int get_int(const Json& j, const char* key, std::optional<int> fallback = std::nullopt) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw InputError(std::string("config.json: missing '") + key + "'");
  }
  if (!j[key].is_number_integer()) throw InputError(std::string("config.json: '") + key + "' must be an integer");
  // Read at full width first: get<int>() would wrap 2^32 + 5 to 5 and train a different model.
  const bool too_big = j[key].is_number_unsigned() ? j[key].get<uint64_t>() > uint64_t(INT32_MAX)
                                                   : j[key].get<int64_t>() > INT32_MAX || j[key].get<int64_t>() < INT32_MIN;
  if (too_big) throw InputError(std::string("config.json: '") + key + "' is " + j[key].dump() + ", outside 32 bits");
  return j[key].get<int>();
}
double get_double(const Json& j, const char* key, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw InputError(std::string("config.json: '") + key + "' must be a number");
  return j[key].get<double>();
}
const char* kKnownKeys[] = {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                            "rms_norm_eps", "rope_theta", "tie_word_embeddings", "attention_bias", "architectures",
                            "torch_dtype", "num_labels", "hidden_act"};
}  // namespace

Config Config::from_json(const Json& j) {
  if (!j.is_object()) throw InputError("config.json: not a JSON object");
  Config c;
  c.model_type = get_setting<std::string>(j, "/model_type", "qwen2", "config.json");
  if (c.model_type != "qwen2" && c.model_type != "llama")
    throw InputError("config.json: model_type '" + c.model_type + "' is not supported (qwen2, llama)");
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, "hidden_size");
  c.intermediate_size = get_int(j, "intermediate_size");
  c.num_hidden_layers = get_int(j, "num_hidden_layers");
  c.num_attention_heads = get_int(j, "num_attention_heads");
  c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads);
  c.head_dim = get_int(j, "head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 2048);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_double(j, "rope_theta", 10000.0);
  // transformers 5 writes RoPE settings under rope_parameters {rope_type, rope_theta}; only plain
  // ("default") RoPE is supported, anything else is refused rather than silently mis-rotated.
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const Json& rp = j["rope_parameters"];
    std::string type = get_setting<std::string>(rp, "/rope_type", "default", "config.json: rope_parameters");
    if (type != "default")
      throw InputError("config.json: rope_parameters.rope_type '" + type + "' is not supported by the native model");
    c.rope_theta = get_double(rp, "rope_theta", c.rope_theta);
  }
  c.tie_word_embeddings = get_setting(j, "/tie_word_embeddings", false, "config.json");
  c.attention_bias = c.model_type == "qwen2" ? true : get_setting(j, "/attention_bias", false, "config.json");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    throw InputError("config.json: hidden_act must be silu (SwiGLU), got " + j["hidden_act"].dump());
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw InputError("config.json: rope_scaling is not supported by the native model");
  if (j.contains("architectures") && j["architectures"].is_array())
    for (auto& a : j["architectures"])
      if (a.is_string() && a.get<std::string>().find("ForTokenClassification") != std::string::npos) c.value_head = true;
  for (auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* key : kKnownKeys) known = known || k == key;
    if (!known) c.extra[k] = v;
  }
  c.validate();
  return c;
}

Config read_checkpoint_config(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  Json cj;
  try {
    cj = parse_json(read_file(config_path), "'" + config_path + "'");
  } catch (const Json::exception& e) {
    throw InputError("'" + config_path + "': " + e.what());
  }
  try {
    return Config::from_json(cj);
  } catch (const InputError& e) {
    std::string why = e.what();
    for (const char* prefix : {"config.json: ", "config: "})
      if (why.rfind(prefix, 0) == 0) why = why.substr(std::strlen(prefix));
    throw InputError("'" + config_path + "': " + why);
  }
}

Json Config::to_json() const {
  std::string arch = model_type == "qwen2" ? "Qwen2" : "Llama";
  Json j = extra;
  j["architectures"] = Json::array({arch + (value_head ? "ForTokenClassification" : "ForCausalLM")});
  j["model_type"] = model_type;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "float32";
  if (model_type == "llama") j["attention_bias"] = attention_bias;
  if (value_head) j["num_labels"] = 1;
  return j;
}

void Config::validate() const {
  auto positive = [](int v, const char* name) {
    if (v <= 0) throw InputError(std::string("config: ") + name + " must be positive");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  if (num_attention_heads % num_key_value_heads != 0)
    throw InputError("config: num_attention_heads must be a multiple of num_key_value_heads");
  if (head_dim % 2 != 0) throw InputError("config: head_dim must be even (RoPE rotates pairs)");
  // The forward's int arithmetic: every matrix side must fit 31 bits, and the whole model 2^62 bytes.
  const int64_t QD = int64_t(num_attention_heads) * head_dim, KD = int64_t(num_key_value_heads) * head_dim;
  if (QD > INT32_MAX || KD > INT32_MAX)
    throw InputError("config: num_attention_heads * head_dim (" + std::to_string(QD) + ") does not fit 32 bits");
  if (parameter_count() < 0)
    throw InputError("config: the model has more than 2^60 parameters (vocab_size " + std::to_string(vocab_size) +
                     ", hidden_size " + std::to_string(hidden_size) + ", intermediate_size " +
                     std::to_string(intermediate_size) + ", num_hidden_layers " + std::to_string(num_hidden_layers) + ")");
}

int64_t Config::parameter_count() const {
  int64_t total = 0;
  bool overflow = false;
  for_each_param(*this, [&](const std::string&, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (auto d : shape) overflow |= __builtin_mul_overflow(n, d, &n);
    overflow |= __builtin_add_overflow(total, n, &total);
    return !overflow;
  });
  return overflow || total > (int64_t(1) << 60) ? -1 : total;
}

void for_each_param(const Config& c, const std::function<bool(const std::string&, const std::vector<int64_t>&)>& f) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t QD = int64_t(c.num_attention_heads) * c.head_dim, KD = int64_t(c.num_key_value_heads) * c.head_dim;
  if (!f("model.embed_tokens.weight", {V, C})) return;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (!f(p + "input_layernorm.weight", {C}) || !f(p + "self_attn.q_proj.weight", {QD, C}) ||
        !f(p + "self_attn.k_proj.weight", {KD, C}) || !f(p + "self_attn.v_proj.weight", {KD, C}))
      return;
    if (c.attention_bias &&
        (!f(p + "self_attn.q_proj.bias", {QD}) || !f(p + "self_attn.k_proj.bias", {KD}) || !f(p + "self_attn.v_proj.bias", {KD})))
      return;
    if (!f(p + "self_attn.o_proj.weight", {C, QD}) || !f(p + "post_attention_layernorm.weight", {C}) ||
        !f(p + "mlp.gate_proj.weight", {F, C}) || !f(p + "mlp.up_proj.weight", {F, C}) || !f(p + "mlp.down_proj.weight", {C, F}))
      return;
  }
  if (!f("model.norm.weight", {C})) return;
  if (c.value_head) {
    if (f("score.weight", {1, C})) f("score.bias", {1});
  } else if (!c.tie_word_embeddings) {
    f("lm_head.weight", {V, C});
  }
}

// ---------------------------------------------------------------------------------------------
// Parameter layout

template <class T> std::size_t Model<T>::add_param(const std::string& name, std::vector<int64_t> shape) {
  ParamInfo p;
  p.name = name;
  p.shape = std::move(shape);
  p.size = 1;
  for (auto s : p.shape) p.size *= static_cast<std::size_t>(s);
  p.offset = params_.empty() ? 0 : params_.back().offset + params_.back().size;
  params_.push_back(p);
  return p.offset;
}

template <class T> Model<T>::Model(const Config& config) : Model(config, true) {}

template <class T> Model<T>::Model(const Config& config, bool allocate) : config_(config) {
  config_.validate();
  // Before allocating: weights and gradients must fit in this machine's memory (a config of 10^9
  // hidden units or 100,000 layers is refused here, not by the allocator or the OOM killer).
  const double bytes = allocate ? double(config_.parameter_count()) * double(sizeof(T)) * 2.0 : 0.0;
  double physical = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {  // `ulimit -v`: the allocator would fail first
    struct rlimit rl {};
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && double(rl.rlim_cur) < physical)
      physical = double(rl.rlim_cur);
  }
  if (physical > 0 && bytes > physical)
    throw InputError("config: " + std::to_string(config_.parameter_count()) + " parameters need " +
                     std::to_string(int64_t(bytes / double(1 << 30))) + " GiB for weights and gradients, more than the " +
                     std::to_string(int64_t(physical / double(1 << 30))) + " GiB of memory (or ulimit) here (hidden_size " +
                     std::to_string(config_.hidden_size) + ", num_hidden_layers " + std::to_string(config_.num_hidden_layers) + ")");
  std::map<std::string, std::size_t> offset;
  for_each_param(config_, [&](const std::string& name, const std::vector<int64_t>& shape) {
    offset[name] = add_param(name, shape);
    return true;
  });
  embed_offset = offset.at("model.embed_tokens.weight");
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.input_norm = offset.at(p + "input_layernorm.weight");
    o.q = offset.at(p + "self_attn.q_proj.weight");
    o.k = offset.at(p + "self_attn.k_proj.weight");
    o.v = offset.at(p + "self_attn.v_proj.weight");
    if (config_.attention_bias) {
      o.q_bias = offset.at(p + "self_attn.q_proj.bias");
      o.k_bias = offset.at(p + "self_attn.k_proj.bias");
      o.v_bias = offset.at(p + "self_attn.v_proj.bias");
    }
    o.o = offset.at(p + "self_attn.o_proj.weight");
    o.post_norm = offset.at(p + "post_attention_layernorm.weight");
    o.gate = offset.at(p + "mlp.gate_proj.weight");
    o.up = offset.at(p + "mlp.up_proj.weight");
    o.down = offset.at(p + "mlp.down_proj.weight");
    layer_offsets.push_back(o);
  }
  final_norm_offset = offset.at("model.norm.weight");
  if (config_.value_head) {
    score_weight_offset = offset.at("score.weight");
    score_bias_offset = offset.at("score.bias");
  } else {
    lm_head_offset = config_.tie_word_embeddings ? embed_offset : offset.at("lm_head.weight");
  }
  if (!allocate) return;
  weights.assign(params_.back().offset + params_.back().size, T(0));
  grads.assign(weights.size(), T(0));
  for (auto& p : params_)
    if (p.name.find("norm.weight") != std::string::npos) std::fill_n(weights.begin() + p.offset, p.size, T(1));
}

template <class T> const ParamInfo& Model<T>::param(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return p;
  throw InternalError("native model: no parameter '" + name + "'");
}

template <class T> void Model<T>::init_random(uint64_t seed, double std) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, std);
  for (auto& p : params_) {
    bool is_norm = p.name.find("norm.weight") != std::string::npos;
    bool is_bias = p.name.size() > 5 && p.name.substr(p.name.size() - 5) == ".bias";
    for (std::size_t i = 0; i < p.size; ++i)
      weights[p.offset + i] = is_norm ? T(1) : is_bias ? T(0) : T(normal(rng));
  }
}

template <class T> void Model<T>::zero_grad() { grads.assign(weights.size(), T(0)); }

// ---------------------------------------------------------------------------------------------
// Forward and backward over one sequence

namespace {
// An adapter must be made for this base: same shape (it is laid out from its base's config).
template <class T> void check_adapter_fits(const Config& c, const Adapter<T>& ad) {
  const Config& b = ad.base_config();
  if (c.value_head || b.hidden_size != c.hidden_size || b.intermediate_size != c.intermediate_size ||
      b.num_hidden_layers != c.num_hidden_layers || b.num_attention_heads != c.num_attention_heads ||
      b.num_key_value_heads != c.num_key_value_heads || b.head_dim != c.head_dim || b.vocab_size != c.vocab_size)
    throw InternalError("native model: the adapter was laid out for another base");
}
}  // namespace

template <class T> void Model<T>::forward(const std::vector<int>& tokens, Activations<T>& a, const Adapter<T>* adapter) const {
  const int Tn = static_cast<int>(tokens.size());
  const int C = config_.hidden_size, V = config_.vocab_size;
  if (Tn == 0) throw InputError("native model: empty sequence");
  if (Tn > config_.max_position_embeddings)
    throw InputError("native model: sequence of " + std::to_string(Tn) + " tokens is longer than max_position_embeddings " +
                     std::to_string(config_.max_position_embeddings));
  if (adapter) check_adapter_fits(config_, *adapter);
  const bool critic = config_.value_head || (adapter && adapter->config().value_head);
  a.seq_len = Tn;
  a.tokens = tokens;
  a.layers.resize(config_.num_hidden_layers);
  const T* W = weights.data();

  std::vector<T> x(std::size_t(Tn) * C);
  for (int t = 0; t < Tn; ++t) {
    int tok = tokens[t];
    if (tok < 0 || tok >= V)
      throw InputError("native model: token id " + std::to_string(tok) + " outside the vocabulary of " + std::to_string(V));
    std::copy_n(W + embed_offset + std::size_t(tok) * C, C, x.begin() + std::size_t(t) * C);
  }
  for (int l = 0; l < config_.num_hidden_layers; ++l) layer_forward(l, x, a.layers[l], adapter);
  head_forward(x, a, adapter, critic);
}

template <class T>
void Model<T>::layer_forward(int l, std::vector<T>& x, LayerActivations<T>& L, const Adapter<T>* adapter) const {
  const int Tn = static_cast<int>(x.size() / std::size_t(config_.hidden_size));
  const int C = config_.hidden_size, F = config_.intermediate_size;
  const int H = config_.num_attention_heads, KV = config_.num_key_value_heads, D = config_.head_dim;
  const T eps = T(config_.rms_norm_eps);
  const T* W = weights.data();
  const LayerOffsets& o = layer_offsets[l];
  L.lora_u.resize(adapter ? kLoraModules : 0);
  // y += the adapter's share on (l, m), when the adapter has that site
  auto lora = [&](LoraModule m, T* y, const T* in) {
    if (!adapter) return;
    if (const LoraSite* s = adapter->site(l, m)) lora_forward(*adapter, *s, y, in, Tn, L.lora_u[int(m)]);
  };
  L.x_in = x;
  L.xn1.resize(x.size());
  L.rstd1.resize(Tn);
  rmsnorm_forward(L.xn1.data(), L.rstd1.data(), x.data(), W + o.input_norm, Tn, C, eps);
  L.q.resize(std::size_t(Tn) * H * D);
  L.k.resize(std::size_t(Tn) * KV * D);
  L.v.resize(std::size_t(Tn) * KV * D);
  const bool bias = config_.attention_bias;
  matmul_forward(L.q.data(), L.xn1.data(), W + o.q, bias ? W + o.q_bias : nullptr, Tn, C, H * D);
  matmul_forward(L.k.data(), L.xn1.data(), W + o.k, bias ? W + o.k_bias : nullptr, Tn, C, KV * D);
  matmul_forward(L.v.data(), L.xn1.data(), W + o.v, bias ? W + o.v_bias : nullptr, Tn, C, KV * D);
  lora(LoraModule::q_proj, L.q.data(), L.xn1.data());
  lora(LoraModule::k_proj, L.k.data(), L.xn1.data());
  lora(LoraModule::v_proj, L.v.data(), L.xn1.data());
  for (int t = 0; t < Tn; ++t) {
    for (int h = 0; h < H; ++h) rope_forward(L.q.data() + (std::size_t(t) * H + h) * D, t, D, config_.rope_theta);
    for (int h = 0; h < KV; ++h) rope_forward(L.k.data() + (std::size_t(t) * KV + h) * D, t, D, config_.rope_theta);
  }
  L.probs.assign(std::size_t(H) * Tn * Tn, T(0));
  L.att.assign(std::size_t(Tn) * H * D, T(0));
  attention_forward(L.att.data(), L.probs.data(), L.q.data(), L.k.data(), L.v.data(), Tn, H, KV, D);
  std::vector<T> proj(std::size_t(Tn) * C);
  matmul_forward(proj.data(), L.att.data(), W + o.o, nullptr, Tn, H * D, C);
  lora(LoraModule::o_proj, proj.data(), L.att.data());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  L.x_mid = x;
  L.xn2.resize(x.size());
  L.rstd2.resize(Tn);
  rmsnorm_forward(L.xn2.data(), L.rstd2.data(), x.data(), W + o.post_norm, Tn, C, eps);
  L.gate.resize(std::size_t(Tn) * F);
  L.up.resize(std::size_t(Tn) * F);
  L.act.resize(std::size_t(Tn) * F);
  matmul_forward(L.gate.data(), L.xn2.data(), W + o.gate, nullptr, Tn, C, F);
  matmul_forward(L.up.data(), L.xn2.data(), W + o.up, nullptr, Tn, C, F);
  lora(LoraModule::gate_proj, L.gate.data(), L.xn2.data());
  lora(LoraModule::up_proj, L.up.data(), L.xn2.data());
  swiglu_forward(L.act.data(), L.gate.data(), L.up.data(), std::size_t(Tn) * F);
  matmul_forward(proj.data(), L.act.data(), W + o.down, nullptr, Tn, F, C);
  lora(LoraModule::down_proj, proj.data(), L.act.data());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
}

template <class T>
void Model<T>::head_forward(const std::vector<T>& x, Activations<T>& a, const Adapter<T>* adapter, bool critic) const {
  const int Tn = a.seq_len, C = config_.hidden_size, V = config_.vocab_size;
  const T eps = T(config_.rms_norm_eps);
  const T* W = weights.data();
  a.x_out = x;
  a.xf.resize(x.size());
  a.rstdf.resize(Tn);
  rmsnorm_forward(a.xf.data(), a.rstdf.data(), x.data(), W + final_norm_offset, Tn, C, eps);
  if (critic) {
    a.values.resize(Tn);
    const T* sw = adapter && adapter->config().value_head ? adapter->weights.data() + adapter->score_weight : W + score_weight_offset;
    const T* sb = adapter && adapter->config().value_head ? adapter->weights.data() + adapter->score_bias : W + score_bias_offset;
    matmul_forward(a.values.data(), a.xf.data(), sw, sb, Tn, C, 1);
  } else {
    a.logits.resize(std::size_t(Tn) * V);
    matmul_forward(a.logits.data(), a.xf.data(), W + lm_head_offset, nullptr, Tn, C, V);
  }
}

template <class T> void Model<T>::backward(const Activations<T>& a, const std::vector<T>& dout, Adapter<T>* adapter) {
  const int Tn = a.seq_len;
  const int C = config_.hidden_size, F = config_.intermediate_size, V = config_.vocab_size;
  const int H = config_.num_attention_heads, KV = config_.num_key_value_heads, D = config_.head_dim;
  const T* W = weights.data();
  if (adapter) check_adapter_fits(config_, *adapter);
  const bool frozen = adapter != nullptr;  // LoRA: the base gets no gradient
  if (!frozen && grads.size() != weights.size()) grads.assign(weights.size(), T(0));  // released: start from zero
  T* G = frozen ? nullptr : grads.data();
  auto gw = [&](std::size_t offset) -> T* { return G ? G + offset : nullptr; };
  std::vector<T> dxf(std::size_t(Tn) * C, T(0));
  if (adapter && adapter->config().value_head) {
    if (dout.size() != std::size_t(Tn)) throw InternalError("native model: dvalues has the wrong size");
    T* AG = adapter->grads.data();
    const T* AW = adapter->weights.data();
    matmul_backward(dxf.data(), AG + adapter->score_weight, AG + adapter->score_bias, dout.data(), a.xf.data(),
                    AW + adapter->score_weight, Tn, C, 1);
  } else if (config_.value_head) {
    if (dout.size() != std::size_t(Tn)) throw InternalError("native model: dvalues has the wrong size");
    matmul_backward(dxf.data(), gw(score_weight_offset), G ? G + score_bias_offset : nullptr, dout.data(), a.xf.data(),
                    W + score_weight_offset, Tn, C, 1);
  } else {
    if (dout.size() != std::size_t(Tn) * V) throw InternalError("native model: dlogits has the wrong size");
    matmul_backward(dxf.data(), gw(lm_head_offset), nullptr, dout.data(), a.xf.data(), W + lm_head_offset, Tn, C, V);
  }
  std::vector<T> dx(std::size_t(Tn) * C, T(0));  // gradient of the residual stream
  rmsnorm_backward(dx.data(), gw(final_norm_offset), dxf.data(), a.x_out.data(), W + final_norm_offset,
                   a.rstdf.data(), Tn, C);
  std::vector<T> dact(std::size_t(Tn) * F), dgate(std::size_t(Tn) * F), dup(std::size_t(Tn) * F);
  std::vector<T> dxn(std::size_t(Tn) * C), datt(std::size_t(Tn) * H * D);
  std::vector<T> dq(std::size_t(Tn) * H * D), dk(std::size_t(Tn) * KV * D), dv(std::size_t(Tn) * KV * D);
  for (int l = config_.num_hidden_layers - 1; l >= 0; --l) {
    const LayerOffsets& o = layer_offsets[l];
    const LayerActivations<T>& L = a.layers[l];
    // din += the adapter's share on (l, m), and its A and B gradients
    auto lora = [&](LoraModule m, T* din, const T* dy, const T* in) {
      if (!adapter) return;
      if (const LoraSite* s = adapter->site(l, m)) lora_backward(*adapter, *s, din, dy, in, L.lora_u[int(m)], Tn);
    };
    // MLP: x_out = x_mid + down(silu(gate(xn2)) * up(xn2))
    std::fill(dact.begin(), dact.end(), T(0));
    matmul_backward(dact.data(), gw(o.down), nullptr, dx.data(), L.act.data(), W + o.down, Tn, F, C);
    lora(LoraModule::down_proj, dact.data(), dx.data(), L.act.data());
    swiglu_backward(dgate.data(), dup.data(), dact.data(), L.gate.data(), L.up.data(), std::size_t(Tn) * F);
    std::fill(dxn.begin(), dxn.end(), T(0));
    matmul_backward(dxn.data(), gw(o.gate), nullptr, dgate.data(), L.xn2.data(), W + o.gate, Tn, C, F);
    matmul_backward(dxn.data(), gw(o.up), nullptr, dup.data(), L.xn2.data(), W + o.up, Tn, C, F);
    lora(LoraModule::gate_proj, dxn.data(), dgate.data(), L.xn2.data());
    lora(LoraModule::up_proj, dxn.data(), dup.data(), L.xn2.data());
    rmsnorm_backward(dx.data(), gw(o.post_norm), dxn.data(), L.x_mid.data(), W + o.post_norm, L.rstd2.data(), Tn, C);
    // Attention: x_mid = x_in + o_proj(attention(rope(q), rope(k), v))
    std::fill(datt.begin(), datt.end(), T(0));
    matmul_backward(datt.data(), gw(o.o), nullptr, dx.data(), L.att.data(), W + o.o, Tn, H * D, C);
    lora(LoraModule::o_proj, datt.data(), dx.data(), L.att.data());
    std::fill(dq.begin(), dq.end(), T(0));
    std::fill(dk.begin(), dk.end(), T(0));
    std::fill(dv.begin(), dv.end(), T(0));
    attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), L.probs.data(), L.q.data(), L.k.data(),
                       L.v.data(), Tn, H, KV, D);
    for (int t = 0; t < Tn; ++t) {
      for (int h = 0; h < H; ++h) rope_backward(dq.data() + (std::size_t(t) * H + h) * D, t, D, config_.rope_theta);
      for (int h = 0; h < KV; ++h) rope_backward(dk.data() + (std::size_t(t) * KV + h) * D, t, D, config_.rope_theta);
    }
    const bool bias = config_.attention_bias;
    std::fill(dxn.begin(), dxn.end(), T(0));
    const bool gb = bias && G;
    matmul_backward(dxn.data(), gw(o.q), gb ? G + o.q_bias : nullptr, dq.data(), L.xn1.data(), W + o.q, Tn, C, H * D);
    matmul_backward(dxn.data(), gw(o.k), gb ? G + o.k_bias : nullptr, dk.data(), L.xn1.data(), W + o.k, Tn, C, KV * D);
    matmul_backward(dxn.data(), gw(o.v), gb ? G + o.v_bias : nullptr, dv.data(), L.xn1.data(), W + o.v, Tn, C, KV * D);
    lora(LoraModule::q_proj, dxn.data(), dq.data(), L.xn1.data());
    lora(LoraModule::k_proj, dxn.data(), dk.data(), L.xn1.data());
    lora(LoraModule::v_proj, dxn.data(), dv.data(), L.xn1.data());
    rmsnorm_backward(dx.data(), gw(o.input_norm), dxn.data(), L.x_in.data(), W + o.input_norm, L.rstd1.data(), Tn, C);
  }
  if (frozen) return;
  for (int t = 0; t < Tn; ++t) {
    T* row = G + embed_offset + std::size_t(a.tokens[t]) * C;
    for (int c = 0; c < C; ++c) row[c] += dx[std::size_t(t) * C + c];
  }
}

// ---------------------------------------------------------------------------------------------
// Per-token head math

namespace {
// log sum_j exp(z_j / tau) and the entropy of softmax(z / tau), the shared part of the head's forward
// and backward.
template <class T> void log_sum_exp_entropy(const T* z, int V, T inv, T& lse, T& entropy) {
  T mx = z[0] * inv;
  for (int j = 1; j < V; ++j) mx = std::max(mx, z[j] * inv);
  T sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(z[j] * inv - mx);
  lse = mx + std::log(sum);
  entropy = 0;
  for (int j = 0; j < V; ++j) {
    T lp = z[j] * inv - lse;
    entropy -= std::exp(lp) * lp;
  }
}
}  // namespace

template <class T> void token_logprob_entropy(const T* z, int V, int target, double temperature, T& logprob, T& entropy) {
  const T inv = T(1.0 / temperature);
  T lse;
  log_sum_exp_entropy(z, V, inv, lse, entropy);
  logprob = z[target] * inv - lse;
}

template <class T> void token_head_backward(const T* z, int V, int target, double temperature, T c_lp, T c_ent, T* dz) {
  // d logp_y / dz_j = (delta_jy - p_j) / tau;  d H / dz_j = -p_j (log p_j + H) / tau.
  const T inv = T(1.0 / temperature);
  T lse, ent;
  log_sum_exp_entropy(z, V, inv, lse, ent);
  for (int j = 0; j < V; ++j) {
    T lp = z[j] * inv - lse, p = std::exp(lp);
    T g = c_lp * ((j == target ? T(1) : T(0)) - p) - c_ent * p * (lp + ent);
    dz[j] += g * inv;
  }
}

// ---------------------------------------------------------------------------------------------
// Hugging Face layout

template <class T> std::string first_non_finite(const Model<T>& model) {
  for (auto& p : model.params())
    for (std::size_t i = 0; i < p.size; ++i) {
      const T v = model.weights[p.offset + i];
      if (!std::isfinite(v))
        return "tensor '" + p.name + "' element " + std::to_string(i) + " is " + (std::isnan(v) ? "nan" : "inf");
    }
  return "";
}

OpenCheckpoint open_checkpoint(const std::string& dir, bool as_critic, const LoadFormat& format) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw InputError("checkpoint '" + dir + "' is not a folder (config.json" + (format.dummy ? "" : " + model.safetensors") + ")");
  OpenCheckpoint ck;
  ck.config = read_checkpoint_config(dir);
  // Headers first (CheckpointReader): every tensor the config implies must be in the files with its
  // shape before one byte is allocated for the model (a config of 10^9 hidden units or 100,000 layers
  // against a small file fails here); a tensor in two files, or a shard the index does not name, is
  // refused: a stale shard must not silently win over new weights. Dummy: the folder's own config is
  // what init would have drawn for (a causal LM opened as a critic: the LM's draw, its value head zero).
  CheckpointReader* files = nullptr;
  if (format.dummy) {
    ck.reader = std::make_unique<RandomInitWeights>(ck.config, format.seed, format.std, checkpoint_disk_dtype(dir), dir);
  } else {
    auto reader = std::make_unique<CheckpointReader>(dir);
    files = reader.get();
    ck.reader = std::move(reader);
  }
  const bool has_score = ck.reader->has("score.weight");
  if (as_critic && !has_score) ck.config.value_head = true;  // a causal LM as the critic's starting point
  if (!as_critic && ck.config.value_head) throw InputError("checkpoint '" + dir + "' is a critic (score head), not a policy");
  if (files) files->check_layout(ck.config, dir + "/config.json", {"score.weight", "score.bias"});  // a fresh value head is zero
  return ck;
}

template <class T> Model<T> load_model(const std::string& dir, bool as_critic, const LoadFormat& format) {
  auto [config, reader_ptr] = open_checkpoint(dir, as_critic, format);
  const WeightSource& reader = *reader_ptr;
  const bool has_score = reader.has("score.weight");
  Model<T> model(config);
  std::vector<WeightSource::Request<T>> requests;
  for (auto& p : model.params())
    if (reader.has(p.name)) requests.push_back({p.name, 0, p.size, model.weights.data() + p.offset});
  reader.read_parallel(requests);
  if (as_critic && !has_score)
    for (auto* name : {"score.weight", "score.bias"}) {
      auto& p = model.param(name);
      std::fill_n(model.weights.begin() + p.offset, p.size, T(0));
    }
  if (auto bad = first_non_finite(model); !bad.empty())
    throw InputError("checkpoint '" + dir + "': " + bad + ": a model with non-finite weights cannot be trained or sampled");
  return model;
}

template <class T> void save_model(const Model<T>& model, const std::string& dir, const WriteOptions& options) {
  if (auto bad = first_non_finite(model); !bad.empty())
    throw InputError("checkpoint '" + dir + "' not written: " + bad);
  std::filesystem::create_directories(dir);
  std::vector<TensorSpec> specs;
  for (auto& p : model.params()) specs.push_back({p.name, p.shape});
  const auto& params = model.params();
  WriteOptions o = options;
  o.ordered = false;
  write_checkpoint_tensors(
      dir, specs,
      [&](std::size_t i, std::size_t begin, std::size_t count, float* out) {
        const T* w = model.weights.data() + params[i].offset + begin;
        for (std::size_t k = 0; k < count; ++k) out[k] = float(w[k]);
      },
      o);
  write_checkpoint_config(dir, model.config(), o.dtype);
}

template <class T> void save_model(const Model<T>& model, const std::string& dir) { save_model(model, dir, WriteOptions{}); }

// ---------------------------------------------------------------------------------------------
// A checkpoint folder written whole

namespace {
std::atomic<uint64_t> g_stage_counter{0};
std::string sibling(const std::string& dir, const char* what) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return (p.parent_path() / ("." + p.filename().string() + "." + what + "-" + std::to_string(getpid()) + "-" +
                             std::to_string(g_stage_counter++)))
      .string();
}
}  // namespace

namespace {
// What a writer to `dir` that is gone left beside it (killed -9, OOM-killed or preempted mid-write):
// its staging folder, a checkpoint's size each, is removed; an earlier checkpoint it had moved aside
// (.NAME.old-PID-N) is put back when `dir` is missing (killed between the two renames of a replace
// where the file system cannot swap), else removed. A writer still running (its PID alive) is left be.
void remove_leftovers(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  const std::string prefix = "." + target.filename().string() + ".";
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // staging-PID-N or old-PID-N
    const bool old = rest.rfind("old-", 0) == 0;
    if (!old && rest.rfind("staging-", 0) != 0) continue;
    const std::string ids = rest.substr(old ? 4 : 8);
    const std::size_t dash = ids.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == ids.size() || dash > 9 ||
        ids.find_first_not_of("0123456789-") != std::string::npos || ids.find('-', dash + 1) != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(ids.substr(0, dash)));
    if (pid <= 0 || pid == getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code ec2;
    if (old && !fs::exists(fs::symlink_status(target, ec2)) && ::rename(it->path().c_str(), target.c_str()) == 0) {
      log::warn("put back the checkpoint '", target.string(), "' that a killed writer had moved aside to '", name, "'");
      continue;
    }
    fs::remove_all(it->path(), ec2);
  }
}
}  // namespace

void check_checkpoint_target(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Replacing the folder the process works in (or one above it) would leave it in a deleted folder.
  fs::path target = fs::absolute(dir, ec).lexically_normal(), cwd = fs::current_path(ec);
  if (!target.has_filename()) target = target.parent_path();
  const auto rel = cwd.lexically_relative(target);
  if (target == target.root_path() || (!rel.empty() && *rel.begin() != ".."))
    throw UsageError("'" + dir + "' is the current folder, or holds it: a checkpoint is written to a folder of its own");
  auto st = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(st)) return;
  if (!fs::is_directory(st))
    throw UsageError("'" + dir + "' exists and is not a folder: a checkpoint is not written over it");
  if (fs::is_empty(dir, ec) || fs::exists(fs::path(dir) / "config.json") || fs::exists(fs::path(dir) / "adapter_config.json")) return;
  throw UsageError("'" + dir + "' exists and is not a checkpoint (no config.json or adapter_config.json): it is not replaced; give a new folder");
}

CheckpointWriter::CheckpointWriter(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  remove_leftovers(dir_);
  check_checkpoint_target(dir_);
  stage_ = sibling(dir_, "staging");
  std::error_code ec;
  fs::create_directories(fs::path(stage_).parent_path(), ec);
  if (!fs::create_directory(stage_, ec) || ec)
    throw EnvironmentError("cannot create '" + stage_ + "' to write the checkpoint in: " + ec.message());
}

CheckpointWriter::~CheckpointWriter() {
  std::error_code ec;
  if (!committed_) std::filesystem::remove_all(stage_, ec);
}

void CheckpointWriter::commit() {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Every folder of the staged tree synced, then one rename puts the whole checkpoint in place.
  fsync_dir(stage_);
  for (auto it = fs::recursive_directory_iterator(stage_, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    if (it->is_directory()) fsync_dir(it->path().string());
  const std::string parent = fs::path(stage_).parent_path().string();
  std::string old;
  if (fs::exists(fs::symlink_status(dir_, ec))) {
    check_checkpoint_target(dir_);  // it may have changed while the step ran
    // One atomic swap where the file system has it: `dir` holds the earlier or the new checkpoint at
    // every moment, never neither; the staging path then holds the earlier one, removed after.
    if (::renameat2(AT_FDCWD, stage_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      fsync_dir(parent.empty() ? "." : parent);
      fs::remove_all(stage_, ec);
      return;
    }
    old = sibling(dir_, "old");
    if (::rename(dir_.c_str(), old.c_str()) != 0)
      throw EnvironmentError("cannot move the earlier checkpoint '" + dir_ + "' aside: " + std::strerror(errno));
  }
  if (::rename(stage_.c_str(), dir_.c_str()) != 0) {
    const int err = errno;
    if (!old.empty()) ::rename(old.c_str(), dir_.c_str());
    throw EnvironmentError("cannot rename '" + stage_ + "' to '" + dir_ + "': " + std::strerror(err));
  }
  committed_ = true;
  fsync_dir(parent.empty() ? "." : parent);
  if (!old.empty()) fs::remove_all(old, ec);
}

template <class To, class From> Model<To> convert_model(const Model<From>& from) {
  Model<To> to(from.config());
  for (std::size_t i = 0; i < from.weights.size(); ++i) to.weights[i] = To(from.weights[i]);
  return to;
}

template class Model<float>;
template class Model<double>;
template Model<float> load_model<float>(const std::string&, bool, const LoadFormat&);
template Model<double> load_model<double>(const std::string&, bool, const LoadFormat&);
template void save_model<float>(const Model<float>&, const std::string&);
template void save_model<double>(const Model<double>&, const std::string&);
template void save_model<float>(const Model<float>&, const std::string&, const WriteOptions&);
template void save_model<double>(const Model<double>&, const std::string&, const WriteOptions&);
template std::string first_non_finite<float>(const Model<float>&);
template std::string first_non_finite<double>(const Model<double>&);
template Model<double> convert_model<double, float>(const Model<float>&);
template Model<float> convert_model<float, double>(const Model<double>&);
template void token_logprob_entropy<float>(const float*, int, int, double, float&, float&);
template void token_logprob_entropy<double>(const double*, int, int, double, double&, double&);
template void token_head_backward<float>(const float*, int, int, double, float, float, float*);
template void token_head_backward<double>(const double*, int, int, double, double, double, double*);

}  // namespace ca::nn
