// The native transformer (ca::nn::Model's layout and math) on the GPU: fp32 master weights and
// gradients, bf16 or fp32 compute weights and activations, forward and backward over one sequence,
// the per-token logprob head for PPO, AdamW, activation checkpointing as an option, and incremental
// decoding with a KV cache (CudaDecoder). The CPU Model<float> is the oracle it is tested against.
//
//   ca::nn_cuda::Gpu gpu(0);
//   ca::nn_cuda::CudaModel m(gpu, cpu_model, {ca::nn_cuda::DType::BF16});
//   m.forward(tokens);                                     // logits stay on the GPU
//   auto lp = m.token_logprobs(targets, 1.0);              // per-token logprob and entropy
//   m.backward_from_logprobs(c_logprob, c_entropy);        // dL/dlogprob, dL/dentropy per token
//   m.clip_grad_norm(1.0); m.adamw_step(adamw_config); m.download_weights(cpu_model);
#pragma once
#include <random>
#include <vector>

#include "libcommon/nn/checkpoint.hpp"
#include "libcommon/nn/model.hpp"
#include "libcommon/nn/optim.hpp"
#include "libcommon/nn/sample.hpp"
#include "libcommon/nn_cuda/ops.hpp"

namespace ca::nn_cuda {

// Activations of one layer for T rows (the input x_in is kept per layer; with checkpointing the rest
// is one shared set, recomputed in the backward).
struct LayerBuffers {
  Buffer x_in, xn1, rstd1, qkv, lse, att, x_mid, xn2, rstd2, gu, act;
};

struct CudaModelOptions {
  DType dtype = DType::BF16;
  bool checkpointing = false;  // keep only each layer's input; recompute the layer in the backward
  // A LoRA base: only the compute weights are kept (bf16: no fp32 master), no gradient or moment of the
  // base exists, and the backward computes input gradients only (for the adapters, lora.hpp).
  bool frozen = false;
  // The LM head in chunks of this many rows (0: as many as keep a chunk's logits within 2^27 elements,
  // 256 MB in bf16): a sequence longer than one chunk never holds its [T, vocab] logits. Its logprobs,
  // entropy and their gradient come from the last hidden states one chunk at a time, the chunk's logits
  // recomputed in the backward; logits() and backward(dout) of a policy then need T within one chunk.
  int head_chunk_rows = 0;
  // AdamW's moments in host memory (8 bytes per parameter off the GPU: 56 GB at 7B), streamed through
  // the device in 64 Mi-parameter chunks at each step: what makes full fine-tuning of a 7B shape fit
  // one 141 GB GPU (fp32 master 28 GB + bf16 copy 14 GB + fp32 gradients 28 GB on it).
  bool host_optimizer = false;
};

class CudaAdapter;

struct TokenLogprobs {
  std::vector<float> logprob, entropy;  // per position t: of targets[t] under the logits at t
};

class CudaModel {
 public:
  CudaModel(Gpu& gpu, const nn::Model<float>& model, CudaModelOptions options = {});
  // A model read tensor by tensor from a checkpoint folder, or drawn as init draws it (--load-format
  // dummy; both read in layout order), a frozen base or a model to train: host memory stays at one
  // 64 Mi-float chunk, never the model's fp32 copy. A tensor the reader lacks (a
  // critic's fresh value head, which check_layout let through) starts at zero. InputError naming a
  // non-finite weight.
  CudaModel(Gpu& gpu, const nn::Config& config, const nn::WeightSource& reader, CudaModelOptions options);

  const nn::Config& config() const { return config_; }
  DType dtype() const { return opt_.dtype; }
  Gpu& gpu() { return gpu_; }

  void upload_weights(const nn::Model<float>& model);
  void download_weights(nn::Model<float>& model) const;  // master weights
  // Master weights [begin, begin + count) of the parameter vector (params() order) into `out`: a
  // checkpoint written tensor by tensor from the GPU, with no host copy of the model.
  void read_weights(std::size_t begin, std::size_t count, float* out) const;
  std::vector<float> grads() const;                      // fp32, in params() order
  void zero_grad();

  // Forward over one sequence (positions 0..T-1); keeps what the backward needs. With an adapter (on a
  // frozen base) its sites add to the linear layers, and a critic adapter's score head gives values;
  // the backward that follows runs with the same adapter.
  void forward(const std::vector<int>& tokens, CudaAdapter* adapter = nullptr);
  bool frozen() const { return opt_.frozen; }
  int seq_len() const { return seq_len_; }
  std::vector<float> logits() const;  // [T, V] (policy)
  std::vector<float> values() const;  // [T] (critic)

  // log_softmax(logits / temperature)[targets[t]] and the entropy per position; target < 0 masks.
  TokenLogprobs token_logprobs(const std::vector<int>& targets, double temperature = 1.0);
  // Backward of sum_t c_logprob[t] * logprob[t] + c_entropy[t] * entropy[t] (after token_logprobs).
  void backward_from_logprobs(const std::vector<float>& c_logprob, const std::vector<float>& c_entropy);
  // Backward from dL/dlogits [T, V] (policy) or dL/dvalues [T] (critic), as Model::backward.
  void backward(const std::vector<float>& dout);

  double clip_grad_norm(double max_norm);  // returns the norm before clipping
  void adamw_step(const nn::AdamWConfig& c);
  nn::AdamW optimizer_state() const;  // moments and step, to save beside a checkpoint
  void set_optimizer_state(const nn::AdamW& state);
  // The same state as trainer_state/optimizer.safetensors, written and read in chunks (nn::write_adamw_state,
  // nn::AdamWStateFile) without a whole host copy of the moments; load returns false when there is no file.
  void save_optimizer(const std::string& path) const;
  bool load_optimizer(const std::string& path);

 private:
  friend class CudaDecoder;
  friend class CudaAdapter;
  bool critic() const;  // the head in use gives values (a critic, or a critic adapter active)
  void init_layout(const nn::Model<float>& layout);  // offsets and buffers (no weights uploaded)
  void ensure_scratch(int T);
  void alloc_layer(LayerBuffers& L, int T, bool with_input, bool with_work);
  void layer_forward(int l, int T, int pos0, LayerBuffers& L, Ptr x_in, Ptr x_out, Ptr k_cache, Ptr v_cache,
                     CudaAdapter* adapter = nullptr);
  void head_forward(Ptr xf, int T);
  void backward_body(bool head_done = false);  // from dlogits/dvalues in the head buffer (or dxn_ when head_done)
  int head_rows() const;  // rows of one LM-head chunk
  bool chunked_head() const { return !critic() && seq_len_ > head_rows(); }
  Ptr w(std::size_t offset) const;   // compute weight (dtype)
  Ptr g(std::size_t offset) const;   // fp32 gradient (0 on a frozen base: not computed)
  std::size_t act_bytes(std::size_t n) const { return n * dtype_size(opt_.dtype); }

  Gpu& gpu_;
  nn::Config config_;
  CudaModelOptions opt_;
  std::vector<nn::LayerOffsets> offsets_;
  std::size_t embed_ = 0, final_norm_ = 0, lm_head_ = 0, score_w_ = 0, score_b_ = 0, n_params_ = 0;
  int QKV_ = 0;  // q, k, v outputs of the fused projection
  Buffer master_, compute_, grads_, adam_m_, adam_v_;
  std::vector<float> host_m_, host_v_;  // host_optimizer: the moments
  long long adam_t_ = 0;
  CudaAdapter* active_ = nullptr;  // the adapter of the last forward
  RopeTable rope_;
  // activations
  int seq_len_ = 0, capacity_ = 0;
  double temperature_ = 1.0;
  std::vector<LayerBuffers> layers_;
  LayerBuffers work_;  // checkpointing: the recomputed layer
  Buffer recompute_out_;
  Buffer tokens_, resid_out_, xf_, rstdf_, head_, targets_, lp_, ent_, lse_, c_lp_, c_ent_;
  // backward scratch
  Buffer dx_, dxn_, datt_, dqkv_, dact_, dgu_, delta_;
};

// Incremental decoding on the GPU: a KV cache per layer; feed a prompt or a tool result, then sample
// with ca::nn::sample_token on the last row's logits (so it draws exactly as the CPU Decoder does).
class CudaDecoder {
 public:
  CudaDecoder(CudaModel& model, int max_len = 0);  // 0: max_position_embeddings
  const std::vector<float>& feed(const std::vector<int>& tokens);
  const std::vector<float>& step(int token) { return feed({token}); }
  const std::vector<float>& logits() const { return logits_; }
  int length() const { return len_; }
  int capacity() const { return max_len_; }
  void reset() { len_ = 0; }

 private:
  CudaModel& m_;
  int max_len_ = 0, len_ = 0;
  std::vector<Buffer> k_cache_, v_cache_;
  LayerBuffers work_;
  Buffer x_, x2_, xf_, rstdf_, logits_dev_, tokens_;
  int capacity_ = 0;
  std::vector<float> logits_;
};

// As ca::nn::generate: samples until a stop token, max_new_tokens, or a full cache.
nn::SampleResult generate(CudaDecoder& decoder, const nn::SampleOptions& options, std::mt19937_64& rng);

}  // namespace ca::nn_cuda
