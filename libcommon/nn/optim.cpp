// AdamW and gradient clipping.
#include "libcommon/nn/optim.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "libcommon/atomic_file.hpp"
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

namespace {
constexpr const char* kMoments[2] = {"exp_avg", "exp_avg_sq"};
constexpr std::size_t kChunk = std::size_t(8) << 20;  // floats per write or read
}  // namespace

void write_adamw_state(const std::string& path, std::size_t n, int64_t step, const MomentFill& fill) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<SafetensorsPlanEntry> entries;
  for (auto* name : kMoments) entries.push_back({name, "F32", {int64_t(n)}, uint64_t(n) * 4, 0});
  const SafetensorsPlan plan = plan_safetensors(entries, {{"step", std::to_string(step)}, {"optimizer", "adamw"}});
  AtomicFile out(path);
  out.write(plan.header);
  std::vector<float> chunk(std::min(kChunk, std::max<std::size_t>(n, 1)));
  for (auto& e : plan.entries) {
    const int which = e.name == kMoments[0] ? 0 : 1;
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t k = std::min(kChunk, n - i);
      fill(which, i, k, chunk.data());
      out.write(chunk.data(), k * 4);
    }
  }
  out.commit();
}

std::unique_ptr<AdamWStateFile> AdamWStateFile::open(const std::string& path, std::size_t n) {
  if (!std::filesystem::exists(path)) return nullptr;
  std::unique_ptr<AdamWStateFile> f(new AdamWStateFile);
  f->map_ = std::make_unique<MappedFile>(path);
  f->n_ = n;
  const SafetensorsHeader h = parse_safetensors_header(f->map_->data(), f->map_->size(), path);
  for (int which : {0, 1}) {
    auto it = h.tensors.find(kMoments[which]);
    if (it == h.tensors.end() || it->second.dtype != "F32" || it->second.shape != std::vector<int64_t>{int64_t(n)})
      throw InputError("'" + path + "': optimizer state does not fit the model (" + kMoments[which] + ")");
    f->offset_[which] = h.data_start + it->second.begin;
  }
  auto step = h.metadata.find("step");
  try {
    f->step_ = step == h.metadata.end() ? 0 : std::stoll(step->second);
  } catch (const std::exception&) {
    throw InputError("'" + path + "': metadata step '" + step->second + "' is not an integer");
  }
  return f;
}

AdamWStateFile::~AdamWStateFile() = default;

void AdamWStateFile::read(int which, std::size_t begin, std::size_t count, float* out) const {
  const uint64_t at = offset_[which] + uint64_t(begin) * 4;
  convert_elements(map_->data() + at, "F32", count, out);
  map_->release(at, uint64_t(count) * 4);
}

void AdamW::save(const std::string& path) const {
  write_adamw_state(path, m.size(), t, [&](int which, std::size_t begin, std::size_t count, float* out) {
    const auto& src = which == 0 ? m : v;
    std::copy_n(src.begin() + std::ptrdiff_t(begin), count, out);
  });
}

void AdamWStateFile::read_all(std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq) const {
  exp_avg.resize(n_);
  exp_avg_sq.resize(n_);
  for (std::size_t i = 0; i < n_; i += kChunk) {
    const std::size_t k = std::min(kChunk, n_ - i);
    read(0, i, k, exp_avg.data() + i);
    read(1, i, k, exp_avg_sq.data() + i);
  }
}

bool AdamW::load(const std::string& path, std::size_t n) {
  auto file = AdamWStateFile::open(path, n);
  if (!file) return false;
  file->read_all(m, v);
  t = file->step();
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
