// AdamW (torch.optim.AdamW's update, decoupled weight decay) and global gradient-norm clipping over a
// flat parameter vector; the moments persist beside a checkpoint so one process per step loses nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ca {
class MappedFile;
}

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

// The same file in chunks, never the moments whole in host memory (a 7B model's are 56 GB in fp32):
// what a trainer whose moments live on the GPU, or in its own host buffers, saves and loads through.
// fill(which, begin, count, out): elements [begin, begin + count) of exp_avg (which 0) or exp_avg_sq (1).
using MomentFill = std::function<void(int which, std::size_t begin, std::size_t count, float* out)>;
// Written as AdamW::save writes it, byte for byte (AtomicFile: whole or not at all).
void write_adamw_state(const std::string& path, std::size_t n, int64_t step, const MomentFill& fill);

// An optimizer.safetensors mapped for reading in chunks; its header checked against `n` parameters
// (InputError naming the file and tensor as AdamW::load).
class AdamWStateFile {
 public:
  // nullptr when the file does not exist.
  static std::unique_ptr<AdamWStateFile> open(const std::string& path, std::size_t n);
  ~AdamWStateFile();
  int64_t step() const { return step_; }
  // Elements [begin, begin + count) of exp_avg (which 0) or exp_avg_sq (1); the pages read are given
  // back as it goes.
  void read(int which, std::size_t begin, std::size_t count, float* out) const;
  // Both moments whole into host vectors (resized to n), read in chunks so the mapped pages are given
  // back as they are copied: AdamW's state, or a trainer's host-side optimizer.
  void read_all(std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq) const;

 private:
  AdamWStateFile() = default;
  std::unique_ptr<MappedFile> map_;
  std::size_t n_ = 0;
  uint64_t offset_[2] = {0, 0};
  int64_t step_ = 0;
};

// Scales gradients so their global L2 norm is at most max_norm (when max_norm > 0); returns the norm
// before clipping (the figure the metrics report), as torch.nn.utils.clip_grad_norm_ does.
template <class T> double clip_grad_norm(std::vector<T>& grads, double max_norm);

}  // namespace ca::nn
