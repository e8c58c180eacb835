// Drawing a standalone module: its constants sampled from the size lists, its shapes and cost
// evaluated, and the space of its distinct sizes (near-duplicates counted once) for when draws run dry.
#include <unordered_set>

#include "tools/ops-synth/generate.hpp"
#include "tools/ops-synth/generate_detail.hpp"
#include "tools/ops-synth/rng.hpp"

namespace ca::ops_synth {

using detail::fnv1a;
using detail::kTargetsMs;
using detail::log2_bucket;
using detail::numel_of;

bool Generator::evaluate_module(const ModuleSpec& m, const std::vector<int64_t>& consts, Built& out) const {
  bool gpu = opt_.sizes == "gpu";
  Env env;
  for (std::size_t i = 0; i < consts.size(); ++i) env.set(m.constants[i].sym, consts[i]);
  try {
    for (const auto& r : m.requires_)
      if (!r.eval(env)) return false;
    out.module_in.clear();
    out.module_out.clear();
    for (const auto& t : m.inputs) {
      Shape s;
      for (const auto& e : t.shape) s.push_back(e.eval(env));
      if (profile_->max_numel && numel_of(s) > profile_->max_numel) return false;
      out.module_in.push_back(std::move(s));
    }
    for (const auto& t : m.outputs) {
      Shape s;
      for (const auto& e : t.shape) s.push_back(e.eval(env));
      if (profile_->max_numel && numel_of(s) > profile_->max_numel) return false;
      out.module_out.push_back(std::move(s));
    }
    out.flops = m.flops.eval(env);
    out.bytes = m.bytes.eval(env);
  } catch (const EvalError&) {
    return false;
  }
  if (!gpu && profile_->max_flops && out.flops > profile_->max_flops) return false;
  out.est_ms = estimate_ms(out.flops, out.bytes, 8);
  out.consts = consts;
  return true;
}

bool Generator::build_module(uint64_t seed, Built& b) {
  if (cat_.modules.empty()) return false;
  Rng rng(seed);
  const ModuleSpec& m = cat_.modules[rng.below(cat_.modules.size())];
  b.module = &m;
  bool gpu = opt_.sizes == "gpu";
  std::vector<int64_t> consts;
  for (const auto& c : m.constants) {
    const auto& list = gpu ? c.gpu : c.tiny;
    consts.push_back(list[rng.below(list.size())]);
  }
  if (!evaluate_module(m, consts, b)) return false;
  if (!gpu) return true;
  return size_module(b, kTargetsMs[rng.below(kTargetsMs.size())]);
}

uint64_t Generator::module_signature(const Built& b) const {
  std::string sig = std::to_string(kCategories - 1) + "|" + b.module->name;
  for (std::size_t i = 0; i < b.consts.size(); ++i)
    sig += "," + std::to_string(b.module->constants[i].name == "batch_size" ? 0 : log2_bucket(b.consts[i]));
  return fnv1a(sig);
}

const std::vector<Generator::ModuleChoice>& Generator::module_space() {
  if (module_space_ready_) return module_space_;
  module_space_ready_ = true;
  bool gpu = opt_.sizes == "gpu";
  std::unordered_set<uint64_t> seen;
  for (std::size_t mi = 0; mi < cat_.modules.size(); ++mi) {
    const ModuleSpec& m = cat_.modules[mi];
    std::vector<const std::vector<int64_t>*> lists;
    bool empty = false;
    for (const auto& c : m.constants) {
      lists.push_back(gpu ? &c.gpu : &c.tiny);
      empty = empty || lists.back()->empty();
    }
    if (empty) continue;
    // Every combination of the constants' size lists (an odometer over them).
    std::vector<std::size_t> at(lists.size(), 0);
    for (;;) {
      std::vector<int64_t> consts;
      for (std::size_t i = 0; i < lists.size(); ++i) consts.push_back((*lists[i])[at[i]]);
      Built b;
      b.category = kCategories - 1;
      b.module = &m;
      if (evaluate_module(m, consts, b)) {
        for (std::size_t t = 0; t < (gpu ? kTargetsMs.size() : 1); ++t) {
          Built sized = b;
          if (!size_module(sized, gpu ? kTargetsMs[t] : 0)) continue;
          uint64_t sig = module_signature(sized);
          if (seen.insert(sig).second) module_space_.push_back({mi, consts, gpu ? kTargetsMs[t] : 0, sig});
          break;
        }
      }
      std::size_t k = 0;
      for (; k < at.size(); ++k) {
        if (++at[k] < lists[k]->size()) break;
        at[k] = 0;
      }
      if (k == at.size()) break;
    }
  }
  return module_space_;
}

int64_t Generator::module_capacity() { return static_cast<int64_t>(module_space().size()); }

bool Generator::build_module_unused(uint64_t seed, Built& b) {
  // The random draws found only near-duplicates: walk the space of distinct module sizes from a
  // seeded point and take the first one not used yet, so the category runs dry only when every
  // distinct size has been used (module_capacity()).
  const auto& space = module_space();
  if (space.empty()) return false;
  std::size_t first = static_cast<std::size_t>(seed % space.size());
  for (std::size_t k = 0; k < space.size(); ++k) {
    const ModuleChoice& c = space[(first + k) % space.size()];
    if (signatures_.count(c.signature)) continue;
    b.module = &cat_.modules[c.module];
    if (!evaluate_module(*b.module, c.consts, b) || !size_module(b, c.target_ms)) continue;
    return true;
  }
  return false;
}

}  // namespace ca::ops_synth
