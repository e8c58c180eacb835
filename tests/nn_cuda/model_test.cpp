// The native model on CUDA against Model<double> on the CPU: logits, values, per-token logprobs and the
// gradients of every parameter, in fp32 and bf16, with and without activation checkpointing; the KV
// cache decoder against the CPU decoder; a training step (clip + AdamW) against the CPU optimizer.
#include <algorithm>
#include <filesystem>

#include <unistd.h>

#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/nn/sample.hpp"
#include "libcommon/nn_cuda/model.hpp"
#include "tests/nn_cuda/common.hpp"

using namespace nn_cuda_test;
namespace nn = ca::nn;

namespace {
nn::Config tiny(bool llama, bool tied, bool critic) {
  nn::Config c;
  c.model_type = llama ? "llama" : "qwen2";
  c.attention_bias = !llama;
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = llama ? 2 : 4;
  c.num_key_value_heads = llama ? 1 : 2;
  c.head_dim = llama ? 32 : 16;
  c.max_position_embeddings = 128;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  c.value_head = critic;
  return c;
}

std::vector<int> random_tokens(int n, int V, std::mt19937_64& rng) {
  std::vector<int> t(n);
  for (auto& x : t) x = int(rng() % V);
  return t;
}

// Model<float> with random weights (and non-trivial norms and biases, so their gradients matter).
nn::Model<float> random_model(const nn::Config& c, uint64_t seed) {
  nn::Model<float> m(c);
  m.init_random(seed, 0.08);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> d(0.0, 0.1);
  for (auto& p : m.params())
    if (p.name.find("norm") != std::string::npos || p.name.find("bias") != std::string::npos)
      for (std::size_t i = 0; i < p.size; ++i) m.weights[p.offset + i] += float(d(rng));
  return m;
}

// bf16 keeps 8 bits of mantissa in every activation of a 2-layer model; fp32 differs from the
// double oracle by summation order only.
double logits_bound(DType dt) { return dt == DType::F32 ? 1e-8 : 2e-4; }
double grads_bound(DType dt) { return dt == DType::F32 ? 1e-7 : 5e-3; }
}  // namespace

TEST_CASE("forward and backward from dlogits / dvalues match Model<double>") {
  for (bool llama : {false, true})
    for (bool tied : {false, true})
      for (bool critic : {false, true})
        for (DType dt : {DType::F32, DType::BF16})
          for (bool ckpt : {false, true}) {
            if (critic && tied) continue;
            CAPTURE(llama);
            CAPTURE(tied);
            CAPTURE(critic);
            std::string dtype = dtype_name(dt);
            CAPTURE(dtype);
            CAPTURE(ckpt);
            nn::Config c = tiny(llama, tied, critic);
            auto cpu = random_model(c, 11);
            auto ref = nn::convert_model<double>(cpu);
            std::mt19937_64 rng(12);
            auto tokens = random_tokens(37, c.vocab_size, rng);
            nn::Activations<double> acts;
            ref.forward(tokens, acts);
            const std::size_t n_out = critic ? tokens.size() : tokens.size() * c.vocab_size;
            auto dout = randn(n_out, rng);
            ref.zero_grad();
            ref.backward(acts, std::vector<double>(dout.begin(), dout.end()));

            CudaModel m(gpu(), cpu, {dt, ckpt});
            m.forward(tokens);
            // A value is one bf16 number per token (measured 2.6e-4 here): looser than a row of logits.
            if (critic)
              CHECK_NMSE(m.values(), acts.values, dt == DType::F32 ? logits_bound(dt) : 1e-3);
            else
              CHECK_NMSE(m.logits(), acts.logits, logits_bound(dt));
            m.backward(dout);
            auto grads = m.grads();
            CHECK_NMSE(grads, ref.grads, grads_bound(dt));
            for (auto& p : cpu.params()) {  // each tensor on its own, so a small one is not hidden
              std::vector<float> got(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
              std::vector<double> want(ref.grads.begin() + p.offset, ref.grads.begin() + p.offset + p.size);
              INFO(p.name);
              CHECK_NMSE(got, want, 10 * grads_bound(dt));
            }
          }
}

TEST_CASE("per-token logprobs and the backward of a PPO-style loss through the head") {
  for (DType dt : {DType::F32, DType::BF16}) {
    std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    nn::Config c = tiny(false, false, false);
    auto cpu = random_model(c, 21);
    auto ref = nn::convert_model<double>(cpu);
    std::mt19937_64 rng(22);
    auto tokens = random_tokens(50, c.vocab_size, rng);
    std::vector<int> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(-1);  // the last position has no next token
    const double temp = 0.9;
    nn::Activations<double> acts;
    ref.forward(tokens, acts);
    const int T = int(tokens.size()), V = c.vocab_size;
    std::vector<double> lp(T, 0.0), ent(T, 0.0), dlogits(std::size_t(T) * V, 0.0);
    auto c_lp = randn(T, rng), c_ent = randn(T, rng, 0.1);
    c_lp[T - 1] = 0, c_ent[T - 1] = 0;
    for (int t = 0; t + 1 < T; ++t) {
      nn::token_logprob_entropy(acts.logits.data() + std::size_t(t) * V, V, targets[t], temp, lp[t], ent[t]);
      nn::token_head_backward(acts.logits.data() + std::size_t(t) * V, V, targets[t], temp, double(c_lp[t]),
                              double(c_ent[t]), dlogits.data() + std::size_t(t) * V);
    }
    ref.zero_grad();
    ref.backward(acts, dlogits);

    CudaModel m(gpu(), cpu, {dt, false});
    m.forward(tokens);
    auto got = m.token_logprobs(targets, temp);
    got.entropy[T - 1] = 0;  // the masked row's entropy is defined on the GPU, not by the oracle
    CHECK(got.logprob[T - 1] == 0.f);
    CHECK_NMSE(got.logprob, lp, logits_bound(dt) * 10);
    CHECK_NMSE(got.entropy, ent, logits_bound(dt) * 10);
    m.backward_from_logprobs(c_lp, c_ent);
    CHECK_NMSE(m.grads(), ref.grads, grads_bound(dt));
  }
}

TEST_CASE("KV-cache decoding matches the full forward and the CPU decoder") {
  nn::Config c = tiny(false, false, false);
  auto cpu = random_model(c, 31);
  std::mt19937_64 rng(32);
  auto prompt = random_tokens(10, c.vocab_size, rng);
  auto more = random_tokens(6, c.vocab_size, rng);
  for (DType dt : {DType::F32, DType::BF16}) {
    std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    CudaModel m(gpu(), cpu, {dt, false});
    CudaDecoder dec(m, 64);
    dec.feed(prompt);
    std::vector<int> all = prompt;
    for (int tok : more) {
      dec.step(tok);
      all.push_back(tok);
    }
    nn::Activations<float> acts;
    cpu.forward(all, acts);
    std::vector<float> last(acts.logits.end() - c.vocab_size, acts.logits.end());
    CHECK_NMSE(dec.logits(), last, logits_bound(dt) * 10);
    CHECK(dec.length() == int(all.size()));
  }
  // Greedy generation in fp32 picks the same tokens as the CPU decoder.
  CudaModel m(gpu(), cpu, {DType::F32, false});
  CudaDecoder dec(m, 64);
  nn::Decoder<float> cpu_dec(cpu, 64);
  dec.feed(prompt);
  cpu_dec.feed(prompt);
  nn::SampleOptions opt;
  opt.temperature = 0;
  opt.max_new_tokens = 12;
  std::mt19937_64 r1(5), r2(5);
  auto a = generate(dec, opt, r1);
  auto b = nn::generate(cpu_dec, opt, r2);
  CHECK(a.tokens == b.tokens);
  CHECK_NMSE(a.logprobs, b.logprobs, 1e-8);
}

TEST_CASE("a training step: gradient clipping and AdamW on the GPU match the CPU") {
  nn::Config c = tiny(false, false, false);
  auto cpu = random_model(c, 41);
  std::mt19937_64 rng(42);
  auto tokens = random_tokens(20, c.vocab_size, rng);
  auto dout = randn(tokens.size() * c.vocab_size, rng);
  nn::Activations<float> acts;
  cpu.forward(tokens, acts);
  cpu.zero_grad();
  cpu.backward(acts, dout);
  nn::AdamWConfig ac;
  ac.lr = 1e-3;
  double cpu_norm = nn::clip_grad_norm(cpu.grads, 0.5);
  nn::AdamW opt(cpu.weights.size());
  opt.step(cpu.weights, cpu.grads, ac);

  CudaModel m(gpu(), random_model(c, 41), {DType::F32, false});
  m.forward(tokens);
  m.backward(dout);
  double norm = m.clip_grad_norm(0.5);
  CHECK(std::abs(norm - cpu_norm) <= 1e-4 * cpu_norm);
  m.adamw_step(ac);
  nn::Model<float> after(c);
  m.download_weights(after);
  CHECK_NMSE(after.weights, cpu.weights, 1e-7);
  auto state = m.optimizer_state();
  CHECK(state.t == 1);
  CHECK_NMSE(state.m, opt.m, 1e-8);
}

TEST_CASE("the LM head in chunks gives the logprobs, entropies and gradients of the whole head") {
  for (DType dt : {DType::F32, DType::BF16}) {
    std::string dtype = dtype_name(dt);
    CAPTURE(dtype);
    nn::Config c = tiny(false, false, false);
    auto cpu = random_model(c, 61);
    std::mt19937_64 rng(62);
    auto tokens = random_tokens(53, c.vocab_size, rng);
    std::vector<int> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(-1);
    auto c_lp = randn(tokens.size(), rng), c_ent = randn(tokens.size(), rng, 0.1);
    c_lp.back() = 0, c_ent.back() = 0;
    CudaModel whole(gpu(), cpu, {dt, false});
    whole.forward(tokens);
    auto want = whole.token_logprobs(targets, 0.8);
    whole.backward_from_logprobs(c_lp, c_ent);
    CudaModelOptions o{dt, false};
    o.head_chunk_rows = 7;  // 53 rows: seven full chunks and one of four
    CudaModel chunked(gpu(), cpu, o);
    chunked.forward(tokens);
    CHECK_THROWS_AS(chunked.logits(), ca::InternalError);  // the [T, V] logits are never kept
    auto got = chunked.token_logprobs(targets, 0.8);
    got.entropy.back() = want.entropy.back() = 0;
    CHECK_NMSE(got.logprob, want.logprob, 1e-10);
    CHECK_NMSE(got.entropy, want.entropy, 1e-10);
    chunked.backward_from_logprobs(c_lp, c_ent);
    CHECK_NMSE(chunked.grads(), whole.grads(), dt == DType::F32 ? 1e-10 : 1e-6);
  }
}

TEST_CASE("AdamW with its moments in host memory steps exactly as with them on the GPU") {
  nn::Config c = tiny(false, false, false);
  auto cpu = random_model(c, 81);
  std::mt19937_64 rng(82);
  auto tokens = random_tokens(31, c.vocab_size, rng);
  auto dout = randn(tokens.size() * c.vocab_size, rng);
  nn::AdamWConfig cfg;
  cfg.lr = 1e-3;
  std::vector<nn::Model<float>> after;
  for (bool host : {false, true}) {
    CudaModelOptions o{DType::BF16, false};
    o.host_optimizer = host;
    CudaModel m(gpu(), cpu, o);
    for (int step = 0; step < 2; ++step) {
      m.zero_grad();
      m.forward(tokens);
      m.backward(dout);
      m.adamw_step(cfg);
    }
    CHECK(m.optimizer_state().t == 2);
    nn::Model<float> w = cpu;
    m.download_weights(w);
    after.push_back(std::move(w));
  }
  CHECK(after[0].weights == after[1].weights);  // the same kernel on the same numbers, chunk by chunk
  CHECK(after[0].weights != cpu.weights);
}

TEST_CASE("a trainable model streamed from its shards, written back and its moments saved in chunks, is the in-memory one") {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / ("ca-cuda-stream-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  nn::Config c = tiny(false, false, false);
  auto cpu = random_model(c, 91);
  nn::WriteOptions wo;
  wo.max_shard_bytes = 100'000;  // several shards and an index
  nn::save_model(cpu, dir + "/in", wo);
  std::mt19937_64 rng(92);
  auto tokens = random_tokens(29, c.vocab_size, rng);
  auto dout = randn(tokens.size() * c.vocab_size, rng);
  nn::AdamWConfig cfg;
  cfg.lr = 1e-3;
  for (bool host : {false, true}) {
    CAPTURE(host);
    CudaModelOptions o{DType::BF16, false};
    o.host_optimizer = host;
    CudaModel from_memory(gpu(), cpu, o);
    auto ck = nn::open_checkpoint(dir + "/in", false);
    CudaModel streamed(gpu(), ck.config, *ck.reader, o);
    for (CudaModel* m : {&from_memory, &streamed}) {
      m->zero_grad();
      m->forward(tokens);
      m->backward(dout);
      m->adamw_step(cfg);
    }
    nn::Model<float> a = cpu, b = cpu;
    from_memory.download_weights(a);
    streamed.download_weights(b);
    CHECK(a.weights == b.weights);
    // read_weights by range is download_weights' slice.
    const auto& p = a.param("model.layers.1.self_attn.k_proj.weight");
    std::vector<float> slice(p.size - 3);
    streamed.read_weights(p.offset + 3, slice.size(), slice.data());
    CHECK(std::equal(slice.begin(), slice.end(), b.weights.begin() + std::ptrdiff_t(p.offset + 3)));
    // The moments in chunks: the same file AdamW::save writes from optimizer_state(), and loaded back
    // into a fresh model the next step is the same step.
    const std::string opt = dir + "/opt" + std::to_string(host) + ".safetensors";
    streamed.save_optimizer(opt);
    nn::AdamW whole = streamed.optimizer_state();
    whole.save(opt + ".whole");
    CHECK(ca::read_file(opt) == ca::read_file(opt + ".whole"));
    nn::save_model(b, dir + "/mid" + std::to_string(host));
    auto ck2 = nn::open_checkpoint(dir + "/mid" + std::to_string(host), false);
    CudaModel resumed(gpu(), ck2.config, *ck2.reader, o);
    REQUIRE(resumed.load_optimizer(opt));
    CHECK_FALSE(resumed.load_optimizer(dir + "/none.safetensors"));
    for (CudaModel* m : {&streamed, &resumed}) {
      m->zero_grad();
      m->forward(tokens);
      m->backward(dout);
      m->adamw_step(cfg);
    }
    streamed.download_weights(a);
    resumed.download_weights(b);
    CHECK(a.weights == b.weights);
    CHECK(resumed.optimizer_state().t == 2);
  }
  // A critic opened from a causal LM: its value head starts at zero, the rest is the LM's.
  auto ck = nn::open_checkpoint(dir + "/in", true);
  CudaModel critic(gpu(), ck.config, *ck.reader, CudaModelOptions{DType::F32, false});
  const nn::Model<float> layout(ck.config, false);
  std::vector<float> w(layout.num_parameters());
  critic.read_weights(0, w.size(), w.data());
  const auto& score = layout.param("score.weight");
  CHECK(std::all_of(w.begin() + std::ptrdiff_t(score.offset), w.begin() + std::ptrdiff_t(score.offset + score.size),
                    [](float x) { return x == 0.0f; }));
  const auto& emb = layout.param("model.embed_tokens.weight");
  CHECK(std::equal(w.begin() + std::ptrdiff_t(emb.offset), w.begin() + std::ptrdiff_t(emb.offset + emb.size),
                   cpu.weights.begin() + std::ptrdiff_t(cpu.param("model.embed_tokens.weight").offset)));
  fs::remove_all(dir);
}
