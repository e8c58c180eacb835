// LoRA adapters (lora.hpp): layout, PEFT's adapter folder, merging, and the adapted linear's math that
// Model::forward and Model::backward call on every site.
#include "libcommon/nn/lora.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "libcommon/atomic_file.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/fields.hpp"
#include "libcommon/nn/ops.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::nn {

namespace {
const char* kModuleNames[kLoraModules] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";

// The keys of adapter_config.json this code reads or writes; the rest is kept in `extra`.
const char* kKnownKeys[] = {"peft_type", "r", "lora_alpha", "target_modules", "base_model_name_or_path", "task_type",
                            "modules_to_save", "bias", "use_dora", "use_rslora", "fan_in_fan_out", "lora_dropout",
                            "inference_mode", "rank_pattern", "alpha_pattern", "layers_to_transform"};

// "model.layers.L.self_attn.q_proj" in Hugging Face's names (the base weight is that + ".weight").
std::string module_path(int layer, LoraModule m) {
  const bool attn = m == LoraModule::q_proj || m == LoraModule::k_proj || m == LoraModule::v_proj || m == LoraModule::o_proj;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + lora_module_name(m);
}

// (in, out) of a module for the base config.
std::pair<int, int> module_shape(const Config& c, LoraModule m) {
  const int C = c.hidden_size, F = c.intermediate_size;
  const int QD = c.num_attention_heads * c.head_dim, KD = c.num_key_value_heads * c.head_dim;
  switch (m) {
    case LoraModule::q_proj: return {C, QD};
    case LoraModule::k_proj:
    case LoraModule::v_proj: return {C, KD};
    case LoraModule::o_proj: return {QD, C};
    case LoraModule::gate_proj:
    case LoraModule::up_proj: return {C, F};
    case LoraModule::down_proj: return {F, C};
  }
  return {0, 0};
}

}  // namespace

const char* lora_module_name(LoraModule m) { return kModuleNames[int(m)]; }

std::size_t lora_base_offset(const LayerOffsets& o, LoraModule m) {
  switch (m) {
    case LoraModule::q_proj: return o.q;
    case LoraModule::k_proj: return o.k;
    case LoraModule::v_proj: return o.v;
    case LoraModule::o_proj: return o.o;
    case LoraModule::gate_proj: return o.gate;
    case LoraModule::up_proj: return o.up;
    case LoraModule::down_proj: return o.down;
  }
  return 0;
}


bool LoraConfig::targets_module(LoraModule m) const { return std::find(targets.begin(), targets.end(), m) != targets.end(); }

std::vector<LoraModule> LoraConfig::parse_targets(const std::string& spec) {
  std::vector<LoraModule> out;
  if (spec == "all-linear") {
    for (int i = 0; i < kLoraModules; ++i) out.push_back(LoraModule(i));
    return out;
  }
  std::set<int> seen;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t comma = spec.find(',', start);
    std::string name = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int found = -1;
    for (int i = 0; i < kLoraModules; ++i)
      if (name == kModuleNames[i]) found = i;
    if (found < 0)
      throw UsageError("LoRA target module '" + name +
                       "' is not one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (or all-linear)");
    seen.insert(found);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (int i : seen) out.push_back(LoraModule(i));
  return out;
}

LoraConfig LoraConfig::from_json(const Json& j, const std::string& origin) {
  auto bad = [&](const std::string& why) { return InputError("'" + origin + "': " + why); };
  if (!j.is_object()) throw bad("not a JSON object");
  const std::string where = "'" + origin + "'";
  LoraConfig c;
  if (!j.contains("peft_type") || j["peft_type"] != "LORA") throw bad("peft_type must be \"LORA\", got " + j.value("peft_type", Json()).dump());
  if (!j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1 || j["r"].get<int64_t>() > 65536)
    throw bad("'r' must be an integer from 1 to 65536");
  c.r = j["r"].get<int>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number() || !std::isfinite(j["lora_alpha"].get<double>()))
    throw bad("'lora_alpha' must be a finite number");
  c.alpha = j["lora_alpha"].get<double>();
  if (get_setting(j, "/use_dora", false, where)) throw bad("use_dora is not computed by the native model");
  if (get_setting(j, "/use_rslora", false, where)) throw bad("use_rslora is not computed by the native model");
  if (j.contains("bias") && j["bias"] != "none") throw bad("bias must be \"none\", got " + j["bias"].dump());
  if (get_setting(j, "/fan_in_fan_out", false, where)) throw bad("fan_in_fan_out must be false");
  for (const char* key : {"rank_pattern", "alpha_pattern", "layers_to_transform"})
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_object() && j[key].empty()))
      throw bad(std::string("'") + key + "' is not supported (one rank and alpha for every site)");
  const Json& tm = j.value("target_modules", Json());
  if (tm.is_string()) {
    try {
      c.targets = parse_targets(tm.get<std::string>());
    } catch (const UsageError& e) {
      throw bad(std::string("target_modules: ") + e.what());
    }
  } else if (tm.is_array() && !tm.empty()) {
    std::string spec;
    for (auto& t : tm) {
      if (!t.is_string()) throw bad("target_modules must hold strings");
      spec += (spec.empty() ? "" : ",") + t.get<std::string>();
    }
    try {
      c.targets = parse_targets(spec);
    } catch (const UsageError& e) {
      throw bad(std::string("target_modules: ") + e.what());
    }
  } else {
    throw bad("'target_modules' must be a list of module names or \"all-linear\"");
  }
  // PEFT writes null for a setting it was not given (task_type, base_model_name_or_path): the default.
  c.base_model_name_or_path = get_setting<std::string>(j, "/base_model_name_or_path", "", where);
  const std::string task = get_setting<std::string>(j, "/task_type", "CAUSAL_LM", where);
  if (task == "TOKEN_CLS") {
    c.value_head = true;
    // PeftModelForTokenClassification adds "classifier" and "score" (its head names) to modules_to_save and
    // saves the list so: ["classifier", "score"]. A Qwen2/Llama token classifier has no "classifier".
    const Json& ms = j.value("modules_to_save", Json());
    bool has_score = false, others = false;
    if (ms.is_array())
      for (auto& m : ms) {
        has_score = has_score || m == "score";
        others = others || (m != "score" && m != "classifier");
      }
    if (!has_score || others)
      throw bad("a TOKEN_CLS adapter (a critic) must have modules_to_save [\"score\"] (\"classifier\" may be there too, as PEFT writes it)");
  } else if (task != "CAUSAL_LM") {
    throw bad("task_type must be CAUSAL_LM (a policy) or TOKEN_CLS (a critic), got \"" + task + "\"");
  } else if (j.contains("modules_to_save") && !j["modules_to_save"].is_null() &&
             !(j["modules_to_save"].is_array() && j["modules_to_save"].empty())) {
    throw bad("modules_to_save is not supported for a CAUSAL_LM adapter");
  }
  for (auto& [k, v] : j.items()) {
    bool known = false;
    for (const char* key : kKnownKeys) known = known || k == key;
    if (!known) c.extra[k] = v;
  }
  return c;
}

Json LoraConfig::to_json() const {
  Json j = extra;
  j["peft_type"] = "LORA";
  j["task_type"] = value_head ? "TOKEN_CLS" : "CAUSAL_LM";
  j["r"] = r;
  j["lora_alpha"] = alpha;
  Json t = Json::array();
  for (auto m : targets) t.push_back(lora_module_name(m));
  j["target_modules"] = t;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["modules_to_save"] = value_head ? Json::array({"score"}) : Json(nullptr);
  j["bias"] = "none";
  j["lora_dropout"] = 0.0;
  j["fan_in_fan_out"] = false;
  j["use_dora"] = false;
  j["use_rslora"] = false;
  j["inference_mode"] = true;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Layout

template <class T> Adapter<T>::Adapter(const Config& base, LoraConfig config) : base_(base), config_(std::move(config)) {
  if (config_.r < 1) throw UsageError("LoRA rank must be at least 1");
  if (config_.targets.empty() && !config_.value_head) throw UsageError("LoRA adapter with no target module");
  if (base_.value_head) throw InputError("a LoRA base must be a causal LM (config with an LM head), not a critic");
  const std::size_t r = std::size_t(config_.r);
  std::size_t n = 0;
  site_index_.assign(std::size_t(base_.num_hidden_layers) * kLoraModules, -1);
  for (int l = 0; l < base_.num_hidden_layers; ++l)
    for (LoraModule m : config_.targets) {
      auto [in, out] = module_shape(base_, m);
      // A rank above min(in, out) adds parameters and no expressiveness; PEFT allows it, so do we, but
      // the sizes must not overflow.
      LoraSite s;
      s.layer = l, s.module = m, s.in = in, s.out = out;
      s.a = n;
      n += r * std::size_t(in);
      s.b = n;
      n += std::size_t(out) * r;
      site_index_[std::size_t(l) * kLoraModules + int(m)] = int(sites_.size());
      sites_.push_back(s);
      const std::string key = "base_model.model." + module_path(l, m);
      tensors_.push_back({key + ".lora_A.weight", s.a, {int64_t(r), int64_t(in)}});
      tensors_.push_back({key + ".lora_B.weight", s.b, {int64_t(out), int64_t(r)}});
    }
  if (config_.value_head) {
    score_weight = n;
    n += std::size_t(base_.hidden_size);
    score_bias = n;
    n += 1;
    tensors_.push_back({"base_model.model.score.weight", score_weight, {1, int64_t(base_.hidden_size)}});
    tensors_.push_back({"base_model.model.score.bias", score_bias, {1}});
  }
  weights.assign(n, T(0));
  grads.assign(n, T(0));
}

template <class T> const LoraSite* Adapter<T>::site(int layer, LoraModule m) const {
  int i = site_index_[std::size_t(layer) * kLoraModules + int(m)];
  return i < 0 ? nullptr : &sites_[std::size_t(i)];
}

template <class T> void Adapter<T>::init(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::fill(weights.begin(), weights.end(), T(0));
  for (auto& s : sites_) {
    // kaiming_uniform_(a=sqrt(5)) on [r, in]: bound = sqrt(6 / ((1 + a^2) * fan_in)) = 1 / sqrt(in)
    std::uniform_real_distribution<double> u(-1.0 / std::sqrt(double(s.in)), 1.0 / std::sqrt(double(s.in)));
    for (std::size_t i = 0; i < std::size_t(config_.r) * std::size_t(s.in); ++i) weights[s.a + i] = T(u(rng));
  }
  if (config_.value_head) {
    std::normal_distribution<double> normal(0.0, 0.02);
    for (int c = 0; c < base_.hidden_size; ++c) weights[score_weight + std::size_t(c)] = T(normal(rng));
  }
  zero_grad();
}

// ---------------------------------------------------------------------------------------------
// The adapted linear

template <class T>
void lora_forward(const Adapter<T>& ad, const LoraSite& s, T* y, const T* x, int rows, std::vector<T>& u) {
  const int r = ad.config().r;
  const T* W = ad.weights.data();
  u.resize(std::size_t(rows) * r);
  matmul_forward(u.data(), x, W + s.a, nullptr, rows, s.in, r);
  const T scaling = T(ad.config().scaling());
  for (auto& v : u) v *= scaling;
  std::vector<T> delta(std::size_t(rows) * s.out);
  matmul_forward(delta.data(), u.data(), W + s.b, nullptr, rows, r, s.out);
  for (std::size_t i = 0; i < delta.size(); ++i) y[i] += delta[i];
}

template <class T>
void lora_backward(Adapter<T>& ad, const LoraSite& s, T* dx, const T* dy, const T* x, const std::vector<T>& u, int rows) {
  const int r = ad.config().r;
  const T* W = ad.weights.data();
  T* G = ad.grads.data();
  std::vector<T> du(std::size_t(rows) * r, T(0));
  matmul_backward(du.data(), G + s.b, nullptr, dy, u.data(), W + s.b, rows, r, s.out);  // dB += dy^T u
  const T scaling = T(ad.config().scaling());
  for (auto& v : du) v *= scaling;
  matmul_backward(dx, G + s.a, nullptr, du.data(), x, W + s.a, rows, s.in, r);  // dA += du^T x; dx += du A
}

// ---------------------------------------------------------------------------------------------
// PEFT's folder

bool is_adapter_dir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(dir) / kAdapterConfig, ec);
}

std::string adapter_base_dir(const LoraConfig& config, const std::string& adapter_dir) {
  namespace fs = std::filesystem;
  if (config.base_model_name_or_path.empty())
    throw UsageError("adapter '" + adapter_dir + "': adapter_config.json names no base_model_name_or_path");
  fs::path p(config.base_model_name_or_path);
  if (p.is_relative()) p = fs::path(adapter_dir) / p;
  std::error_code ec;
  if (!fs::is_regular_file(p / "config.json", ec))
    throw UsageError("adapter '" + adapter_dir + "': its base '" + config.base_model_name_or_path +
                     "' is not a checkpoint folder here (no config.json)");
  return p.lexically_normal().string();
}

template <class T> Adapter<T> load_adapter(const std::string& dir, const Config& base) {
  const std::string cpath = dir + "/" + kAdapterConfig, wpath = dir + "/" + kAdapterWeights;
  Json cj;
  try {
    cj = parse_json(read_file(cpath), "'" + cpath + "'");
  } catch (const Json::exception& e) {
    throw InputError("'" + cpath + "': " + e.what());
  }
  LoraConfig lc = LoraConfig::from_json(cj, cpath);
  Adapter<T> ad(base, lc);
  // The header first: every tensor the config implies, with its shape, and nothing else (a tensor this
  // model would not apply must not load silently, e.g. an embedding adapter or lm_head's).
  SafetensorsHeader h = read_safetensors_header(wpath);
  for (auto& t : ad.tensors()) {
    auto it = h.tensors.find(t.key);
    if (it == h.tensors.end()) throw InputError("'" + wpath + "': tensor '" + t.key + "' is missing ('" + cpath + "' implies it)");
    if (it->second.shape != t.shape)
      throw InputError("'" + wpath + "': tensor '" + t.key + "' has shape " + Json(it->second.shape).dump() + ", the base and r = " +
                       std::to_string(lc.r) + " want " + Json(t.shape).dump());
    const std::string& dt = it->second.dtype;
    if (dt != "F32" && dt != "F64" && dt != "BF16" && dt != "F16")
      throw InputError("'" + wpath + "': tensor '" + t.key + "' has dtype " + dt + " (F32, F64, BF16 or F16 expected)");
  }
  if (h.tensors.size() != ad.tensors().size())
    for (auto& [name, info] : h.tensors) {
      bool known = false;
      for (auto& t : ad.tensors()) known = known || t.key == name;
      if (!known) throw InputError("'" + wpath + "': tensor '" + name + "' is not one '" + cpath + "' implies");
    }
  SafetensorsFile f = read_safetensors(wpath);
  for (auto& t : ad.tensors()) {
    const Tensor& src = f.tensors.at(t.key);
    std::vector<double> d = to_doubles(src);
    for (std::size_t i = 0; i < d.size(); ++i) {
      if (!std::isfinite(d[i]))
        throw InputError("'" + wpath + "': tensor '" + t.key + "' element " + std::to_string(i) + " is not finite");
      ad.weights[t.offset + i] = T(d[i]);
    }
  }
  ad.zero_grad();
  return ad;
}

template <class T> void save_adapter(const Adapter<T>& ad, const std::string& dir) {
  TensorMap tensors;
  for (auto& t : ad.tensors()) {
    Tensor x = Tensor::zeros("F32", t.shape);
    float* d = x.as<float>();
    const std::size_t n = std::size_t(x.numel());
    for (std::size_t i = 0; i < n; ++i) {
      const T v = ad.weights[t.offset + i];
      if (!std::isfinite(v))
        throw InputError("adapter '" + dir + "' not written: tensor '" + t.key + "' element " + std::to_string(i) + " is " +
                         (std::isnan(v) ? "nan" : "inf"));
      d[i] = float(v);
    }
    tensors.emplace(t.key, std::move(x));
  }
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/" + kAdapterWeights, tensors, {{"format", "pt"}});
  write_file_atomic(dir + "/" + kAdapterConfig, ad.config().to_json().dump(2) + "\n");
}

template <class T> void merge_adapter(Model<T>& model, const Adapter<T>& ad) {
  const Config& c = model.config();
  const Config& b = ad.base_config();
  if (c.hidden_size != b.hidden_size || c.intermediate_size != b.intermediate_size ||
      c.num_hidden_layers != b.num_hidden_layers || c.num_attention_heads != b.num_attention_heads ||
      c.num_key_value_heads != b.num_key_value_heads || c.head_dim != b.head_dim || c.vocab_size != b.vocab_size)
    throw InputError("adapter does not fit this model's shape");
  if (ad.config().value_head != c.value_head)
    throw InternalError("merge_adapter: a critic adapter merges into a critic-shaped model (and a policy's into a policy)");
  const int r = ad.config().r;
  const T scaling = T(ad.config().scaling());
  for (auto& s : ad.sites()) {
    T* W = model.weights.data() + lora_base_offset(model.layer_offsets[s.layer], s.module);
    const T* A = ad.weights.data() + s.a;
    const T* B = ad.weights.data() + s.b;
    for (int o = 0; o < s.out; ++o)
      for (int j = 0; j < r; ++j) {
        const T bj = scaling * B[std::size_t(o) * r + j];
        if (bj == T(0)) continue;
        T* row = W + std::size_t(o) * s.in;
        const T* a = A + std::size_t(j) * s.in;
        for (int i = 0; i < s.in; ++i) row[i] += bj * a[i];
      }
  }
  if (c.value_head) {
    std::copy_n(ad.weights.begin() + ad.score_weight, c.hidden_size, model.weights.begin() + model.score_weight_offset);
    model.weights[model.score_bias_offset] = ad.weights[ad.score_bias];
  }
}

template <class T> Model<T> load_policy(const std::string& dir) {
  if (!is_adapter_dir(dir)) return load_model<T>(dir);
  const std::string cpath = dir + "/" + kAdapterConfig;
  LoraConfig lc = LoraConfig::from_json(parse_json(read_file(cpath), "'" + cpath + "'"), cpath);
  if (lc.value_head) throw InputError("'" + cpath + "' is a critic adapter (TOKEN_CLS), not a policy");
  Model<T> model = load_model<T>(adapter_base_dir(lc, dir));
  model.release_gradients();
  merge_adapter(model, load_adapter<T>(dir, model.config()));
  return model;
}

template class Adapter<float>;
template Model<float> load_policy<float>(const std::string&);
template Model<double> load_policy<double>(const std::string&);
template class Adapter<double>;
template Adapter<float> load_adapter<float>(const std::string&, const Config&);
template Adapter<double> load_adapter<double>(const std::string&, const Config&);
template void save_adapter<float>(const Adapter<float>&, const std::string&);
template void save_adapter<double>(const Adapter<double>&, const std::string&);
template void merge_adapter<float>(Model<float>&, const Adapter<float>&);
template void merge_adapter<double>(Model<double>&, const Adapter<double>&);
template void lora_forward<float>(const Adapter<float>&, const LoraSite&, float*, const float*, int, std::vector<float>&);
template void lora_forward<double>(const Adapter<double>&, const LoraSite&, double*, const double*, int, std::vector<double>&);
template void lora_backward<float>(Adapter<float>&, const LoraSite&, float*, const float*, const float*, const std::vector<float>&, int);
template void lora_backward<double>(Adapter<double>&, const LoraSite&, double*, const double*, const double*,
                                    const std::vector<double>&, int);

}  // namespace ca::nn
