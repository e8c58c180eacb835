// nn-cuda-parity CKPT INPUTS_JSON DTYPE OUT.safetensors: the native model on CUDA over one sequence of a
// Hugging Face checkpoint; writes the logits, the per-token logprobs and entropies, and the gradient of
// every parameter under the PPO loss hf_parity.py computes in PyTorch:
//   L = mean_{mask} max(-A r, -A clip(r, 1 - 0.2, 1 + 0.28)) - ent_coef * mean_{mask} entropy,
//   r = exp(logp - old_logp), logp of tokens[t+1] at position t.
#include <cmath>
#include <iostream>

#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn_cuda/model.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"

namespace {
ca::Tensor f32_tensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  ca::Tensor t = ca::Tensor::zeros("F32", std::move(shape));
  std::copy(v.begin(), v.end(), t.as<float>());
  return t;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: nn-cuda-parity CKPT INPUTS_JSON f32|bf16 OUT.safetensors\n";
    return 1;
  }
  try {
    auto model = ca::nn::load_model<float>(argv[1]);
    ca::Json in = ca::Json::parse(ca::read_file(argv[2]));
    std::vector<int> tokens = in.at("tokens").get<std::vector<int>>();
    std::vector<float> old_lp = in.at("old_logprob").get<std::vector<float>>();
    std::vector<float> adv = in.at("advantages").get<std::vector<float>>();
    std::vector<float> mask = in.at("mask").get<std::vector<float>>();
    const double temperature = in.value("temperature", 1.0), ent_coef = in.value("entropy_coef", 0.0);
    const double eps_low = 0.2, eps_high = 0.28;
    const int T = int(tokens.size()), V = model.config().vocab_size;
    auto dtype = ca::nn_cuda::parse_dtype(argv[3]);
    ca::nn_cuda::Gpu gpu(0);
    ca::nn_cuda::CudaModel m(gpu, model, {dtype, in.value("checkpointing", false)});
    m.forward(tokens);
    std::vector<int> targets(tokens.begin() + 1, tokens.end());
    targets.push_back(-1);
    auto lp = m.token_logprobs(targets, temperature);
    double n_mask = 0;
    for (float x : mask) n_mask += x;
    std::vector<float> c_lp(T, 0.f), c_ent(T, 0.f);
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      if (mask[t] == 0) continue;
      double r = std::exp(std::clamp(double(lp.logprob[t]) - old_lp[t], -20.0, 20.0));
      double rc = std::clamp(r, 1 - eps_low, 1 + eps_high);
      double a = -adv[t] * r, b = -adv[t] * rc;
      loss += std::max(a, b) / n_mask - ent_coef * lp.entropy[t] / n_mask;
      // d max(a, b)/d logp: the unclipped term's -A r when it is the max (torch splits ties in half,
      // and on a tie both halves reach r only when the clip is inactive, giving -A r as well).
      bool unclipped = a > b || (a == b && r == rc);
      c_lp[t] = float(unclipped ? -adv[t] * r / n_mask : 0.0);
      c_ent[t] = float(-ent_coef / n_mask);
    }
    m.backward_from_logprobs(c_lp, c_ent);
    ca::TensorMap out;
    // logits were overwritten by dlogits in the backward: run the forward again to report them
    m.forward(tokens);
    out.emplace("logits", f32_tensor(m.logits(), {T, V}));
    out.emplace("logprob", f32_tensor(lp.logprob, {T}));
    out.emplace("entropy", f32_tensor(lp.entropy, {T}));
    auto grads = m.grads();
    for (auto& p : model.params()) {
      std::vector<float> g(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
      out.emplace("grad." + p.name, f32_tensor(g, p.shape));
    }
    ca::write_safetensors(argv[4], out, {{"loss", std::to_string(loss)}});
    std::cerr << "nn-cuda-parity: " << argv[3] << " T=" << T << " loss=" << loss << "\n";
  } catch (const ca::Error& e) {
    std::cerr << "nn-cuda-parity: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "nn-cuda-parity: " << e.what() << "\n";
    return 4;
  }
  return 0;
}
