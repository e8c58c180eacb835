// Units of LoRA on the native model (libcommon/nn/lora): the adapter's gradient against the full model's
// gradient projected on it (chain rule through W + s B A) and against finite differences in float64; a
// fresh adapter leaves the base's outputs unchanged; the adapted forward equals the merged model's; the
// base stays frozen; a critic adapter's value head; PEFT's folder (key names, config) round trip and
// the files it refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

#include <unistd.h>

#include "libcommon/errors.hpp"
#include "libcommon/nn/lora.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

using namespace ca::nn;
using ca::Json;

namespace {
Config tiny_base() {
  Config c;
  c.model_type = "qwen2";
  c.vocab_size = 11;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.attention_bias = true;
  return c;
}

LoraConfig lora_all(int r, double alpha, bool critic = false) {
  LoraConfig lc;
  lc.r = r;
  lc.alpha = alpha;
  lc.targets = LoraConfig::parse_targets("all-linear");
  lc.value_head = critic;
  return lc;
}

// Random A and B (B non-zero, unlike init(), so every path carries gradient).
template <class T> void randomize(Adapter<T>& ad, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0, 0.3);
  for (auto& w : ad.weights) w = T(n(rng));
}

const std::vector<int> kTokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};

// A scalar loss: sum_t a_t * logp(target_t) + b_t * entropy_t (policy) or sum_t a_t * value_t (critic).
struct Loss {
  std::vector<double> a, b;
  Loss() {
    std::mt19937_64 rng(11);
    std::normal_distribution<double> n(0, 1);
    for (std::size_t i = 0; i < kTokens.size(); ++i) a.push_back(n(rng)), b.push_back(n(rng));
  }
  template <class T> double value(const Model<T>& m, const Activations<T>& acts, bool critic) const {
    double s = 0;
    const int V = m.config().vocab_size;
    for (std::size_t t = 0; t < kTokens.size(); ++t) {
      if (critic) {
        s += a[t] * double(acts.values[t]);
        continue;
      }
      T lp, ent;
      token_logprob_entropy(acts.logits.data() + t * V, V, kTokens[(t + 1) % kTokens.size()], 1.0, lp, ent);
      s += a[t] * double(lp) + b[t] * double(ent);
    }
    return s;
  }
  template <class T> std::vector<T> dout(const Model<T>& m, const Activations<T>& acts, bool critic) const {
    if (critic) return std::vector<T>(a.begin(), a.end());
    const int V = m.config().vocab_size;
    std::vector<T> d(acts.logits.size(), T(0));
    for (std::size_t t = 0; t < kTokens.size(); ++t)
      token_head_backward(acts.logits.data() + t * V, V, kTokens[(t + 1) % kTokens.size()], 1.0, T(a[t]), T(b[t]),
                          d.data() + t * V);
    return d;
  }
  template <class T> double at(const Model<T>& m, const Adapter<T>* ad, bool critic) const {
    Activations<T> acts;
    m.forward(kTokens, acts, ad);
    return value(m, acts, critic);
  }
};


struct TempDir {
  std::string path;
  TempDir() {
    path = (std::filesystem::temp_directory_path() / ("ca-lora-" + std::to_string(getpid()) + "-" +
                                                       std::to_string(std::random_device{}()))).string();
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};
}  // namespace

TEST_CASE("lora: the adapter's gradient is the full gradient projected on it, and finite differences agree") {
  for (bool critic : {false, true}) {
    CAPTURE(critic);
    Model<double> base(tiny_base());
    base.init_random(3, 0.2);
    Adapter<double> ad(base.config(), lora_all(3, 6.0, critic));
    randomize(ad, 5);
    const Loss loss;
    Activations<double> acts;
    base.forward(kTokens, acts, &ad);
    base.release_gradients();
    ad.zero_grad();
    base.backward(acts, loss.dout(base, acts, critic), &ad);
    CHECK(base.grads.empty());  // the base is frozen: no gradient is even allocated

    // The full model at W + s B A (a critic: with the adapter's value head): its weight gradient G_W
    // projected on the adapter gives dL/dB = s G_W A^T and dL/dA = s B^T G_W.
    Config mc = base.config();
    mc.value_head = critic;
    Model<double> merged(mc);
    for (auto& p : merged.params())
      if (p.name.rfind("score.", 0) != 0) {
        const auto& bp = base.param(p.name);
        std::copy_n(base.weights.begin() + bp.offset, p.size, merged.weights.begin() + p.offset);
      }
    merge_adapter(merged, ad);
    Activations<double> macts;
    merged.forward(kTokens, macts);
    CHECK(loss.value(merged, macts, critic) == doctest::Approx(loss.value(base, acts, critic)).epsilon(1e-12));
    merged.zero_grad();
    merged.backward(macts, loss.dout(merged, macts, critic));
    const int r = ad.config().r;
    const double s = ad.config().scaling();
    double worst = 0, scale = 0;
    for (auto& site : ad.sites()) {
      const double* GW = merged.grads.data() + lora_base_offset(merged.layer_offsets[site.layer], site.module);
      const double* A = ad.weights.data() + site.a;
      const double* B = ad.weights.data() + site.b;
      for (int o = 0; o < site.out; ++o)
        for (int j = 0; j < r; ++j) {
          double want = 0;
          for (int i = 0; i < site.in; ++i) want += GW[std::size_t(o) * site.in + i] * A[std::size_t(j) * site.in + i];
          want *= s;
          worst = std::max(worst, std::abs(want - ad.grads[site.b + std::size_t(o) * r + j]));
          scale = std::max(scale, std::abs(want));
        }
      for (int j = 0; j < r; ++j)
        for (int i = 0; i < site.in; ++i) {
          double want = 0;
          for (int o = 0; o < site.out; ++o) want += B[std::size_t(o) * r + j] * GW[std::size_t(o) * site.in + i];
          want *= s;
          worst = std::max(worst, std::abs(want - ad.grads[site.a + std::size_t(j) * site.in + i]));
          scale = std::max(scale, std::abs(want));
        }
    }
    CHECK(scale > 1e-3);  // the projection is not trivially zero
    CHECK(worst < 1e-10 * std::max(1.0, scale));
    if (critic) {
      for (int c = 0; c < base.config().hidden_size; ++c)
        CHECK(ad.grads[ad.score_weight + c] ==
              doctest::Approx(merged.grads[merged.score_weight_offset + c]).epsilon(1e-10));
      CHECK(ad.grads[ad.score_bias] == doctest::Approx(merged.grads[merged.score_bias_offset]).epsilon(1e-10));
    }

    // Central differences on a sample of adapter coordinates (every tensor's first and a middle element).
    const double h = 1e-6;
    int checked = 0;
    for (auto& t : ad.tensors()) {
      std::size_t n = 1;
      for (auto d : t.shape) n *= std::size_t(d);
      for (std::size_t k : {std::size_t(0), n / 2}) {
        const std::size_t i = t.offset + k;
        const double keep = ad.weights[i];
        ad.weights[i] = keep + h;
        const double up = loss.at(base, &ad, critic);
        ad.weights[i] = keep - h;
        const double down = loss.at(base, &ad, critic);
        ad.weights[i] = keep;
        const double fd = (up - down) / (2 * h);
        CAPTURE(t.key);
        CHECK(ad.grads[i] == doctest::Approx(fd).epsilon(1e-5).scale(1e-6));
        ++checked;
      }
    }
    CHECK(checked == int(ad.tensors().size()) * 2);
  }
}

TEST_CASE("lora: a fresh adapter (B zero) leaves the base's logits exactly as they were; float32 follows float64") {
  Model<float> base(tiny_base());
  base.init_random(9, 0.2);
  Adapter<float> ad(base.config(), lora_all(4, 8.0));
  ad.init(1);
  for (auto& s : ad.sites()) {
    bool a_nonzero = false;
    for (int i = 0; i < 4 * s.in; ++i) a_nonzero = a_nonzero || ad.weights[s.a + i] != 0.0f;
    CHECK(a_nonzero);
    for (int i = 0; i < 4 * s.out; ++i) CHECK(ad.weights[s.b + i] == 0.0f);
  }
  Activations<float> plain, adapted;
  base.forward(kTokens, plain);
  base.forward(kTokens, adapted, &ad);
  CHECK(plain.logits == adapted.logits);

  // Non-zero B: float32 within float32 rounding of the float64 twin.
  randomize(ad, 2);
  Model<double> base64 = convert_model<double>(base);
  Adapter<double> ad64(base64.config(), ad.config());
  for (std::size_t i = 0; i < ad.weights.size(); ++i) ad64.weights[i] = ad.weights[i];
  Activations<double> a64;
  base.forward(kTokens, adapted, &ad);
  base64.forward(kTokens, a64, &ad64);
  double worst = 0, changed = 0;
  for (std::size_t i = 0; i < a64.logits.size(); ++i) {
    worst = std::max(worst, std::abs(double(adapted.logits[i]) - a64.logits[i]));
    changed = std::max(changed, std::abs(double(plain.logits[i]) - a64.logits[i]));
  }
  CHECK(changed > 1e-2);  // the adapter moved the logits
  CHECK(worst < 1e-4);
}

TEST_CASE("lora: targets, rank and alpha; only the named modules get sites") {
  LoraConfig lc;
  lc.r = 2;
  lc.alpha = 4;
  lc.targets = LoraConfig::parse_targets("v_proj,q_proj,q_proj");
  REQUIRE(lc.targets.size() == 2);
  CHECK(lc.targets[0] == LoraModule::q_proj);  // layout order, no repeats
  Adapter<float> ad(tiny_base(), lc);
  CHECK(ad.sites().size() == 4);  // 2 layers x 2 modules
  CHECK(ad.site(1, LoraModule::v_proj) != nullptr);
  CHECK(ad.site(1, LoraModule::o_proj) == nullptr);
  CHECK(ad.num_parameters() == 2 * (2 * 16 + 16 * 2) + 2 * (2 * 16 + 8 * 2));
  CHECK(lc.scaling() == 2.0);
  CHECK_THROWS_AS(LoraConfig::parse_targets("q_proj,lm_head"), ca::UsageError);
  CHECK_THROWS_AS(LoraConfig::parse_targets("embed_tokens"), ca::UsageError);
}

TEST_CASE("lora: PEFT's folder round trip, key names and config; files that are refused") {
  TempDir tmp;
  Config base = tiny_base();
  Adapter<float> ad(base, lora_all(2, 16.0));
  randomize(ad, 4);
  LoraConfig lc = ad.config();
  lc.base_model_name_or_path = "/models/base";
  Adapter<float> named(base, lc);
  named.weights = ad.weights;
  const std::string dir = tmp.path + "/policy";
  save_adapter(named, dir);
  CHECK(is_adapter_dir(dir));
  CHECK_FALSE(is_adapter_dir(tmp.path));

  Json cfg = ca::parse_json(ca::read_file(dir + "/adapter_config.json"), "adapter_config.json");
  CHECK(cfg["peft_type"] == "LORA");
  CHECK(cfg["task_type"] == "CAUSAL_LM");
  CHECK(cfg["r"] == 2);
  CHECK(cfg["lora_alpha"] == 16.0);
  CHECK(cfg["base_model_name_or_path"] == "/models/base");
  CHECK(cfg["target_modules"] == Json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  CHECK(cfg["bias"] == "none");
  auto h = ca::read_safetensors_header(dir + "/adapter_model.safetensors");
  CHECK(h.tensors.size() == 2 * 7 * 2);
  REQUIRE(h.tensors.count("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight") == 1);
  CHECK(h.tensors["base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"].shape == std::vector<int64_t>{2, 16});
  CHECK(h.tensors["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"].shape == std::vector<int64_t>{16, 2});
  CHECK(h.tensors["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"].shape == std::vector<int64_t>{8, 2});
  CHECK(h.tensors["base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight"].dtype == "F32");

  Adapter<float> back = load_adapter<float>(dir, base);
  CHECK(back.weights == named.weights);
  CHECK(back.config().base_model_name_or_path == "/models/base");

  // A critic adapter: TOKEN_CLS with the score head as modules_to_save.
  Adapter<float> critic(base, lora_all(2, 4.0, true));
  critic.init(3);
  save_adapter(critic, tmp.path + "/critic");
  Json ccfg = ca::parse_json(ca::read_file(tmp.path + "/critic/adapter_config.json"), "adapter_config.json");
  CHECK(ccfg["task_type"] == "TOKEN_CLS");
  CHECK(ccfg["modules_to_save"] == Json({"score"}));
  auto ch = ca::read_safetensors_header(tmp.path + "/critic/adapter_model.safetensors");
  CHECK(ch.tensors["base_model.model.score.weight"].shape == std::vector<int64_t>{1, 16});
  CHECK(load_adapter<float>(tmp.path + "/critic", base).weights == critic.weights);

  // Refused: each names the file and what is wrong.
  auto refused = [&](const std::string& what, const std::function<void(const std::string&)>& spoil) {
    CAPTURE(what);
    const std::string d = tmp.path + "/bad-" + std::to_string(std::random_device{}());
    save_adapter(named, d);
    spoil(d);
    try {
      load_adapter<float>(d, base);
      FAIL("loaded a spoiled adapter: " << what);
    } catch (const ca::InputError& e) {
      CHECK(std::string(e.what()).find(d) != std::string::npos);
    }
  };
  auto rewrite_config = [](const std::string& d, const std::function<void(Json&)>& f) {
    Json j = ca::parse_json(ca::read_file(d + "/adapter_config.json"), "c");
    f(j);
    ca::write_file_atomic(d + "/adapter_config.json", j.dump());
  };
  auto rewrite_tensors = [](const std::string& d, const std::function<void(ca::TensorMap&)>& f) {
    auto st = ca::read_safetensors(d + "/adapter_model.safetensors");
    f(st.tensors);
    ca::write_safetensors(d + "/adapter_model.safetensors", st.tensors);
  };
  refused("DoRA", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["use_dora"] = true; }); });
  refused("rsLoRA", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["use_rslora"] = true; }); });
  refused("rank 0", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["r"] = 0; }); });
  refused("another rank", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["r"] = 3; }); });
  refused("unknown module", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["target_modules"] = {"q_proj", "lm_head"}; }); });
  refused("per-layer ranks", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["rank_pattern"] = {{"q_proj", 8}}; }); });
  refused("not LoRA", [&](const std::string& d) { rewrite_config(d, [](Json& j) { j["peft_type"] = "IA3"; }); });
  refused("missing tensor", [&](const std::string& d) {
    rewrite_tensors(d, [](ca::TensorMap& t) { t.erase("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"); });
  });
  refused("extra tensor (an embedding adapter this model would not apply)", [&](const std::string& d) {
    rewrite_tensors(d, [](ca::TensorMap& t) { t.emplace("base_model.model.model.embed_tokens.lora_A.weight", ca::Tensor::zeros("F32", {2, 11})); });
  });
  refused("transposed tensor", [&](const std::string& d) {
    rewrite_tensors(d, [](ca::TensorMap& t) { t["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = ca::Tensor::zeros("F32", {16, 2}); });
  });
  refused("nan", [&](const std::string& d) {
    rewrite_tensors(d, [](ca::TensorMap& t) { t["base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight"].as<float>()[3] = NAN; });
  });
  // A non-finite weight is never written.
  Adapter<float> nan_ad = named;
  nan_ad.weights[5] = INFINITY;
  CHECK_THROWS_AS(save_adapter(nan_ad, tmp.path + "/inf"), ca::InputError);
  CHECK_FALSE(std::filesystem::exists(tmp.path + "/inf/adapter_model.safetensors"));
}

TEST_CASE("lora: the base an adapter names is resolved and must be a checkpoint") {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path + "/base");
  ca::write_file_atomic(tmp.path + "/base/config.json", "{}");
  std::filesystem::create_directories(tmp.path + "/ad");
  LoraConfig lc = lora_all(1, 1);
  lc.base_model_name_or_path = "../base";
  CHECK(adapter_base_dir(lc, tmp.path + "/ad") == std::filesystem::path(tmp.path + "/base").lexically_normal().string());
  lc.base_model_name_or_path = tmp.path + "/base";
  CHECK(adapter_base_dir(lc, tmp.path + "/ad") == tmp.path + "/base");
  lc.base_model_name_or_path = "Qwen/Qwen2.5-7B";  // a hub name: not here
  CHECK_THROWS_AS(adapter_base_dir(lc, tmp.path + "/ad"), ca::UsageError);
  lc.base_model_name_or_path = "";
  CHECK_THROWS_AS(adapter_base_dir(lc, tmp.path + "/ad"), ca::UsageError);
}
