// AdamW (torch.optim.AdamW's update, decoupled weight decay) and global gradient-norm clipping over a
// flat parameter vector; the moments persist beside a checkpoint so one process per step loses nothing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ca::nn {

struct AdamWConfig {
  double lr = 1e-6;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW() = default;
  explicit AdamW(std::size_t n) : m(n, 0.0f), v(n, 0.0f) {}
  // One step: w <- w * (1 - lr*wd);  w <- w - lr * mhat / (sqrt(vhat) + eps), with bias-corrected moments.
  template <class T> void step(std::vector<T>& weights, const std::vector<T>& grads, const AdamWConfig& c);

  // trainer_state/optimizer.safetensors: F32 tensors "exp_avg", "exp_avg_sq"; the step in the metadata.
  void save(const std::string& path) const;
  // Returns false when the file does not exist; throws InputError when it does not fit `n` parameters.
  bool load(const std::string& path, std::size_t n);

  std::vector<float> m, v;
  int64_t t = 0;
};

// Scales gradients so their global L2 norm is at most max_norm (when max_norm > 0); returns the norm
// before clipping (the figure the metrics report), as torch.nn.utils.clip_grad_norm_ does.
template <class T> double clip_grad_norm(std::vector<T>& grads, double max_norm);

}  // namespace ca::nn
