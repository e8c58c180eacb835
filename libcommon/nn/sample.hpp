// Sampling from the native model with a KV cache: feed a prompt (or a tool result mid-episode), then
// generate with temperature, top-p and a seed, getting each token's logprob back for PPO.
#pragma once
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "libcommon/errors.hpp"
#include "libcommon/nn/model.hpp"

namespace ca::nn {

struct SampleOptions {
  double temperature = 1.0;  // <= 0: greedy
  double top_p = 1.0;
  int max_new_tokens = 64;
  std::vector<int> stop_tokens;  // generation ends after emitting one of these (it is kept)
};

struct SampleResult {
  std::vector<int> tokens;
  // log softmax(logits / temperature) at each sampled token, before top-p truncation (the policy's
  // own logprob, which PPO needs as old_logprob; at temperature 1 it is the model's logprob).
  std::vector<float> logprobs;
  std::string stop_reason;  // "stop" (a stop token), "length" (max_new_tokens or the context is full)
};

// Incremental decoding: keys and values of every position fed so far are cached per layer, so each new
// token costs one row of work. Works for a policy model only.
template <class T> class Decoder {
 public:
  Decoder(const Model<T>& model, int max_len = 0);  // max_len 0: max_position_embeddings
  // Feeds tokens at the next positions (prompt, tool output); returns the logits after the last one.
  const std::vector<T>& feed(const std::vector<int>& tokens);
  const std::vector<T>& step(int token);  // one token
  const std::vector<T>& logits() const { return logits_; }
  int length() const { return len_; }
  int capacity() const { return max_len_; }
  void reset() { len_ = 0; }

 private:
  const Model<T>& model_;
  int max_len_ = 0, len_ = 0;
  std::vector<std::vector<T>> k_cache_, v_cache_;  // per layer [max_len, KV*D]
  std::vector<T> logits_;
};

// Draws one token from logits with temperature and top-p; returns the token and sets its logprob.
template <class T> int sample_token(const std::vector<T>& logits, double temperature, double top_p, std::mt19937_64& rng,
                                    float& logprob);

// The sampling loop for any incremental decoder (CPU Decoder<T>, nn_cuda::CudaDecoder): it needs
// length(), capacity(), logits() and step(token). Every emitted token is fed back, so the decoder's
// state covers the whole turn and the caller can append a tool result and continue.
template <class AnyDecoder>
SampleResult generate_from(AnyDecoder& decoder, const SampleOptions& options, std::mt19937_64& rng) {
  if (decoder.length() == 0) throw InputError("native model: generate needs a prompt of at least one token");
  SampleResult r;
  r.stop_reason = "length";
  for (int i = 0; i < options.max_new_tokens && decoder.length() < decoder.capacity(); ++i) {
    float lp = 0;
    int tok = sample_token(decoder.logits(), options.temperature, options.top_p, rng, lp);
    r.tokens.push_back(tok);
    r.logprobs.push_back(lp);
    decoder.step(tok);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), tok) != options.stop_tokens.end()) {
      r.stop_reason = "stop";
      break;
    }
  }
  return r;
}

// Continues from the decoder's state: needs at least one token fed. Generated tokens are fed as they go.
template <class T> SampleResult generate(Decoder<T>& decoder, const SampleOptions& options, std::mt19937_64& rng) {
  return generate_from(decoder, options, rng);
}

}  // namespace ca::nn
