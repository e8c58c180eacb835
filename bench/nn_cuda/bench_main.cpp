// nn-cuda-bench [--seq N]... [--steps N] [--dtype bf16|f32] [--checkpointing]: training tokens/s and
// peak GPU memory of one PPO step (forward, per-token logprobs, PPO loss coefficients, backward, grad
// clipping, AdamW) of the native model on CUDA, for a ~100M-parameter Qwen2-like config. A benchmark,
// not a test: it prints one JSON line per sequence length; bench_torch.py measures PyTorch the same way.
// CA_NN_CUDA_PROFILE=1 adds the GPU time by kernel on stderr; CA_NN_CUDA_ATTENTION=fma selects the
// fp32-FMA attention kernels instead of the tensor-core ones.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <string>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/nn_cuda/model.hpp"

int main(int argc, char** argv) {
  std::vector<int> seqs;
  int steps = 5;
  bool ckpt = false;
  std::string dtype = "bf16";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seq" && i + 1 < argc) seqs.push_back(std::stoi(argv[++i]));
    else if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc) dtype = argv[++i];
    else if (a == "--checkpointing") ckpt = true;
    else {
      std::cerr << "usage: nn-cuda-bench [--seq N]... [--steps N] [--dtype bf16|f32] [--checkpointing]\n";
      return 1;
    }
  }
  if (seqs.empty()) seqs = {2048, 8192};
  try {
    ca::nn::Config c;  // Qwen2-like, tied embeddings: 98M parameters
    c.vocab_size = 32000;
    c.hidden_size = 768;
    c.intermediate_size = 2048;
    c.num_hidden_layers = 12;
    c.num_attention_heads = 12;
    c.num_key_value_heads = 4;
    c.head_dim = 64;
    c.max_position_embeddings = *std::max_element(seqs.begin(), seqs.end());
    c.rope_theta = 1e6;
    c.tie_word_embeddings = true;
    ca::nn::Model<float> cpu(c);
    cpu.init_random(1, 0.02);
    ca::nn_cuda::Gpu gpu(0);
    for (int T : seqs) {
      ca::nn_cuda::CudaModel m(gpu, cpu, {ca::nn_cuda::parse_dtype(dtype), ckpt});
      std::mt19937_64 rng(2);
      std::vector<int> tokens(T);
      for (auto& t : tokens) t = int(rng() % c.vocab_size);
      std::vector<int> targets(tokens.begin() + 1, tokens.end());
      targets.push_back(-1);
      std::normal_distribution<double> nd;
      std::vector<float> adv(T), old(T);
      for (auto& a : adv) a = float(nd(rng));
      ca::nn::AdamWConfig ac;
      ac.lr = 1e-6;
      auto step = [&] {
        m.forward(tokens);
        auto lp = m.token_logprobs(targets, 1.0);
        std::vector<float> c_lp(T, 0.f), c_ent(T, 0.f);
        for (int t = 0; t + 1 < T; ++t) {  // PPO clip-higher, old = current - 0.1: ratios e^0.1
          double r = std::exp(0.1), rc = std::clamp(r, 0.8, 1.28);
          double a = -adv[t] * r, b = -adv[t] * rc;
          c_lp[t] = float((a >= b ? -adv[t] * r : 0.0) / (T - 1));
        }
        m.backward_from_logprobs(c_lp, c_ent);
        m.clip_grad_norm(1.0);
        m.adamw_step(ac);  // synchronizes
        m.zero_grad();
      };
      step();  // warm-up: cuBLASLt heuristics, allocations
      gpu.reset_peak();
      gpu.profile_reset();
      std::vector<double> ms;
      for (int s = 0; s < steps; ++s) {
        auto t0 = std::chrono::steady_clock::now();
        step();
        gpu.sync();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      double med = ms[ms.size() / 2];
      ca::Json out = {{"impl", "native-cuda"},  {"dtype", dtype},         {"checkpointing", ckpt},
                      {"params", cpu.num_parameters()}, {"seq_len", T},   {"steps", steps},
                      {"step_ms_median", med},  {"step_ms_min", ms.front()}, {"step_ms_max", ms.back()},
                      {"tokens_per_s", T / (med / 1000.0)},
                      {"peak_mem_gib", double(gpu.peak_bytes()) / (1 << 30)},
                      {"gpu", gpu.info().name}};
      std::cout << out.dump() << std::endl;
      gpu.profile_report("T=" + std::to_string(T) + ", " + std::to_string(steps) + " steps");
    }
  } catch (const ca::Error& e) {
    std::cerr << "nn-cuda-bench: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "nn-cuda-bench: " << e.what() << "\n";
    return 4;
  }
  return 0;
}
