// Units of ppo-step's math against hand-worked numbers: GAE with masked tool tokens, returns, whitening,
// GRPO, the clipped surrogate (asymmetric clip, dual clip, ratio clamp), the value loss, KL estimators,
// the per-token head and the config.
#include <doctest/doctest.h>

#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/nn/model.hpp"
#include "tools/ppo-step/advantages.hpp"
#include "tools/ppo-step/config.hpp"
#include "tools/ppo-step/losses.hpp"

using namespace ca::ppo_step;
using doctest::Approx;

TEST_CASE("GAE passes values and advantages through masked tool tokens (gamma 1, lambda 0.95)") {
  // Tokens: model, model, tool, tool, model; reward 1 on the last model token. Tool values are junk (9)
  // and must not leak into the model tokens' advantages.
  Sequence s;
  s.mask = {1, 1, 0, 0, 1};
  s.values = {0.5, 0.4, 9, 9, 0.2};
  s.token_rewards = outcome_token_rewards(s.mask, 1.0);
  CHECK(s.token_rewards == std::vector<double>{0, 0, 0, 0, 1});
  gae(s, 1.0, 0.95);
  // t=4: delta = 1 - 0.2 = 0.8 -> A = 0.8;  t=3,2 (tool): A carried = 0.8;
  // t=1: delta = 0.2 - 0.4 = -0.2 -> A = -0.2 + 0.95 * 0.8 = 0.56;
  // t=0: delta = 0.4 - 0.5 = -0.1 -> A = -0.1 + 0.95 * 0.56 = 0.432.
  std::vector<double> want_a = {0.432, 0.56, 0.8, 0.8, 0.8};
  std::vector<double> want_r = {0.932, 0.96, 9.8, 9.8, 1.0};  // returns = A + V (before whitening)
  for (int t = 0; t < 5; ++t) {
    CHECK(s.advantages[t] == Approx(want_a[t]).epsilon(1e-12));
    CHECK(s.returns[t] == Approx(want_r[t]).epsilon(1e-12));
  }
}

TEST_CASE("GAE with gamma < 1 discounts across model tokens only") {
  Sequence s;
  s.mask = {1, 0, 1};
  s.values = {0.0, 5.0, 0.0};
  s.token_rewards = {0, 0, 1};
  gae(s, 0.5, 1.0);
  // t=2: A = 1;  t=1 tool: carried 1;  t=0: delta = 0 + 0.5 * V(next model token = 0) - 0 = 0 -> A = 0.5 * 1.
  CHECK(s.advantages[2] == Approx(1.0));
  CHECK(s.advantages[1] == Approx(1.0));
  CHECK(s.advantages[0] == Approx(0.5));
}

TEST_CASE("whitening uses the masked tokens' mean and unbiased variance") {
  std::vector<Sequence> batch(1);
  auto& s = batch[0];
  s.mask = {1, 0, 1, 1};
  s.advantages = {1.0, 100.0, 2.0, 3.0};
  whiten_advantages(batch);
  // masked: {1, 2, 3}: mean 2, unbiased var 1 -> (x - 2) / sqrt(1 + 1e-8)
  const double k = 1.0 / std::sqrt(1.0 + 1e-8);
  CHECK(s.advantages[0] == Approx(-k).epsilon(1e-12));
  CHECK(s.advantages[2] == Approx(0.0));
  CHECK(s.advantages[3] == Approx(k).epsilon(1e-12));
  CHECK(s.advantages[1] == Approx(98.0 * k).epsilon(1e-12));  // tool token shifted too, and ignored later
}

TEST_CASE("GRPO normalizes outcome scores within each group") {
  std::vector<Sequence> batch(4);
  const char* groups[] = {"a", "a", "a", "b"};
  const double rewards[] = {1.0, 0.0, 0.5, 2.0};
  for (int i = 0; i < 4; ++i) {
    batch[i].group = groups[i];
    batch[i].mask = {1, 0, 1};
    batch[i].token_rewards = outcome_token_rewards(batch[i].mask, rewards[i]);
  }
  grpo(batch);
  // group a: mean 0.5, unbiased std 0.5;  group b (alone): mean 0, std 1.
  CHECK(batch[0].advantages[0] == Approx(0.5 / (0.5 + 1e-6)).epsilon(1e-12));
  CHECK(batch[0].advantages[1] == 0.0);  // tool token: zero
  CHECK(batch[1].advantages[2] == Approx(-0.5 / (0.5 + 1e-6)).epsilon(1e-12));
  CHECK(batch[2].advantages[0] == Approx(0.0));
  CHECK(batch[3].advantages[0] == Approx(2.0 / (1.0 + 1e-6)).epsilon(1e-12));
  CHECK(batch[3].returns == batch[3].advantages);
  grpo(batch, 1e-6, false);
  CHECK(batch[0].advantages[0] == Approx(0.5));
}

TEST_CASE("clip-higher: the ratio is cut at 1.28 for A > 0 and at 0.8 for A < 0") {
  PolicyClip clip;  // 0.2 / 0.28, dual clip 3
  auto r = policy_token_loss(std::log(1.25), 0.0, +1.0, clip);  // inside 1 + 0.28: not clipped
  CHECK(r.loss == Approx(-1.25));
  CHECK(r.dloss_dlogp == Approx(-1.25));  // d(-A r)/dlogp = -A r
  CHECK_FALSE(r.clipped_high);
  r = policy_token_loss(std::log(1.5), 0.0, +1.0, clip);
  CHECK(r.loss == Approx(-1.28));
  CHECK(r.dloss_dlogp == 0.0);
  CHECK(r.clipped_high);
  r = policy_token_loss(std::log(0.75), 0.0, -1.0, clip);  // below 1 - 0.2 with A < 0: clipped
  CHECK(r.loss == Approx(0.8));
  CHECK(r.dloss_dlogp == 0.0);
  CHECK(r.clipped_low);
  r = policy_token_loss(std::log(0.75), 0.0, +1.0, clip);  // low ratio with A > 0: the pessimistic term is unclipped
  CHECK(r.loss == Approx(-0.75));
  CHECK(r.dloss_dlogp == Approx(-0.75));
  CHECK_FALSE(r.clipped_low);
  r = policy_token_loss(std::log(1.25), 0.0, -2.0, clip);  // high ratio with A < 0 (below dual bound): gradient flows
  CHECK(r.loss == Approx(2.5));
  CHECK(r.dloss_dlogp == Approx(2.5));
}

TEST_CASE("dual clip caps the loss at -A c for negative advantages") {
  PolicyClip clip;
  auto r = policy_token_loss(std::log(5.0), 0.0, -1.0, clip);  // l1 = 5 > 3
  CHECK(r.loss == Approx(3.0));
  CHECK(r.dloss_dlogp == 0.0);
  CHECK(r.dual_clipped);
  r = policy_token_loss(std::log(2.0), 0.0, -1.0, clip);  // l1 = 2 < 3: not capped
  CHECK(r.loss == Approx(2.0));
  CHECK_FALSE(r.dual_clipped);
  clip.dual_clip_c = 0;  // disabled
  r = policy_token_loss(std::log(5.0), 0.0, -1.0, clip);
  CHECK(r.loss == Approx(5.0));
  CHECK(r.dloss_dlogp == Approx(5.0));
}

TEST_CASE("the log-ratio is clamped to +-20 before exp") {
  PolicyClip clip;
  auto r = policy_token_loss(25.0, 0.0, +1.0, clip);
  CHECK(r.ratio == Approx(std::exp(20.0)));
  CHECK(r.loss == Approx(-1.28));
  r = policy_token_loss(-30.0, 0.0, +1.0, clip);
  CHECK(r.ratio == Approx(std::exp(-20.0)));
  CHECK(r.dloss_dlogp == 0.0);  // the clamp is flat
}

TEST_CASE("policy loss is a token mean over model tokens only, with clip fractions") {
  // Four model tokens and one tool token whose numbers would dominate if it were not masked.
  std::vector<double> logp = {std::log(1.5), std::log(0.5), std::log(1.1), std::log(5.0), 50.0};
  std::vector<double> old(5, 0.0);
  std::vector<double> adv = {+1.0, -1.0, +1.0, -1.0, 1000.0};
  std::vector<double> mask = {1, 1, 1, 1, 0};
  auto s = policy_loss(logp, old, adv, mask, PolicyClip{});
  // losses: -1.28 (high), 0.8 (low), -1.1, 3 (dual) -> mean 1.42 / 4
  CHECK(s.pg_loss == Approx((-1.28 + 0.8 - 1.1 + 3.0) / 4));
  CHECK(s.clipfrac_high == Approx(0.25));
  CHECK(s.clipfrac_low == Approx(0.25));
  CHECK(s.clipfrac_dual == Approx(0.25));
  CHECK(s.grad[2] == Approx(-1.1 / 4));
  CHECK(s.grad[4] == 0.0);
  CHECK(s.approx_kl == Approx(-(std::log(1.5) + std::log(0.5) + std::log(1.1) + std::log(5.0)) / 4));
}

TEST_CASE("value loss: clipped around the old value, halved, token mean") {
  auto r = value_token_loss(1.0, 0.0, 2.0, 0.5);  // clamp to 0.5: (0.5-2)^2 = 2.25 > (1-2)^2 = 1
  CHECK(r.loss == Approx(1.125));
  CHECK(r.dloss_dv == 0.0);
  CHECK(r.clipped);
  r = value_token_loss(0.8, 0.0, 0.0, 0.5);  // clamp to 0.5 gives the smaller error: unclipped branch
  CHECK(r.loss == Approx(0.32));
  CHECK(r.dloss_dv == Approx(0.8));
  CHECK_FALSE(r.clipped);
  r = value_token_loss(1.0, 0.0, 2.0, 0.0);  // no clipping
  CHECK(r.loss == Approx(0.5));
  CHECK(r.dloss_dv == Approx(-1.0));
  auto s = value_loss({1.0, 0.2, 7.0}, {0.0, 0.0, 0.0}, {2.0, 1.0, -7.0}, {1, 1, 0}, 0.5);
  CHECK(s.vf_loss == Approx((1.125 + 0.32) / 2));
  CHECK(s.vf_clipfrac == Approx(0.5));
  CHECK(s.grad[1] == Approx(-0.8 / 2));
  CHECK(s.grad[2] == 0.0);
}

TEST_CASE("KL estimators and their derivatives") {
  const double lp = -1.0, ref = -1.5;
  CHECK(kl_estimate(lp, ref, "k1") == Approx(0.5));
  CHECK(kl_estimate(lp, ref, "abs") == Approx(0.5));
  CHECK(kl_estimate(lp, ref, "k2") == Approx(0.125));
  CHECK(kl_estimate(lp, ref, "k3") == Approx(std::exp(-0.5) + 0.5 - 1.0));  // 0.10653
  for (auto kind : {"k1", "abs", "k2", "k3"}) {
    const double h = 1e-6;
    double fd = (kl_estimate(lp + h, ref, kind) - kl_estimate(lp - h, ref, kind)) / (2 * h);
    CHECK(kl_estimate_grad(lp, ref, kind) == Approx(fd).epsilon(1e-6));
  }
  CHECK(kl_estimate(0.0, 30.0, "k3") == Approx(10.0));  // clamped
  CHECK(kl_estimate_grad(0.0, 30.0, "k3") == 0.0);
  CHECK_THROWS_AS(kl_estimate(0, 0, "k9"), ca::UsageError);
}

TEST_CASE("token head: logprob, entropy and their gradient") {
  std::vector<double> z = {0.0, 0.0};
  double lp, ent;
  ca::nn::token_logprob_entropy(z.data(), 2, 1, 1.0, lp, ent);
  CHECK(lp == Approx(-std::log(2.0)));
  CHECK(ent == Approx(std::log(2.0)));
  // Finite differences of c_lp * logp + c_ent * H for random logits, at temperature 0.7.
  std::vector<double> x = {0.3, -1.2, 2.0, 0.1, -0.4};
  const double c_lp = 0.7, c_ent = -0.3, tau = 0.7;
  std::vector<double> g(5, 0.0);
  ca::nn::token_head_backward(x.data(), 5, 2, tau, c_lp, c_ent, g.data());
  for (int j = 0; j < 5; ++j) {
    auto f = [&](double d) {
      auto y = x;
      y[j] += d;
      double a, b;
      ca::nn::token_logprob_entropy(y.data(), 5, 2, tau, a, b);
      return c_lp * a + c_ent * b;
    };
    CHECK(g[j] == Approx((f(1e-6) - f(-1e-6)) / 2e-6).epsilon(1e-6));
  }
}

TEST_CASE("explained variance") {
  std::vector<double> r = {1, 2, 3, 100}, m = {1, 1, 1, 0};
  CHECK(explained_variance(r, {1, 2, 3, 0}, m) == Approx(1.0));
  CHECK(explained_variance(r, {0, 0, 0, 0}, m) == Approx(0.0));
  CHECK(explained_variance(r, {2, 2, 2, 0}, m) == Approx(0.0));
}

TEST_CASE("config: the printed defaults are the defaults; unknown keys are errors") {
  TrainConfig a, b;
  b.apply_yaml(TrainConfig::default_yaml(), "defaults");
  CHECK(a.to_json() == b.to_json());
  CHECK(a.clip.eps_low == 0.2);
  CHECK(a.clip.eps_high == 0.28);
  CHECK(a.gamma == 1.0);
  CHECK(a.lam == 0.95);
  b.apply_yaml("actor:\n  lr: 0.01\n  clip_ratio_high: 0.3\nalgorithm:\n  estimator: grpo\n", "x.yaml");
  CHECK(b.actor.adamw.lr == 0.01);
  CHECK(b.clip.eps_high == 0.3);
  CHECK(b.estimator == "grpo");
  CHECK_THROWS_AS(b.apply_yaml("actor:\n  learning_rate: 1\n", "x.yaml"), ca::UsageError);
  CHECK_THROWS_AS(b.apply_yaml("actor:\n  lr: fast\n", "x.yaml"), ca::UsageError);
}

TEST_CASE("rollout mismatch: |diff| mean and max, |p diff|, the ratio's spread and the fraction outside the clip") {
  // Diffs lp_train - lp_rollout = 0, +0.1, -0.5, +ln 2: ratios 1, e^0.1, e^-0.5, 2.
  PolicyClip clip;  // [0.8, 1.28]
  RolloutMismatch m;
  const double lr[] = {-1.0, -2.0, -0.5, -3.0}, d[] = {0.0, 0.1, -0.5, std::log(2.0)};
  double ratio[4], pdiff = 0;
  for (int i = 0; i < 4; ++i) {
    m.add(lr[i] + d[i], lr[i], clip);
    ratio[i] = std::exp(d[i]);
    pdiff += std::fabs(std::exp(lr[i] + d[i]) - std::exp(lr[i]));
  }
  CHECK(m.tokens == 4);
  CHECK(m.abs_mean() == Approx((0.1 + 0.5 + std::log(2.0)) / 4));
  CHECK(m.abs_max == Approx(std::log(2.0)));
  CHECK(m.prob_abs_sum / 4 == Approx(pdiff / 4));
  const double mean = (ratio[0] + ratio[1] + ratio[2] + ratio[3]) / 4;
  double var = 0;
  for (double r : ratio) var += (r - mean) * (r - mean) / 4;
  CHECK(m.ratio_mean == Approx(mean));
  CHECK(m.ratio_std() == Approx(std::sqrt(var)));
  CHECK(m.ratio_min == Approx(std::exp(-0.5)));
  CHECK(m.ratio_max == Approx(2.0));
  CHECK(m.outside_clip == 2);  // e^-0.5 = 0.61 < 0.8 and 2 > 1.28; e^0.1 = 1.105 inside
  // The ratio is clamped as the loss clamps it: a diff of 50 counts as e^20, not inf.
  RolloutMismatch big;
  big.add(0.0, -50.0, clip);
  CHECK(big.ratio_max == Approx(std::exp(20.0)));
  CHECK(std::isfinite(big.ratio_std()));
  // Nothing added: zeros, and the trainer reports them as null.
  CHECK(RolloutMismatch().abs_mean() == 0.0);
}

TEST_CASE("config: actor.max_logprob_mismatch defaults to 0.1, 0 reports only, a negative or infinite bound is refused") {
  TrainConfig c;
  CHECK(c.max_logprob_mismatch == 0.1);
  CHECK(c.to_json()["actor"]["max_logprob_mismatch"] == 0.1);
  c.apply_yaml("actor:\n  max_logprob_mismatch: 0\n", "x.yaml");
  CHECK(c.max_logprob_mismatch == 0.0);
  CHECK_THROWS_AS(c.apply_yaml("actor:\n  max_logprob_mismatch: -0.1\n", "x.yaml"), ca::UsageError);
  CHECK_THROWS_AS(c.apply_yaml("actor:\n  max_logprob_mismatch: .inf\n", "x.yaml"), ca::UsageError);
}
