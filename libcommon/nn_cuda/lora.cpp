// LoRA adapters on the GPU (lora.hpp): every op is a GEMM (cuBLASLt through Gpu::gemm), with row
// strides so a site writes into its slice of the fused q/k/v and gate/up outputs.
#include "libcommon/nn_cuda/lora.hpp"

#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/model.hpp"

namespace ca::nn_cuda {

CudaAdapter::CudaAdapter(CudaModel& base, const nn::Adapter<float>& ad)
    : base_(base), config_(ad.config()), sites_(ad.sites()), n_(ad.num_parameters()), score_w_(ad.score_weight),
      score_b_(ad.score_bias) {
  const auto& c = base.config();
  const auto& b = ad.base_config();
  if (c.value_head || b.hidden_size != c.hidden_size || b.intermediate_size != c.intermediate_size ||
      b.num_hidden_layers != c.num_hidden_layers || b.num_attention_heads != c.num_attention_heads ||
      b.num_key_value_heads != c.num_key_value_heads || b.head_dim != c.head_dim || b.vocab_size != c.vocab_size)
    throw InternalError("nn_cuda: the adapter was laid out for another base");
  site_index_.assign(std::size_t(c.num_hidden_layers) * nn::kLoraModules, -1);
  for (std::size_t i = 0; i < sites_.size(); ++i)
    site_index_[std::size_t(sites_[i].layer) * nn::kLoraModules + int(sites_[i].module)] = int(i);
  Gpu& gpu = base_.gpu();
  master_ = Buffer(gpu, n_ * 4);
  if (base_.dtype() == DType::BF16) compute_ = Buffer(gpu, n_ * 2);
  grads_ = Buffer(gpu, n_ * 4);
  u_.resize(sites_.size());
  upload(ad);
  zero_grad();
}

void CudaAdapter::upload(const nn::Adapter<float>& ad) {
  if (ad.weights.size() != n_) throw InternalError("nn_cuda: adapter weights of another shape");
  Gpu& gpu = base_.gpu();
  gpu.upload(master_.ptr(), ad.weights.data(), n_ * 4);
  if (compute_.ptr()) convert(gpu, DType::BF16, compute_.ptr(), DType::F32, master_.ptr(), n_);
  gpu.sync();
}

void CudaAdapter::download(nn::Adapter<float>& ad) const {
  ad.weights.resize(n_);
  base_.gpu().download(ad.weights.data(), master_.ptr(), n_ * 4);
}

std::vector<float> CudaAdapter::grads() const { return to_host(base_.gpu(), grads_.ptr(), n_, DType::F32); }
void CudaAdapter::zero_grad() { base_.gpu().memset0(grads_.ptr(), n_ * 4); }

const nn::LoraSite* CudaAdapter::site(int layer, nn::LoraModule m) const {
  int i = site_index_[std::size_t(layer) * nn::kLoraModules + int(m)];
  return i < 0 ? nullptr : &sites_[std::size_t(i)];
}

Ptr CudaAdapter::w(std::size_t offset) const {
  return compute_.ptr() ? compute_.ptr() + offset * 2 : master_.ptr() + offset * 4;
}
Ptr CudaAdapter::g(std::size_t offset) const { return grads_.ptr() + offset * 4; }

void CudaAdapter::ensure(int rows) {
  if (rows <= capacity_) return;
  Gpu& gpu = base_.gpu();
  const std::size_t es = dtype_size(base_.dtype()), r = std::size_t(config_.r);
  for (auto& u : u_) u.ensure(gpu, std::size_t(rows) * r * es);
  du_.ensure(gpu, std::size_t(rows) * r * es);
  capacity_ = rows;
}

namespace {
std::size_t index_of(const std::vector<nn::LoraSite>& sites, const nn::LoraSite& s) {
  return std::size_t(&s - sites.data());
}
}  // namespace

void CudaAdapter::forward(const nn::LoraSite& s, Ptr y, int ldy, Ptr x, int rows) {
  ensure(rows);
  Gpu& gpu = base_.gpu();
  const DType dt = base_.dtype();
  const int r = config_.r;
  Ptr u = u_[index_of(sites_, s)].ptr();
  matmul_forward(gpu, dt, u, x, w(s.a), 0, rows, s.in, r);  // u = x A^T
  Gpu::Gemm g;  // y (out x rows, ld ldy) += scaling * B (out x r) u (r x rows)
  g.trans_a = true;
  g.m = s.out, g.n = rows, g.k = r;
  g.a = w(s.b), g.lda = r;
  g.b = u, g.ldb = r;
  g.c = y, g.d = y, g.ldc = ldy;
  g.alpha = float(config_.scaling()), g.beta = 1.f;
  g.in = g.out = dt;
  gpu.gemm(g);
}

void CudaAdapter::backward(const nn::LoraSite& s, Ptr dx, Ptr dy, int lddy, Ptr x, int rows) {
  Gpu& gpu = base_.gpu();
  const DType dt = base_.dtype();
  const int r = config_.r;
  const float scaling = float(config_.scaling());
  Ptr u = u_[index_of(sites_, s)].ptr();
  {  // dB (r x out, ld r) += scaling * u (r x rows) dy^T (rows x out)
    Gpu::Gemm g;
    g.trans_b = true;
    g.m = r, g.n = s.out, g.k = rows;
    g.a = u, g.lda = r;
    g.b = dy, g.ldb = lddy;
    g.c = this->g(s.b), g.d = this->g(s.b), g.ldc = r;
    g.alpha = scaling, g.beta = 1.f;
    g.in = dt, g.out = DType::F32;
    gpu.gemm(g);
  }
  {  // du (r x rows) = scaling * B^T-as-stored (r x out, ld r) dy (out x rows, ld lddy)
    Gpu::Gemm g;
    g.m = r, g.n = rows, g.k = s.out;
    g.a = w(s.b), g.lda = r;
    g.b = dy, g.ldb = lddy;
    g.d = du_.ptr(), g.ldc = r;
    g.alpha = scaling, g.beta = 0.f;
    g.in = g.out = dt;
    gpu.gemm(g);
  }
  // dA += du^T x;  dx += du A
  matmul_backward(gpu, dt, dx, true, this->g(s.a), 0, du_.ptr(), x, w(s.a), rows, s.in, r);
}

double CudaAdapter::clip_grad_norm(double max_norm) {
  Gpu& gpu = base_.gpu();
  double norm = l2_norm(gpu, grads_.ptr(), n_);
  if (max_norm > 0 && norm > max_norm) scale(gpu, grads_.ptr(), n_, float(max_norm / (norm + 1e-6)));
  return norm;
}

void CudaAdapter::adamw_step(const nn::AdamWConfig& cfg) {
  Gpu& gpu = base_.gpu();
  if (!adam_m_.ptr()) {
    adam_m_ = Buffer(gpu, n_ * 4);
    adam_v_ = Buffer(gpu, n_ * 4);
    gpu.memset0(adam_m_.ptr(), n_ * 4);
    gpu.memset0(adam_v_.ptr(), n_ * 4);
  }
  ++adam_t_;
  nn_cuda::adamw_step(gpu, master_.ptr(), grads_.ptr(), adam_m_.ptr(), adam_v_.ptr(), compute_.ptr(), n_, cfg.lr,
                      cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, adam_t_);
  gpu.sync();
}

nn::AdamW CudaAdapter::optimizer_state() const {
  nn::AdamW a;
  a.t = adam_t_;
  if (adam_m_.ptr()) {
    a.m = to_host(base_.gpu(), adam_m_.ptr(), n_, DType::F32);
    a.v = to_host(base_.gpu(), adam_v_.ptr(), n_, DType::F32);
  }
  return a;
}

void CudaAdapter::set_optimizer_state(const nn::AdamW& state) {
  if (state.m.size() != n_ || state.v.size() != n_) throw InputError("LoRA on CUDA: optimizer state does not fit the adapter");
  adam_m_ = to_device(base_.gpu(), state.m, DType::F32);
  adam_v_ = to_device(base_.gpu(), state.v, DType::F32);
  adam_t_ = state.t;
}

}  // namespace ca::nn_cuda
