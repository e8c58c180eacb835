// The native transformer on the GPU: the CPU Model's forward and backward (libcommon/nn/model.cpp),
// op for op, with the q/k/v and gate/up projections fused into one GEMM each (their weights are
// adjacent in the flat parameter vector) and the residual adds folded into the GEMMs (beta = 1).
#include "libcommon/nn_cuda/model.hpp"

#include <algorithm>
#include <cmath>

#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/lora.hpp"

namespace ca::nn_cuda {

namespace {
Ptr at(const Buffer& b, std::size_t elems, std::size_t elem_size) { return b.ptr() + elems * elem_size; }
Ptr at(Ptr p, std::size_t elems, std::size_t elem_size) { return p + elems * elem_size; }
}  // namespace

CudaModel::CudaModel(Gpu& gpu, const nn::Model<float>& model, CudaModelOptions options)
    : gpu_(gpu), config_(model.config()), opt_(options) {
  init_layout(model);
  upload_weights(model);
  zero_grad();
}

CudaModel::CudaModel(Gpu& gpu, const nn::Config& config, const nn::WeightSource& reader, CudaModelOptions options)
    : gpu_(gpu), config_(config), opt_(options) {
  const nn::Model<float> layout(config, /*allocate=*/false);
  init_layout(layout);
  const std::size_t chunk = std::size_t(64) << 20;
  std::vector<float> host(std::min(chunk, n_params_));
  Buffer stage(gpu_, host.size() * 4);
  for (auto& p : layout.params())
    for (std::size_t i = 0; i < p.size; i += chunk) {
      const std::size_t n = std::min(chunk, p.size - i);
      gpu_.sync();  // the host and staging buffers' last copies are done before they are written again
      if (reader.has(p.name)) {
        reader.read(p.name, i, n, host.data());
      } else {  // check_layout let it be missing: a critic's fresh value head, zero
        std::fill_n(host.begin(), n, 0.0f);
      }
      for (std::size_t k = 0; k < n; ++k)
        if (!std::isfinite(host[k]))
          throw InputError("checkpoint '" + reader.dir() + "': tensor '" + p.name + "' element " + std::to_string(i + k) +
                           " is not finite: a model with non-finite weights cannot be trained or sampled");
      const Ptr dst = master_.ptr() ? master_.ptr() + (p.offset + i) * 4 : 0;
      gpu_.upload(dst ? dst : stage.ptr(), host.data(), n * 4);
      if (compute_.ptr()) convert(gpu_, DType::BF16, compute_.ptr() + (p.offset + i) * 2, DType::F32, dst ? dst : stage.ptr(), n);
    }
  gpu_.sync();
  zero_grad();
}

void CudaModel::init_layout(const nn::Model<float>& model) {
  offsets_ = model.layer_offsets;
  const auto& c = config_;
  const std::size_t C = c.hidden_size, F = c.intermediate_size;
  const std::size_t QD = std::size_t(c.num_attention_heads) * c.head_dim, KD = std::size_t(c.num_key_value_heads) * c.head_dim;
  if (!attention_supports(c.head_dim))
    throw InputError("native model on CUDA: head_dim " + std::to_string(c.head_dim) + " is not one of 16, 32, 64, 128");
  // The fused projections need q, k, v (and their biases) and gate, up adjacent, as Model lays them out.
  for (auto& o : offsets_) {
    bool ok = o.k == o.q + QD * C && o.v == o.k + KD * C && o.up == o.gate + F * C;
    if (c.attention_bias) ok = ok && o.k_bias == o.q_bias + QD && o.v_bias == o.k_bias + KD;
    if (!ok) throw InternalError("native model on CUDA: q/k/v or gate/up weights are not adjacent in the parameter vector");
  }
  QKV_ = int(QD + 2 * KD);
  embed_ = model.embed_offset;
  final_norm_ = model.final_norm_offset;
  lm_head_ = model.lm_head_offset;
  score_w_ = model.score_weight_offset;
  score_b_ = model.score_bias_offset;
  n_params_ = model.num_parameters();
  const bool master = !opt_.frozen || opt_.dtype == DType::F32;  // a frozen bf16 base keeps its bf16 copy only
  if (master) master_ = Buffer(gpu_, n_params_ * 4);
  if (opt_.dtype == DType::BF16) compute_ = Buffer(gpu_, n_params_ * 2);
  if (!opt_.frozen) grads_ = Buffer(gpu_, n_params_ * 4);
  rope_ = RopeTable(gpu_, c.max_position_embeddings, c.head_dim, c.rope_theta);
}

void CudaModel::upload_weights(const nn::Model<float>& model) {
  if (model.weights.size() != n_params_) throw InternalError("native model on CUDA: weights of another shape");
  if (master_.ptr()) {
    gpu_.upload(master_.ptr(), model.weights.data(), n_params_ * 4);
    if (opt_.dtype == DType::BF16) convert(gpu_, DType::BF16, compute_.ptr(), DType::F32, master_.ptr(), n_params_);
  } else {  // a frozen bf16 base: through an fp32 staging buffer of 64 Mi floats, never the whole fp32 copy
    const std::size_t chunk = std::size_t(64) << 20;
    Buffer stage(gpu_, std::min(chunk, n_params_) * 4);
    for (std::size_t i = 0; i < n_params_; i += chunk) {
      const std::size_t n = std::min(chunk, n_params_ - i);
      gpu_.upload(stage.ptr(), model.weights.data() + i, n * 4);
      convert(gpu_, DType::BF16, compute_.ptr() + i * 2, DType::F32, stage.ptr(), n);
      gpu_.sync();  // the staging buffer is reused by the next chunk
    }
  }
  gpu_.sync();
}

void CudaModel::download_weights(nn::Model<float>& model) const {
  model.weights.resize(n_params_);
  read_weights(0, n_params_, model.weights.data());
}

void CudaModel::read_weights(std::size_t begin, std::size_t count, float* out) const {
  if (!master_.ptr()) throw InternalError("native model on CUDA: a frozen bf16 base has no fp32 master weights");
  if (begin > n_params_ || count > n_params_ - begin) throw InternalError("native model on CUDA: weights out of range");
  gpu_.download(out, master_.ptr() + begin * 4, count * 4);
}

std::vector<float> CudaModel::grads() const {
  if (opt_.frozen) throw InternalError("native model on CUDA: a frozen base has no gradients");
  return to_host(gpu_, grads_.ptr(), n_params_, DType::F32);
}

void CudaModel::zero_grad() {
  if (!opt_.frozen) gpu_.memset0(grads_.ptr(), n_params_ * 4);
}

bool CudaModel::critic() const { return config_.value_head || (active_ && active_->critic()); }

int CudaModel::head_rows() const {
  if (opt_.head_chunk_rows > 0) return opt_.head_chunk_rows;
  return int(std::max<std::size_t>(1, (std::size_t(1) << 27) / std::size_t(config_.vocab_size)));
}

Ptr CudaModel::w(std::size_t offset) const {
  return opt_.dtype == DType::BF16 ? at(compute_, offset, 2) : at(master_, offset, 4);
}
Ptr CudaModel::g(std::size_t offset) const { return opt_.frozen ? 0 : at(grads_, offset, 4); }

void CudaModel::alloc_layer(LayerBuffers& L, int T, bool with_input, bool with_work) {
  const auto& c = config_;
  const std::size_t C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads;
  const std::size_t QD = H * c.head_dim;
  auto act = [&](Buffer& b, std::size_t n) { b.ensure(gpu_, act_bytes(n)); };
  auto f32 = [&](Buffer& b, std::size_t n) { b.ensure(gpu_, n * 4); };
  if (with_input) act(L.x_in, T * C);
  if (!with_work) return;
  act(L.xn1, T * C);
  f32(L.rstd1, T);
  act(L.qkv, T * std::size_t(QKV_));
  f32(L.lse, H * T);
  act(L.att, T * QD);
  act(L.x_mid, T * C);
  act(L.xn2, T * C);
  f32(L.rstd2, T);
  act(L.gu, T * 2 * F);
  act(L.act, T * F);
}

void CudaModel::ensure_scratch(int T) {
  if (T <= capacity_) return;
  const auto& c = config_;
  const std::size_t C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads;
  const std::size_t QD = H * c.head_dim;
  const std::size_t head_cols = c.value_head ? 1 : c.vocab_size;
  layers_.resize(c.num_hidden_layers);
  for (auto& L : layers_) alloc_layer(L, T, true, !opt_.checkpointing);
  if (opt_.checkpointing) {
    alloc_layer(work_, T, false, true);
    recompute_out_.ensure(gpu_, act_bytes(T * C));
  }
  tokens_.ensure(gpu_, T * 4);
  targets_.ensure(gpu_, T * 4);
  resid_out_.ensure(gpu_, act_bytes(T * C));
  xf_.ensure(gpu_, act_bytes(T * C));
  rstdf_.ensure(gpu_, T * 4);
  head_.ensure(gpu_, act_bytes(std::size_t(std::min(T, c.value_head ? T : head_rows())) * head_cols));
  for (Buffer* b : {&lp_, &ent_, &lse_, &c_lp_, &c_ent_}) b->ensure(gpu_, T * 4);
  dx_.ensure(gpu_, act_bytes(T * C));
  dxn_.ensure(gpu_, act_bytes(T * C));
  datt_.ensure(gpu_, act_bytes(T * QD));
  dqkv_.ensure(gpu_, act_bytes(T * std::size_t(QKV_)));
  dact_.ensure(gpu_, act_bytes(T * F));
  dgu_.ensure(gpu_, act_bytes(T * 2 * F));
  delta_.ensure(gpu_, H * T * 4);
  capacity_ = T;
}

// One decoder layer over T rows at positions pos0..: x_out = layer(x_in). With a KV cache (decoding),
// this step's keys and values are appended to it and attention reads the whole cached prefix.
void CudaModel::layer_forward(int l, int T, int pos0, LayerBuffers& L, Ptr x_in, Ptr x_out, Ptr k_cache, Ptr v_cache,
                              CudaAdapter* ad) {
  const auto& c = config_;
  const auto& o = offsets_[l];
  const DType dt = opt_.dtype;
  const std::size_t es = dtype_size(dt);
  const int C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads, KV = c.num_key_value_heads,
            D = c.head_dim;
  const int QD = H * D, KD = KV * D;
  const float eps = float(c.rms_norm_eps);
  // y (row stride ld) += the adapter's share on (l, m), when it has that site
  auto lora = [&](nn::LoraModule m, Ptr y, int ld, Ptr in) {
    if (!ad) return;
    if (const nn::LoraSite* s = ad->site(l, m)) ad->forward(*s, y, ld, in, T);
  };
  rmsnorm_forward(gpu_, dt, L.xn1.ptr(), L.rstd1.ptr(), x_in, w(o.input_norm), T, C, eps);
  matmul_forward(gpu_, dt, L.qkv.ptr(), L.xn1.ptr(), w(o.q), c.attention_bias ? w(o.q_bias) : 0, T, C, QKV_);
  lora(nn::LoraModule::q_proj, L.qkv.ptr(), QKV_, L.xn1.ptr());
  lora(nn::LoraModule::k_proj, at(L.qkv, QD, es), QKV_, L.xn1.ptr());
  lora(nn::LoraModule::v_proj, at(L.qkv, QD + KD, es), QKV_, L.xn1.ptr());
  rope(gpu_, dt, L.qkv.ptr(), QKV_, T, H, D, rope_, pos0, false);
  rope(gpu_, dt, at(L.qkv, QD, es), QKV_, T, KV, D, rope_, pos0, false);
  Ptr kp = at(L.qkv, QD, es), vp = at(L.qkv, QD + KD, es);
  int ldkv = QKV_, Tk = T;
  if (k_cache) {
    copy_rows(gpu_, dt, at(k_cache, std::size_t(pos0) * KD, es), KD, kp, QKV_, T, KD);
    copy_rows(gpu_, dt, at(v_cache, std::size_t(pos0) * KD, es), KD, vp, QKV_, T, KD);
    kp = k_cache, vp = v_cache, ldkv = KD, Tk = pos0 + T;
  }
  attention_forward(gpu_, dt, L.att.ptr(), QD, L.lse.ptr(), L.qkv.ptr(), QKV_, kp, vp, ldkv, T, Tk, pos0, H, KV, D);
  matmul_forward(gpu_, dt, L.x_mid.ptr(), L.att.ptr(), w(o.o), 0, T, QD, C, x_in);
  lora(nn::LoraModule::o_proj, L.x_mid.ptr(), C, L.att.ptr());
  rmsnorm_forward(gpu_, dt, L.xn2.ptr(), L.rstd2.ptr(), L.x_mid.ptr(), w(o.post_norm), T, C, eps);
  matmul_forward(gpu_, dt, L.gu.ptr(), L.xn2.ptr(), w(o.gate), 0, T, C, 2 * F);
  lora(nn::LoraModule::gate_proj, L.gu.ptr(), 2 * F, L.xn2.ptr());
  lora(nn::LoraModule::up_proj, at(L.gu, F, es), 2 * F, L.xn2.ptr());
  swiglu_forward(gpu_, dt, L.act.ptr(), L.gu.ptr(), at(L.gu, F, es), 2 * F, T, F);
  matmul_forward(gpu_, dt, x_out, L.act.ptr(), w(o.down), 0, T, F, C, L.x_mid.ptr());
  lora(nn::LoraModule::down_proj, x_out, C, L.act.ptr());
}

void CudaModel::head_forward(Ptr x, int T) {
  const auto& c = config_;
  const DType dt = opt_.dtype;
  rmsnorm_forward(gpu_, dt, xf_.ptr(), rstdf_.ptr(), x, w(final_norm_), T, c.hidden_size, float(c.rms_norm_eps));
  if (active_ && active_->critic())
    matmul_forward(gpu_, dt, head_.ptr(), xf_.ptr(), active_->w(active_->score_weight()), active_->w(active_->score_bias()), T,
                   c.hidden_size, 1);
  else if (c.value_head)
    matmul_forward(gpu_, dt, head_.ptr(), xf_.ptr(), w(score_w_), w(score_b_), T, c.hidden_size, 1);
  else if (T <= head_rows())  // a longer sequence's logits are made a chunk at a time (token_logprobs)
    matmul_forward(gpu_, dt, head_.ptr(), xf_.ptr(), w(lm_head_), 0, T, c.hidden_size, c.vocab_size);
}

void CudaModel::forward(const std::vector<int>& tokens, CudaAdapter* adapter) {
  const auto& c = config_;
  if (adapter && !opt_.frozen) throw InternalError("native model on CUDA: an adapter runs on a frozen base");
  if (adapter && &adapter->base_ != this) throw InternalError("native model on CUDA: the adapter belongs to another base");
  active_ = adapter;
  const int T = int(tokens.size());
  if (T == 0) throw InputError("native model: empty sequence");
  if (T > c.max_position_embeddings)
    throw InputError("native model: sequence of " + std::to_string(T) + " tokens is longer than max_position_embeddings " +
                     std::to_string(c.max_position_embeddings));
  for (int tok : tokens)
    if (tok < 0 || tok >= c.vocab_size)
      throw InputError("native model: token id " + std::to_string(tok) + " outside the vocabulary of " +
                       std::to_string(c.vocab_size));
  ensure_scratch(T);
  seq_len_ = T;
  gpu_.upload(tokens_.ptr(), tokens.data(), T * 4);
  const DType dt = opt_.dtype;
  embedding_forward(gpu_, dt, layers_[0].x_in.ptr(), tokens_.ptr(), w(embed_), T, c.hidden_size);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Ptr x_out = l + 1 < c.num_hidden_layers ? layers_[l + 1].x_in.ptr() : resid_out_.ptr();
    LayerBuffers& L = opt_.checkpointing ? work_ : layers_[l];
    layer_forward(l, T, 0, L, layers_[l].x_in.ptr(), x_out, 0, 0, adapter);
  }
  head_forward(resid_out_.ptr(), T);
}

std::vector<float> CudaModel::logits() const {
  if (critic()) throw InternalError("native model on CUDA: a critic has no logits");
  if (chunked_head())
    throw InternalError("native model on CUDA: the logits of " + std::to_string(seq_len_) + " rows are not kept (the LM head runs in chunks of " +
                        std::to_string(head_rows()) + ")");
  return to_host(gpu_, head_.ptr(), std::size_t(seq_len_) * config_.vocab_size, opt_.dtype);
}

std::vector<float> CudaModel::values() const {
  if (!critic()) throw InternalError("native model on CUDA: a policy has no values");
  return to_host(gpu_, head_.ptr(), seq_len_, opt_.dtype);
}

TokenLogprobs CudaModel::token_logprobs(const std::vector<int>& targets, double temperature) {
  if (critic()) throw InternalError("native model on CUDA: token_logprobs needs a policy");
  if (int(targets.size()) != seq_len_) throw InternalError("native model on CUDA: targets and sequence differ in length");
  for (int y : targets)
    if (y >= config_.vocab_size) throw InputError("native model: target id " + std::to_string(y) + " outside the vocabulary");
  temperature_ = temperature;
  gpu_.upload(targets_.ptr(), targets.data(), targets.size() * 4);
  const DType dt = opt_.dtype;
  const int C = config_.hidden_size, V = config_.vocab_size, R = head_rows();
  if (!chunked_head()) {
    token_logprob_forward(gpu_, dt, lp_.ptr(), ent_.ptr(), lse_.ptr(), head_.ptr(), targets_.ptr(), seq_len_, V, temperature);
  } else {
    for (int r0 = 0; r0 < seq_len_; r0 += R) {
      const int rows = std::min(R, seq_len_ - r0);
      matmul_forward(gpu_, dt, head_.ptr(), at(xf_, std::size_t(r0) * C, dtype_size(dt)), w(lm_head_), 0, rows, C, V);
      token_logprob_forward(gpu_, dt, at(lp_, r0, 4), at(ent_, r0, 4), at(lse_, r0, 4), head_.ptr(), at(targets_, r0, 4),
                            rows, V, temperature);
    }
  }
  TokenLogprobs r;
  r.logprob = to_host(gpu_, lp_.ptr(), seq_len_, DType::F32);
  r.entropy = to_host(gpu_, ent_.ptr(), seq_len_, DType::F32);
  return r;
}

void CudaModel::backward_from_logprobs(const std::vector<float>& c_lp, const std::vector<float>& c_ent) {
  if (int(c_lp.size()) != seq_len_ || int(c_ent.size()) != seq_len_)
    throw InternalError("native model on CUDA: loss coefficients and sequence differ in length");
  gpu_.upload(c_lp_.ptr(), c_lp.data(), seq_len_ * 4);
  gpu_.upload(c_ent_.ptr(), c_ent.data(), seq_len_ * 4);
  const DType dt = opt_.dtype;
  const int C = config_.hidden_size, V = config_.vocab_size, R = head_rows();
  if (!chunked_head()) {
    // dlogits overwrite the logits in place: the [T, V] buffer is the largest of the step.
    token_logprob_backward(gpu_, dt, head_.ptr(), head_.ptr(), targets_.ptr(), lse_.ptr(), ent_.ptr(), c_lp_.ptr(),
                           c_ent_.ptr(), seq_len_, V, temperature_);
    backward_body();
    return;
  }
  // A chunk at a time: its logits again, their gradient in place, dxn's rows and the head's gradient.
  const std::size_t es = dtype_size(dt);
  for (int r0 = 0; r0 < seq_len_; r0 += R) {
    const int rows = std::min(R, seq_len_ - r0);
    Ptr xf = at(xf_, std::size_t(r0) * C, es);
    matmul_forward(gpu_, dt, head_.ptr(), xf, w(lm_head_), 0, rows, C, V);
    token_logprob_backward(gpu_, dt, head_.ptr(), head_.ptr(), at(targets_, r0, 4), at(lse_, r0, 4), at(ent_, r0, 4),
                           at(c_lp_, r0, 4), at(c_ent_, r0, 4), rows, V, temperature_);
    matmul_backward(gpu_, dt, at(dxn_, std::size_t(r0) * C, es), false, g(lm_head_), 0, head_.ptr(), xf, w(lm_head_), rows,
                    C, V);
  }
  backward_body(/*head_done=*/true);
}

void CudaModel::backward(const std::vector<float>& dout) {
  const std::size_t n = std::size_t(seq_len_) * (critic() ? 1 : config_.vocab_size);
  if (dout.size() != n) throw InternalError("native model on CUDA: dout has the wrong size");
  if (chunked_head()) throw InternalError("native model on CUDA: backward from dlogits needs the sequence within one head chunk");
  Buffer d = to_device(gpu_, dout, opt_.dtype);
  gpu_.check(gpu_.drv().cuMemcpyDtoDAsync(head_.ptr(), d.ptr(), d.bytes(), gpu_.stream()), "cuMemcpyDtoD");
  backward_body();
  gpu_.sync();
}

void CudaModel::backward_body(bool head_done) {
  const auto& c = config_;
  const DType dt = opt_.dtype;
  const std::size_t es = dtype_size(dt);
  const int T = seq_len_;
  const int C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads, KV = c.num_key_value_heads,
            D = c.head_dim;
  const int QD = H * D, KD = KV * D;
  CudaAdapter* ad = active_;
  if (head_done)
    ;  // dxn_ holds the head's input gradient already (the chunked LM head)
  else if (ad && ad->critic())
    matmul_backward(gpu_, dt, dxn_.ptr(), false, ad->g(ad->score_weight()), ad->g(ad->score_bias()), head_.ptr(), xf_.ptr(),
                    ad->w(ad->score_weight()), T, C, 1);
  else if (c.value_head)
    matmul_backward(gpu_, dt, dxn_.ptr(), false, g(score_w_), g(score_b_), head_.ptr(), xf_.ptr(), w(score_w_), T, C, 1);
  else
    matmul_backward(gpu_, dt, dxn_.ptr(), false, g(lm_head_), 0, head_.ptr(), xf_.ptr(), w(lm_head_), T, C, c.vocab_size);
  gpu_.memset0(dx_.ptr(), act_bytes(std::size_t(T) * C));
  rmsnorm_backward(gpu_, dt, dx_.ptr(), g(final_norm_), dxn_.ptr(), resid_out_.ptr(), w(final_norm_), rstdf_.ptr(), T, C);
  for (int l = c.num_hidden_layers - 1; l >= 0; --l) {
    const auto& o = offsets_[l];
    Ptr x_in = layers_[l].x_in.ptr();
    LayerBuffers* Lp = &layers_[l];
    if (opt_.checkpointing) {
      layer_forward(l, T, 0, work_, x_in, recompute_out_.ptr(), 0, 0, ad);
      Lp = &work_;
    }
    LayerBuffers& L = *Lp;
    // din += the adapter's share on (l, m) from dy (row stride ld), and its A and B gradients
    auto lora = [&](nn::LoraModule m, Ptr din, Ptr dy, int ld, Ptr in) {
      if (!ad) return;
      if (const nn::LoraSite* s = ad->site(l, m)) ad->backward(*s, din, dy, ld, in, T);
    };
    // MLP: x_out = x_mid + down(silu(gate(xn2)) * up(xn2))
    matmul_backward(gpu_, dt, dact_.ptr(), false, g(o.down), 0, dx_.ptr(), L.act.ptr(), w(o.down), T, F, C);
    lora(nn::LoraModule::down_proj, dact_.ptr(), dx_.ptr(), C, L.act.ptr());
    swiglu_backward(gpu_, dt, dgu_.ptr(), at(dgu_, F, es), 2 * F, dact_.ptr(), L.gu.ptr(), at(L.gu, F, es), 2 * F, T, F);
    matmul_backward(gpu_, dt, dxn_.ptr(), false, g(o.gate), 0, dgu_.ptr(), L.xn2.ptr(), w(o.gate), T, C, 2 * F);
    lora(nn::LoraModule::gate_proj, dxn_.ptr(), dgu_.ptr(), 2 * F, L.xn2.ptr());
    lora(nn::LoraModule::up_proj, dxn_.ptr(), at(dgu_, F, es), 2 * F, L.xn2.ptr());
    rmsnorm_backward(gpu_, dt, dx_.ptr(), g(o.post_norm), dxn_.ptr(), L.x_mid.ptr(), w(o.post_norm), L.rstd2.ptr(), T, C);
    // Attention: x_mid = x_in + o_proj(attention(rope(q), rope(k), v))
    matmul_backward(gpu_, dt, datt_.ptr(), false, g(o.o), 0, dx_.ptr(), L.att.ptr(), w(o.o), T, QD, C);
    lora(nn::LoraModule::o_proj, datt_.ptr(), dx_.ptr(), C, L.att.ptr());
    attention_backward(gpu_, dt, dqkv_.ptr(), QKV_, at(dqkv_, QD, es), at(dqkv_, QD + KD, es), QKV_, datt_.ptr(),
                       L.att.ptr(), QD, L.lse.ptr(), delta_.ptr(), L.qkv.ptr(), QKV_, at(L.qkv, QD, es),
                       at(L.qkv, QD + KD, es), QKV_, T, T, 0, H, KV, D);
    rope(gpu_, dt, dqkv_.ptr(), QKV_, T, H, D, rope_, 0, true);
    rope(gpu_, dt, at(dqkv_, QD, es), QKV_, T, KV, D, rope_, 0, true);
    matmul_backward(gpu_, dt, dxn_.ptr(), false, g(o.q), c.attention_bias ? g(o.q_bias) : 0, dqkv_.ptr(), L.xn1.ptr(),
                    w(o.q), T, C, QKV_);
    lora(nn::LoraModule::q_proj, dxn_.ptr(), dqkv_.ptr(), QKV_, L.xn1.ptr());
    lora(nn::LoraModule::k_proj, dxn_.ptr(), at(dqkv_, QD, es), QKV_, L.xn1.ptr());
    lora(nn::LoraModule::v_proj, dxn_.ptr(), at(dqkv_, QD + KD, es), QKV_, L.xn1.ptr());
    rmsnorm_backward(gpu_, dt, dx_.ptr(), g(o.input_norm), dxn_.ptr(), x_in, w(o.input_norm), L.rstd1.ptr(), T, C);
  }
  if (!opt_.frozen) embedding_backward(gpu_, dt, g(embed_), tokens_.ptr(), dx_.ptr(), T, C);
}

double CudaModel::clip_grad_norm(double max_norm) {
  if (opt_.frozen) throw InternalError("native model on CUDA: a frozen base has no gradients to clip");
  double norm = l2_norm(gpu_, grads_.ptr(), n_params_);
  if (max_norm > 0 && norm > max_norm) scale(gpu_, grads_.ptr(), n_params_, float(max_norm / (norm + 1e-6)));
  return norm;
}

void CudaModel::adamw_step(const nn::AdamWConfig& cfg) {
  if (opt_.frozen) throw InternalError("native model on CUDA: a frozen base is not updated");
  const Ptr copy = opt_.dtype == DType::BF16 ? compute_.ptr() : 0;
  if (opt_.host_optimizer) {
    if (host_m_.empty()) host_m_.assign(n_params_, 0.f), host_v_.assign(n_params_, 0.f);
    ++adam_t_;
    const std::size_t chunk = std::size_t(64) << 20;
    Buffer m(gpu_, std::min(chunk, n_params_) * 4), v(gpu_, std::min(chunk, n_params_) * 4);
    for (std::size_t i = 0; i < n_params_; i += chunk) {
      const std::size_t n = std::min(chunk, n_params_ - i);
      gpu_.upload(m.ptr(), host_m_.data() + i, n * 4);
      gpu_.upload(v.ptr(), host_v_.data() + i, n * 4);
      nn_cuda::adamw_step(gpu_, master_.ptr() + i * 4, grads_.ptr() + i * 4, m.ptr(), v.ptr(), copy ? copy + i * 2 : 0, n,
                          cfg.lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, adam_t_);
      gpu_.download(host_m_.data() + i, m.ptr(), n * 4);  // after the step on the stream
      gpu_.download(host_v_.data() + i, v.ptr(), n * 4);
    }
    gpu_.sync();
    return;
  }
  if (!adam_m_.ptr()) {
    adam_m_ = Buffer(gpu_, n_params_ * 4);
    adam_v_ = Buffer(gpu_, n_params_ * 4);
    gpu_.memset0(adam_m_.ptr(), n_params_ * 4);
    gpu_.memset0(adam_v_.ptr(), n_params_ * 4);
  }
  ++adam_t_;
  nn_cuda::adamw_step(gpu_, master_.ptr(), grads_.ptr(), adam_m_.ptr(), adam_v_.ptr(), copy, n_params_, cfg.lr,
                      cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, adam_t_);
  gpu_.sync();
}

nn::AdamW CudaModel::optimizer_state() const {
  nn::AdamW a;
  a.t = adam_t_;
  if (opt_.host_optimizer) {
    a.m = host_m_, a.v = host_v_;
  } else if (adam_m_.ptr()) {
    a.m = to_host(gpu_, adam_m_.ptr(), n_params_, DType::F32);
    a.v = to_host(gpu_, adam_v_.ptr(), n_params_, DType::F32);
  }
  return a;
}

void CudaModel::set_optimizer_state(const nn::AdamW& state) {
  if (state.m.size() != n_params_ || state.v.size() != n_params_)
    throw InputError("native model on CUDA: optimizer state does not fit the model");
  adam_t_ = state.t;
  if (opt_.host_optimizer) {
    host_m_ = state.m, host_v_ = state.v;
    return;
  }
  adam_m_ = to_device(gpu_, state.m, DType::F32);
  adam_v_ = to_device(gpu_, state.v, DType::F32);
  adam_t_ = state.t;
}

void CudaModel::save_optimizer(const std::string& path) const {
  if (opt_.frozen) throw InternalError("native model on CUDA: a frozen base has no optimizer state");
  const bool zeros = !opt_.host_optimizer && !adam_m_.ptr();  // no step yet: zero moments, as a fresh AdamW
  nn::write_adamw_state(path, n_params_, adam_t_, [&](int which, std::size_t begin, std::size_t count, float* out) {
    if (opt_.host_optimizer && !host_m_.empty()) {
      const auto& src = which == 0 ? host_m_ : host_v_;
      std::copy_n(src.begin() + std::ptrdiff_t(begin), count, out);
    } else if (zeros || opt_.host_optimizer) {
      std::fill_n(out, count, 0.0f);
    } else {
      gpu_.download(out, (which == 0 ? adam_m_ : adam_v_).ptr() + begin * 4, count * 4);
    }
  });
}

bool CudaModel::load_optimizer(const std::string& path) {
  if (opt_.frozen) throw InternalError("native model on CUDA: a frozen base has no optimizer state");
  auto file = nn::AdamWStateFile::open(path, n_params_);
  if (!file) return false;
  const std::size_t chunk = std::size_t(64) << 20;
  if (opt_.host_optimizer) {
    file->read_all(host_m_, host_v_);
  } else {
    if (!adam_m_.ptr()) adam_m_ = Buffer(gpu_, n_params_ * 4), adam_v_ = Buffer(gpu_, n_params_ * 4);
    std::vector<float> host(std::min(chunk, n_params_));
    for (int which : {0, 1})
      for (std::size_t i = 0; i < n_params_; i += chunk) {
        const std::size_t n = std::min(chunk, n_params_ - i);
        gpu_.sync();  // the last upload from `host` is done
        file->read(which, i, n, host.data());
        gpu_.upload((which == 0 ? adam_m_ : adam_v_).ptr() + i * 4, host.data(), n * 4);
      }
    gpu_.sync();
  }
  adam_t_ = file->step();
  return true;
}

// ---------------------------------------------------------------------------------------------
// Decoding with a KV cache

CudaDecoder::CudaDecoder(CudaModel& model, int max_len) : m_(model) {
  const auto& c = model.config();
  if (c.value_head) throw InternalError("native model on CUDA: decoding needs a policy");
  max_len_ = max_len > 0 ? std::min(max_len, c.max_position_embeddings) : c.max_position_embeddings;
  const std::size_t KD = std::size_t(c.num_key_value_heads) * c.head_dim;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    k_cache_.emplace_back(model.gpu(), model.act_bytes(KD * max_len_));
    v_cache_.emplace_back(model.gpu(), model.act_bytes(KD * max_len_));
  }
  xf_ = Buffer(model.gpu(), model.act_bytes(c.hidden_size));
  rstdf_ = Buffer(model.gpu(), 4);
  logits_dev_ = Buffer(model.gpu(), model.act_bytes(c.vocab_size));
}

const std::vector<float>& CudaDecoder::feed(const std::vector<int>& tokens) {
  const auto& c = m_.config();
  const int T = int(tokens.size());
  if (T == 0) return logits_;
  if (len_ + T > max_len_)
    throw InputError("native model: the context of " + std::to_string(max_len_) + " tokens is full");
  for (int tok : tokens)
    if (tok < 0 || tok >= c.vocab_size) throw InputError("native model: token id " + std::to_string(tok) + " outside the vocabulary");
  Gpu& gpu = m_.gpu();
  const DType dt = m_.dtype();
  const std::size_t es = dtype_size(dt), C = c.hidden_size;
  if (T > capacity_) {
    m_.alloc_layer(work_, T, false, true);
    x_.ensure(gpu, m_.act_bytes(T * C));
    x2_.ensure(gpu, m_.act_bytes(T * C));
    tokens_.ensure(gpu, T * 4);
    capacity_ = T;
  }
  gpu.upload(tokens_.ptr(), tokens.data(), T * 4);
  embedding_forward(gpu, dt, x_.ptr(), tokens_.ptr(), m_.w(m_.embed_), T, C);
  Ptr x = x_.ptr(), x2 = x2_.ptr();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    m_.layer_forward(l, T, len_, work_, x, x2, k_cache_[l].ptr(), v_cache_[l].ptr());
    std::swap(x, x2);
  }
  // Only the last row's logits are needed to sample the next token.
  Ptr last = at(x, std::size_t(T - 1) * C, es);
  rmsnorm_forward(gpu, dt, xf_.ptr(), rstdf_.ptr(), last, m_.w(m_.final_norm_), 1, C, float(c.rms_norm_eps));
  matmul_forward(gpu, dt, logits_dev_.ptr(), xf_.ptr(), m_.w(m_.lm_head_), 0, 1, C, c.vocab_size);
  logits_ = to_host(gpu, logits_dev_.ptr(), c.vocab_size, dt);
  len_ += T;
  return logits_;
}

nn::SampleResult generate(CudaDecoder& decoder, const nn::SampleOptions& options, std::mt19937_64& rng) {
  return nn::generate_from(decoder, options, rng);
}

}  // namespace ca::nn_cuda
