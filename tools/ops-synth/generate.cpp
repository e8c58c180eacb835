// Task synthesis: the generator's options and its per-index loop (draw, dedup, render). The parts live
// beside it: mix.cpp (categories), chains.cpp and modules.cpp (drawing), sizing.cpp (eager time),
// render.cpp (Python and the task record).
#include "tools/ops-synth/generate.hpp"

#include <algorithm>

#include "libcommon/errors.hpp"
#include "tools/ops-synth/generate_detail.hpp"
#include "tools/ops-synth/rng.hpp"

namespace ca::ops_synth {

using detail::fnv1a;
using detail::log2_bucket;

namespace {
// --ops names an op by its catalog name (ReLU) or by the name records list it under (nn.ReLU).
bool named_in(const std::vector<std::string>& names, const OpSpec& op) {
  return std::find(names.begin(), names.end(), op.name) != names.end() ||
         std::find(names.begin(), names.end(), op.api) != names.end();
}
}  // namespace

namespace detail {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int log2_bucket(int64_t v) {
  int b = 0;
  while (v > 1) {
    v >>= 1;
    ++b;
  }
  return b;
}

}  // namespace detail

Generator::Generator(const Catalog& catalog, GenOptions options) : cat_(catalog), opt_(std::move(options)) {
  auto it = cat_.sizes.find(opt_.sizes);
  if (it == cat_.sizes.end()) throw ca::UsageError("--sizes: unknown size profile '" + opt_.sizes + "' (gpu or tiny)");
  profile_ = &it->second;
  gpu_ = find_gpu_profile(opt_.gpu_profile);
  if (!gpu_) throw ca::UsageError("--gpu-profile: unknown '" + opt_.gpu_profile + "' (" + gpu_profile_names() + ")");
  by_rank_.resize(6);
  for (const auto& op : cat_.ops) {
    if (op.stochastic && !opt_.allow_stochastic) continue;
    if (!opt_.only_ops.empty() && !named_in(opt_.only_ops, op)) continue;
    for (int r : op.ranks)
      if (r >= 0 && r < 6) by_rank_[static_cast<std::size_t>(r)].push_back(&op);
  }
  for (const auto& name : opt_.only_ops)
    if (!cat_.find_op(name) &&
        std::none_of(cat_.ops.begin(), cat_.ops.end(), [&](const OpSpec& op) { return op.api == name; }))
      throw ca::UsageError("--ops: no op '" + name + "' in the catalog (by name, ReLU, or as records list it, nn.ReLU)");
  uint64_t s = opt_.seed ^ 0x5851F42D4C957F2Dull;
  weyl_offset_ = splitmix64(s);
}

ca::Json Generator::task(int64_t index) {
  int category = category_of(index);
  uint64_t task_seed = mix_seed(opt_.seed, static_cast<uint64_t>(index));
  for (int attempt = 0; attempt < opt_.max_attempts; ++attempt) {
    uint64_t seed = mix_seed(task_seed, static_cast<uint64_t>(attempt));
    Built b;
    b.category = category;
    bool is_module = category == kCategories - 1;
    bool last_try = is_module && attempt == opt_.max_attempts - 1;
    bool ok = !is_module ? build_chain(category + 1, seed, b) : last_try ? build_module_unused(seed, b) : build_module(seed, b);
    if (!ok) {
      ++retries_;
      continue;
    }
    // Near-duplicate: the same ops with the same non-size arguments and sizes within a factor of
    // two of an earlier task's (for modules: the same module at the same size buckets).
    std::string sig = std::to_string(category) + "|";
    uint64_t h = 0;
    if (b.module) {
      h = module_signature(b);
    } else {
      for (std::size_t i = 1; i < b.start.size(); ++i) sig += std::to_string(log2_bucket(b.start[i])) + ",";
      for (const auto& inst : b.chain) {
        sig += "|" + inst.spec->name;
        for (std::size_t a = 0; a < inst.args.size(); ++a) {
          const ArgValue& v = inst.args[a];
          sig += ":";
          if (!v.is_int) sig += v.text;
          else if (inst.spec->args[a].is_size()) sig += "~" + std::to_string(log2_bucket(v.i));
          else sig += std::to_string(v.i);
        }
      }
    }
    if (!b.module) h = fnv1a(sig);
    if (signatures_.count(h)) {
      ++duplicates_;
      continue;
    }
    ca::Json rec = b.module ? render_module(b, index, attempt) : render_chain(b, index, attempt);
    std::string id = rec["task_id"].get<std::string>();
    if (!task_ids_.insert(id).second) {
      ++duplicates_;
      continue;
    }
    signatures_.insert(h);
    return rec;
  }
  // Not a bug but a mix asking more of a category than it holds (the modules are counted before
  // anything is written; the chains' far larger space is not).
  throw ca::UsageError("no new distinct task for index " + std::to_string(index) + " (category " + category_name(category) +
                       ") after " + std::to_string(opt_.max_attempts) + " attempts (" + std::to_string(index) +
                       " written): the catalog or --ops is too narrow for -n with this --mix");
}

}  // namespace ca::ops_synth
