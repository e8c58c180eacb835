// Units of ppo-step's backend (tools/ppo-step/backend.*): the CPU backend's scores and gradients are
// the native model's own. The model's units are in tests/unit/nn.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "libcommon/nn/model.hpp"
#include "libcommon/nn/optim.hpp"
#include "tools/ppo-step/backend.hpp"

TEST_CASE("ppo-step's CPU backend: scores and gradients are the model's own, positions without a target left out") {
  namespace fs = std::filesystem;
  ca::nn::Config c;
  c.vocab_size = 11, c.hidden_size = 16, c.intermediate_size = 24, c.num_hidden_layers = 1;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8, c.max_position_embeddings = 32;
  ca::nn::Model<float> m(c);
  m.init_random(5, 0.2);
  const fs::path dir = fs::temp_directory_path() / ("ppo_backend_" + std::to_string(::getpid()));
  ca::nn::save_model(m, dir.string());
  ca::ppo_step::Backend backend(ca::ppo_step::DeviceOptions{});
  auto tm = backend.load(dir.string());
  const std::vector<int> inputs = {1, 4, 2, 9, 3}, targets = {-1, 2, 9, -1, 7};
  auto s = tm->score(inputs, targets, 0.8);
  ca::nn::Activations<float> acts;
  m.forward(inputs, acts);
  for (std::size_t p = 0; p < inputs.size(); ++p) {
    if (targets[p] < 0) {
      CHECK(std::isnan(s.logprob[p]));
      continue;
    }
    float lp, ent;
    ca::nn::token_logprob_entropy(acts.logits.data() + p * c.vocab_size, c.vocab_size, targets[p], 0.8, lp, ent);
    CHECK(s.logprob[p] == doctest::Approx(lp).epsilon(1e-6));
    CHECK(s.entropy[p] == doctest::Approx(ent).epsilon(1e-6));
  }
  // The gradient of sum logprob over the targeted positions, against the model's own head backward.
  tm->zero_grad();
  tm->backward_scores({0, 1, 1, 5, 1}, {0, 0, 0, 5, 0});  // position 3 has no target: its 5s count for nothing
  std::vector<float> dlogits(acts.logits.size(), 0.0f);
  for (std::size_t p = 0; p < inputs.size(); ++p)
    if (targets[p] >= 0)
      ca::nn::token_head_backward(acts.logits.data() + p * c.vocab_size, c.vocab_size, targets[p], 0.8, 1.0f, 0.0f,
                                  dlogits.data() + p * c.vocab_size);
  m.zero_grad();
  m.backward(acts, dlogits);
  const double norm = tm->clip_grad_norm(0);
  CHECK(norm == doctest::Approx(ca::nn::clip_grad_norm(m.grads, 0)).epsilon(1e-6));
  CHECK(norm > 0);
  fs::remove_all(dir);
}
