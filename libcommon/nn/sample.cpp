// KV-cache decoding and sampling. The per-token math is the training forward's, one row at a time, so
// a sampled token's logprob equals the one the trainer recomputes (the test checks it).
#include "libcommon/nn/sample.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "libcommon/errors.hpp"
#include "libcommon/nn/ops.hpp"

namespace ca::nn {

template <class T> Decoder<T>::Decoder(const Model<T>& model, int max_len) : model_(model) {
  const Config& c = model.config();
  if (c.value_head) throw InputError("native model: a critic cannot generate");
  max_len_ = max_len > 0 ? std::min(max_len, c.max_position_embeddings) : c.max_position_embeddings;
  std::size_t row = std::size_t(c.num_key_value_heads) * c.head_dim;
  k_cache_.assign(c.num_hidden_layers, std::vector<T>(std::size_t(max_len_) * row));
  v_cache_.assign(c.num_hidden_layers, std::vector<T>(std::size_t(max_len_) * row));
  logits_.assign(c.vocab_size, T(0));
}

template <class T> const std::vector<T>& Decoder<T>::feed(const std::vector<int>& tokens) {
  for (int tok : tokens) step(tok);
  return logits_;
}

template <class T> const std::vector<T>& Decoder<T>::step(int token) {
  const Config& cfg = model_.config();
  const int C = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
  const int H = cfg.num_attention_heads, KV = cfg.num_key_value_heads, D = cfg.head_dim;
  const T eps = T(cfg.rms_norm_eps);
  if (len_ >= max_len_) throw InputError("native model: context of " + std::to_string(max_len_) + " tokens is full");
  if (token < 0 || token >= V) throw InputError("native model: token id " + std::to_string(token) + " outside the vocabulary");
  const T* W = model_.weights.data();
  const int pos = len_;
  std::vector<T> x(W + model_.embed_offset + std::size_t(token) * C, W + model_.embed_offset + std::size_t(token + 1) * C);
  std::vector<T> xn(C), rstd(1), q(std::size_t(H) * D), att(std::size_t(H) * D), proj(C);
  std::vector<T> gate(F), up(F), act(F), scores(pos + 1);
  const T scale = T(1) / std::sqrt(T(D));
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    const LayerOffsets& o = model_.layer_offsets[l];
    const bool bias = cfg.attention_bias;
    rmsnorm_forward(xn.data(), rstd.data(), x.data(), W + o.input_norm, 1, C, eps);
    T* kp = k_cache_[l].data() + std::size_t(pos) * KV * D;
    T* vp = v_cache_[l].data() + std::size_t(pos) * KV * D;
    matmul_forward(q.data(), xn.data(), W + o.q, bias ? W + o.q_bias : nullptr, 1, C, H * D);
    matmul_forward(kp, xn.data(), W + o.k, bias ? W + o.k_bias : nullptr, 1, C, KV * D);
    matmul_forward(vp, xn.data(), W + o.v, bias ? W + o.v_bias : nullptr, 1, C, KV * D);
    for (int h = 0; h < H; ++h) rope_forward(q.data() + std::size_t(h) * D, pos, D, cfg.rope_theta);
    for (int h = 0; h < KV; ++h) rope_forward(kp + std::size_t(h) * D, pos, D, cfg.rope_theta);
    const int group = H / KV;
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const T* qh = q.data() + std::size_t(h) * D;
      T mx = -INFINITY;
      for (int u = 0; u <= pos; ++u) {
        const T* ku = k_cache_[l].data() + (std::size_t(u) * KV + g) * D;
        T s = 0;
        for (int d = 0; d < D; ++d) s += qh[d] * ku[d];
        scores[u] = s * scale;
        mx = std::max(mx, scores[u]);
      }
      T sum = 0;
      for (int u = 0; u <= pos; ++u) {
        scores[u] = std::exp(scores[u] - mx);
        sum += scores[u];
      }
      T* oh = att.data() + std::size_t(h) * D;
      std::fill(oh, oh + D, T(0));
      for (int u = 0; u <= pos; ++u) {
        const T p = scores[u] / sum;
        const T* vu = v_cache_[l].data() + (std::size_t(u) * KV + g) * D;
        for (int d = 0; d < D; ++d) oh[d] += p * vu[d];
      }
    }
    matmul_forward(proj.data(), att.data(), W + o.o, nullptr, 1, H * D, C);
    for (int c = 0; c < C; ++c) x[c] += proj[c];
    rmsnorm_forward(xn.data(), rstd.data(), x.data(), W + o.post_norm, 1, C, eps);
    matmul_forward(gate.data(), xn.data(), W + o.gate, nullptr, 1, C, F);
    matmul_forward(up.data(), xn.data(), W + o.up, nullptr, 1, C, F);
    swiglu_forward(act.data(), gate.data(), up.data(), std::size_t(F));
    matmul_forward(proj.data(), act.data(), W + o.down, nullptr, 1, F, C);
    for (int c = 0; c < C; ++c) x[c] += proj[c];
  }
  rmsnorm_forward(xn.data(), rstd.data(), x.data(), W + model_.final_norm_offset, 1, C, eps);
  matmul_forward(logits_.data(), xn.data(), W + model_.lm_head_offset, nullptr, 1, C, V);
  ++len_;
  return logits_;
}

template <class T> int sample_token(const std::vector<T>& logits, double temperature, double top_p, std::mt19937_64& rng,
                                    float& logprob) {
  const int V = static_cast<int>(logits.size());
  const double tau = temperature > 0 ? temperature : 1.0;
  double mx = -INFINITY;
  for (auto z : logits) mx = std::max(mx, double(z) / tau);
  std::vector<double> p(V);
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += (p[j] = std::exp(double(logits[j]) / tau - mx));
  for (auto& pj : p) pj /= sum;
  int token = 0;
  if (temperature <= 0) {
    token = int(std::max_element(p.begin(), p.end()) - p.begin());
  } else {
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    // Keep the smallest prefix whose mass reaches top_p (at least one token), then draw within it.
    double kept = 0;
    int n = 0;
    while (n < V && (n == 0 || kept < top_p)) kept += p[order[n++]];
    double u = double(rng() >> 11) * 0x1.0p-53 * kept;  // 53 random bits: the same draw on every platform
    token = order[n - 1];
    for (int i = 0; i < n; ++i) {
      u -= p[order[i]];
      if (u < 0) {
        token = order[i];
        break;
      }
    }
  }
  logprob = float(std::log(p[token]));
  return token;
}

template class Decoder<float>;
template class Decoder<double>;
template int sample_token<float>(const std::vector<float>&, double, double, std::mt19937_64&, float&);
template int sample_token<double>(const std::vector<double>&, double, double, std::mt19937_64&, float&);

}  // namespace ca::nn
