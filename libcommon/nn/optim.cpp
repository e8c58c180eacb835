// AdamW and gradient clipping.
#include "libcommon/nn/optim.hpp"

#include <cmath>
#include <filesystem>

#include "libcommon/errors.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::nn {

template <class T> void AdamW::step(std::vector<T>& w, const std::vector<T>& g, const AdamWConfig& c) {
  if (m.size() != w.size()) {
    m.assign(w.size(), 0.0f);
    v.assign(w.size(), 0.0f);
    t = 0;
  }
  ++t;
  const double bc1 = 1.0 - std::pow(c.beta1, double(t));
  const double bc2 = 1.0 - std::pow(c.beta2, double(t));
  for (std::size_t i = 0; i < w.size(); ++i) {
    double gi = double(g[i]);
    m[i] = float(c.beta1 * m[i] + (1.0 - c.beta1) * gi);
    v[i] = float(c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi);
    double mhat = m[i] / bc1, vhat = v[i] / bc2;
    double wi = double(w[i]) * (1.0 - c.lr * c.weight_decay);
    w[i] = T(wi - c.lr * mhat / (std::sqrt(vhat) + c.eps));
  }
}

void AdamW::save(const std::string& path) const {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  TensorMap tensors;
  for (auto [name, src] : {std::pair{"exp_avg", &m}, std::pair{"exp_avg_sq", &v}}) {
    Tensor tensor = Tensor::zeros("F32", {int64_t(src->size())});
    std::copy(src->begin(), src->end(), tensor.as<float>());
    tensors.emplace(name, std::move(tensor));
  }
  write_safetensors(path, tensors, {{"step", std::to_string(t)}, {"optimizer", "adamw"}});
}

bool AdamW::load(const std::string& path, std::size_t n) {
  if (!std::filesystem::exists(path)) return false;
  auto file = read_safetensors(path);
  for (auto [name, dst] : {std::pair{"exp_avg", &m}, std::pair{"exp_avg_sq", &v}}) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end() || it->second.dtype != "F32" || std::size_t(it->second.numel()) != n)
      throw InputError("'" + path + "': optimizer state does not fit the model (" + name + ")");
    dst->assign(it->second.as<float>(), it->second.as<float>() + n);
  }
  t = file.metadata.count("step") ? std::stoll(file.metadata["step"]) : 0;
  return true;
}

template <class T> double clip_grad_norm(std::vector<T>& grads, double max_norm) {
  double ss = 0;
  for (auto g : grads) ss += double(g) * double(g);
  double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    double scale = max_norm / (norm + 1e-6);
    for (auto& g : grads) g = T(g * scale);
  }
  return norm;
}

template void AdamW::step<float>(std::vector<float>&, const std::vector<float>&, const AdamWConfig&);
template void AdamW::step<double>(std::vector<double>&, const std::vector<double>&, const AdamWConfig&);
template double clip_grad_norm<float>(std::vector<float>&, double);
template double clip_grad_norm<double>(std::vector<double>&, double);

}  // namespace ca::nn
