// Units of the native model (libcommon/nn): gradients by finite differences in float64, the float32 path
// against its float64 twin, the Hugging Face save/load round trip, KV-cache decoding against the full
// forward, sampling, AdamW and gradient clipping, config.json, device names, released gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "libcommon/errors.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/nn/sample.hpp"
#include "libcommon/nn_cuda/gpu.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

using namespace ca::nn;
using doctest::Approx;

namespace {
Config tiny(const std::string& type, bool tied, bool critic = false) {
  Config c;
  c.model_type = type;
  c.vocab_size = 11;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;  // grouped-query: two query heads per key/value head
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  c.attention_bias = type == "qwen2";
  c.value_head = critic;
  return c;
}

// A scalar loss of the model's output with fixed random weights: sum over positions of
// a_t * logp(target_t) + b_t * entropy_t (policy), or sum c_t * value_t (critic).
struct Probe {
  std::vector<int> tokens = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  std::vector<double> a, b;
  Probe() {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> n(0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) a.push_back(n(rng)), b.push_back(n(rng));
  }
  template <class T> double loss(const Model<T>& m, Activations<T>& acts) const {
    m.forward(tokens, acts);
    double s = 0;
    const int V = m.config().vocab_size;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      if (m.config().value_head) {
        s += a[t] * double(acts.values[t]);
        continue;
      }
      T lp, ent;
      token_logprob_entropy(acts.logits.data() + t * V, V, tokens[(t + 1) % tokens.size()], 1.0, lp, ent);
      s += a[t] * double(lp) + b[t] * double(ent);
    }
    return s;
  }
  template <class T> void backward(Model<T>& m, Activations<T>& acts) const {
    const int V = m.config().vocab_size;
    std::vector<T> dout;
    if (m.config().value_head) {
      dout.assign(a.begin(), a.end());
    } else {
      dout.assign(tokens.size() * V, T(0));
      for (std::size_t t = 0; t < tokens.size(); ++t)
        token_head_backward(acts.logits.data() + t * V, V, tokens[(t + 1) % tokens.size()], 1.0, T(a[t]), T(b[t]),
                            dout.data() + t * V);
    }
    m.backward(acts, dout);
  }
};

void check_gradients(const Config& config) {
  Model<double> m(config);
  m.init_random(42, 0.3);  // large weights so every path carries signal
  Probe probe;
  Activations<double> acts;
  probe.loss(m, acts);
  m.zero_grad();
  probe.backward(m, acts);
  std::mt19937_64 rng(1);
  int checked = 0;
  double worst = 0;
  for (auto& p : m.params()) {
    // A few entries of every tensor, including each bias and norm weight.
    for (int k = 0; k < 4; ++k) {
      std::size_t i = p.offset + rng() % p.size;
      const double h = 1e-5, w0 = m.weights[i];
      m.weights[i] = w0 + h;
      double up = probe.loss(m, acts);
      m.weights[i] = w0 - h;
      double down = probe.loss(m, acts);
      m.weights[i] = w0;
      double fd = (up - down) / (2 * h), g = m.grads[i];
      double err = std::fabs(fd - g) / std::max(1e-4, std::fabs(fd) + std::fabs(g));
      worst = std::max(worst, err);
      INFO(p.name, " fd ", fd, " analytic ", g);
      CHECK(err < 1e-6);
      ++checked;
    }
  }
  std::string what = config.model_type + (config.value_head ? " critic" : config.tie_word_embeddings ? " tied" : "");
  MESSAGE(what << ": " << checked << " gradient entries, worst relative error " << worst);
}

template <class T> double nmse(const std::vector<T>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += ref[i] * ref[i];
  }
  return num / den;
}
}  // namespace

TEST_CASE("gradients match finite differences in float64 (Qwen2: biases, GQA, untied head)") {
  check_gradients(tiny("qwen2", false));
}
TEST_CASE("gradients match finite differences in float64 (Llama: no biases, tied embeddings)") {
  check_gradients(tiny("llama", true));
}
TEST_CASE("gradients match finite differences in float64 (critic value head)") { check_gradients(tiny("qwen2", false, true)); }

TEST_CASE("the float32 path agrees with its float64 twin (forward and gradients)") {
  Model<float> f(tiny("qwen2", false));
  f.init_random(3, 0.3);
  Model<double> d = convert_model<double>(f);
  Probe probe;
  Activations<float> af;
  Activations<double> ad;
  probe.loss(f, af);
  probe.loss(d, ad);
  double e_logits = nmse(af.logits, ad.logits);
  CHECK(e_logits < 1e-10);
  f.zero_grad();
  d.zero_grad();
  probe.backward(f, af);
  probe.backward(d, ad);
  double e_grads = nmse(f.grads, d.grads);
  CHECK(e_grads < 1e-9);
  MESSAGE("float32 vs float64: logits nmse " << e_logits << ", gradients nmse " << e_grads);
}

TEST_CASE("save and load round trip in Hugging Face layout") {
  ca::PrivateTempDir dir("nn");
  for (auto [type, tied] : {std::pair{"qwen2", false}, std::pair{"llama", true}}) {
    Model<float> m(tiny(type, tied));
    m.init_random(5);
    std::string path = dir.path() + "/" + type;
    save_model(m, path);
    auto loaded = load_model<float>(path);
    CHECK(loaded.weights == m.weights);
    auto cj = ca::Json::parse(ca::read_file(path + "/config.json"));
    for (auto key : {"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
                     "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings", "max_position_embeddings"})
      CHECK_MESSAGE(cj.contains(key), key);
    CHECK(cj["architectures"][0] == (std::string(type) == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"));
    auto st = ca::read_safetensors(path + "/model.safetensors");
    CHECK(st.tensors.count("model.embed_tokens.weight"));
    CHECK(st.tensors.count("model.layers.1.self_attn.q_proj.weight"));
    CHECK(st.tensors.count("model.layers.0.self_attn.k_proj.bias") == (std::string(type) == "qwen2" ? 1u : 0u));
    CHECK(st.tensors.count("model.layers.0.mlp.gate_proj.weight"));
    CHECK(st.tensors.count("model.layers.0.post_attention_layernorm.weight"));
    CHECK(st.tensors.count("model.norm.weight"));
    CHECK(st.tensors.count("lm_head.weight") == (tied ? 0u : 1u));
    CHECK(st.tensors.at("model.layers.0.self_attn.k_proj.weight").shape == std::vector<int64_t>{8, 16});  // KV * D, C
    // A BF16 copy of the same tensors loads too (converted), within bf16 rounding.
    ca::TensorMap bf;
    for (auto& [name, t] : st.tensors) {
      ca::Tensor b = ca::Tensor::zeros("BF16", t.shape);
      for (int64_t i = 0; i < t.numel(); ++i) b.as<uint16_t>()[i] = ca::float_to_bf16(t.as<float>()[i]);
      bf.emplace(name, std::move(b));
    }
    ca::write_safetensors(path + "/model.safetensors", bf);
    auto from_bf16 = load_model<double>(path);
    for (std::size_t i = 0; i < m.weights.size(); ++i)
      REQUIRE(from_bf16.weights[i] == Approx(m.weights[i]).epsilon(1e-2).scale(1e-3));
  }
  // A policy folder loads as a critic with a zero value head; a critic saves score.weight.
  Model<float> p(tiny("qwen2", false));
  p.init_random(9);
  save_model(p, dir.path() + "/p");
  auto critic = load_model<float>(dir.path() + "/p", true);
  CHECK(critic.config().value_head);
  CHECK(critic.weights[critic.param("score.weight").offset] == 0.0f);
  save_model(critic, dir.path() + "/c");
  auto cj = ca::Json::parse(ca::read_file(dir.path() + "/c/config.json"));
  CHECK(cj["architectures"][0] == "Qwen2ForTokenClassification");
  CHECK(ca::read_safetensors(dir.path() + "/c/model.safetensors").tensors.count("score.weight"));
  CHECK_THROWS_AS(load_model<float>(dir.path() + "/c"), ca::InputError);  // a critic is not a policy
  CHECK_THROWS_AS(load_model<float>(dir.path() + "/missing"), ca::InputError);
}

TEST_CASE("KV-cache decoding gives the full forward's logits; sampled logprobs match rescoring") {
  Model<float> m(tiny("qwen2", false));
  m.init_random(11, 0.2);
  std::vector<int> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Activations<float> acts;
  m.forward(tokens, acts);
  Decoder<float> dec(m);
  const int V = m.config().vocab_size;
  double worst = 0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    auto& logits = dec.step(tokens[t]);
    for (int j = 0; j < V; ++j) worst = std::max(worst, double(std::fabs(logits[j] - acts.logits[t * V + j])));
  }
  CHECK(worst < 1e-5);

  std::mt19937_64 rng(123);
  Decoder<float> d2(m);
  d2.feed({1, 2});
  SampleOptions opt;
  opt.max_new_tokens = 12;
  auto r = generate(d2, opt, rng);
  REQUIRE(r.tokens.size() == 12);
  CHECK(r.stop_reason == "length");
  CHECK(d2.length() == 14);  // prompt + every generated token fed
  std::vector<int> all = {1, 2};
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  m.forward(all, acts);
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    float lp, ent;
    token_logprob_entropy(acts.logits.data() + (i + 1) * V, V, r.tokens[i], 1.0, lp, ent);
    CHECK(r.logprobs[i] == Approx(lp).epsilon(1e-5));
  }
  // Same seed, same tokens; a stop token ends the turn and is kept.
  std::mt19937_64 rng2(123);
  Decoder<float> d3(m);
  d3.feed({1, 2});
  opt.stop_tokens = {r.tokens[3]};
  auto r2 = generate(d3, opt, rng2);
  CHECK(r2.stop_reason == "stop");
  CHECK(std::vector<int>(r.tokens.begin(), r.tokens.begin() + r2.tokens.size()) == r2.tokens);
}

TEST_CASE("top-p keeps the nucleus; temperature 0 is greedy") {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, -2.0f};
  std::mt19937_64 rng(1);
  float lp = 0;
  for (int i = 0; i < 50; ++i) CHECK(sample_token(logits, 1.0, 0.5, rng, lp) == 1);  // p(1) = 0.84 > 0.5
  CHECK(lp == Approx(3.0 - std::log(1 + std::exp(3.0) + std::exp(1.0) + std::exp(-2.0))).epsilon(1e-5));
  CHECK(sample_token(logits, 0.0, 1.0, rng, lp) == 1);
  int counts[4] = {0, 0, 0, 0};
  // p = {0.042, 0.839, 0.114, 0.006}: the 0.99 nucleus is {1, 2, 0}.
  for (int i = 0; i < 2000; ++i) ++counts[sample_token(logits, 1.0, 0.99, rng, lp)];
  CHECK(counts[3] == 0);
  CHECK(counts[0] > 0);
  CHECK(counts[2] > 0);
}

TEST_CASE("AdamW first step and gradient clipping") {
  std::vector<double> w = {1.0, -2.0}, g = {0.5, -0.1};
  AdamW opt;
  AdamWConfig c;
  c.lr = 0.1;
  c.weight_decay = 0.01;
  opt.step(w, g, c);
  // First step: mhat = g, vhat = g^2 -> update lr * g / (|g| + eps) after decoupled decay.
  CHECK(w[0] == Approx(1.0 * (1 - 0.1 * 0.01) - 0.1 * 0.5 / (0.5 + 1e-8)));
  CHECK(w[1] == Approx(-2.0 * (1 - 0.1 * 0.01) + 0.1 * 0.1 / (0.1 + 1e-8)));
  CHECK(opt.t == 1);
  ca::PrivateTempDir dir("adam");
  opt.save(dir.path() + "/s/opt.safetensors");
  AdamW back;
  CHECK(back.load(dir.path() + "/s/opt.safetensors", 2));
  CHECK(back.t == 1);
  CHECK(back.m == opt.m);
  CHECK_FALSE(back.load(dir.path() + "/none.safetensors", 2));
  CHECK_THROWS_AS(back.load(dir.path() + "/s/opt.safetensors", 3), ca::InputError);

  std::vector<float> grads = {3.0f, 4.0f};
  CHECK(clip_grad_norm(grads, 1.0) == Approx(5.0));
  CHECK(grads[0] == Approx(0.6).epsilon(1e-5));
  CHECK(grads[1] == Approx(0.8).epsilon(1e-5));
  std::vector<float> small = {0.3f, 0.4f};
  clip_grad_norm(small, 1.0);
  CHECK(small[0] == 0.3f);
}

TEST_CASE("AdamW state in chunks: the file AdamW::save writes, byte for byte, and read back by range") {
  // Several of the writer's 8 Mi-float chunks, so the chunk seams are crossed.
  const std::size_t n = (std::size_t(8) << 20) * 2 + 12345;
  AdamW opt;
  opt.m.resize(n), opt.v.resize(n), opt.t = 7;
  for (std::size_t i = 0; i < n; ++i) opt.m[i] = float(i % 1000) * 0.5f - 3.0f, opt.v[i] = float(i % 777) * 0.25f;
  ca::PrivateTempDir dir("adam_chunks");
  // The whole-tensor writer is the reference: the chunked path must give the same bytes.
  ca::TensorMap whole;
  for (auto [name, src] : {std::pair{"exp_avg", &opt.m}, std::pair{"exp_avg_sq", &opt.v}}) {
    ca::Tensor t = ca::Tensor::zeros("F32", {int64_t(n)});
    std::copy(src->begin(), src->end(), t.as<float>());
    whole.emplace(name, std::move(t));
  }
  ca::write_safetensors(dir.path() + "/whole.safetensors", whole, {{"step", "7"}, {"optimizer", "adamw"}});
  opt.save(dir.path() + "/chunked.safetensors");
  CHECK(ca::read_file(dir.path() + "/whole.safetensors") == ca::read_file(dir.path() + "/chunked.safetensors"));

  auto f = ca::nn::AdamWStateFile::open(dir.path() + "/chunked.safetensors", n);
  REQUIRE(f);
  CHECK(f->step() == 7);
  std::vector<float> got(5000);
  const std::size_t at = (std::size_t(8) << 20) - 2500;  // across a seam
  f->read(1, at, got.size(), got.data());
  CHECK(std::equal(got.begin(), got.end(), opt.v.begin() + std::ptrdiff_t(at)));
  f->read(0, n - got.size(), got.size(), got.data());
  CHECK(std::equal(got.begin(), got.end(), opt.m.end() - std::ptrdiff_t(got.size())));
  CHECK_FALSE(ca::nn::AdamWStateFile::open(dir.path() + "/none.safetensors", n));
  CHECK_THROWS_AS(ca::nn::AdamWStateFile::open(dir.path() + "/chunked.safetensors", n + 1), ca::InputError);
  // A step that is not a number is bad input naming the file, not an internal error.
  ca::write_safetensors(dir.path() + "/badstep.safetensors", whole, {{"step", "seven"}});
  CHECK_THROWS_WITH_AS(ca::nn::AdamWStateFile::open(dir.path() + "/badstep.safetensors", n),
                       doctest::Contains("badstep.safetensors"), ca::InputError);
}

TEST_CASE("config.json from transformers 5: RoPE theta under rope_parameters") {
  ca::Json j = {{"model_type", "qwen2"}, {"vocab_size", 32}, {"hidden_size", 16}, {"intermediate_size", 32},
                {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}}};
  CHECK(ca::nn::Config::from_json(j).rope_theta == 1000000.0);
  j["rope_parameters"]["rope_type"] = "yarn";
  CHECK_THROWS_AS(ca::nn::Config::from_json(j), ca::InputError);
}

TEST_CASE("--device names: cpu, cuda, cuda:N; anything else is a usage error naming the option") {
  CHECK(ca::nn_cuda::parse_device("cpu") == -1);
  CHECK(ca::nn_cuda::parse_device("cuda") == 0);
  CHECK(ca::nn_cuda::parse_device("cuda:3") == 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1,cuda:2", "CUDA", "cuda:-1", ""})
    CHECK_THROWS_AS(ca::nn_cuda::parse_device(bad), ca::UsageError);
  try {
    ca::nn_cuda::parse_device("gpu", "--policy-device");
    FAIL("no error");
  } catch (const ca::UsageError& e) {
    CHECK(std::string(e.what()).find("--policy-device: expected cpu, cuda or cuda:N, got 'gpu'") != std::string::npos);
  }
}

TEST_CASE("released gradients come back as zeros: backward after release_gradients equals a fresh model's") {
  ca::nn::Config c;
  c.vocab_size = 9, c.hidden_size = 8, c.intermediate_size = 12, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 4, c.max_position_embeddings = 16;
  ca::nn::Model<float> fresh(c);
  fresh.init_random(3, 0.3);
  ca::nn::Model<float> released = fresh;
  released.release_gradients();
  CHECK(released.grads.empty());
  const std::vector<int> tokens = {1, 5, 2, 7};
  ca::nn::Activations<float> acts;
  fresh.forward(tokens, acts);
  std::vector<float> dlogits(acts.logits.size());
  for (std::size_t i = 0; i < dlogits.size(); ++i) dlogits[i] = float(i % 5) - 2.0f;
  fresh.backward(acts, dlogits);
  released.backward(acts, dlogits);
  REQUIRE(released.grads.size() == fresh.grads.size());
  CHECK(released.grads == fresh.grads);
  released.release_gradients();
  released.zero_grad();
  CHECK(released.grads == std::vector<float>(fresh.grads.size(), 0.0f));
}
