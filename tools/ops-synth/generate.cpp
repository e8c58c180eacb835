// Task synthesis: op chains and standalone modules, sizing, dedup, and rendering to task records.
#include "tools/ops-synth/generate.hpp"

#include <algorithm>
#include <sstream>

#include "libcommon/errors.hpp"
#include "libcommon/ids.hpp"
#include "tools/ops-synth/rng.hpp"

namespace ca::ops_synth {

namespace {
// --ops names an op by its catalog name (ReLU) or by the name records list it under (nn.ReLU).
bool named_in(const std::vector<std::string>& names, const OpSpec& op) {
  return std::find(names.begin(), names.end(), op.name) != names.end() ||
         std::find(names.begin(), names.end(), op.api) != names.end();
}
}  // namespace

namespace {

const std::vector<GpuProfile>& gpu_profiles() {
  // fp32 CUDA-core peaks (TF32 off) and HBM bandwidth, from the vendors' data sheets.
  static const std::vector<GpuProfile> profiles = {
      {"h20", 44e12, 4.0e12},   {"h100", 67e12, 3.35e12}, {"h200", 67e12, 4.8e12},
      {"a100", 19.5e12, 2.0e12}, {"l40s", 91.6e12, 0.864e12}, {"b200", 80e12, 8.0e12},
  };
  return profiles;
}

// Symbols every op environment has.
struct Syms {
  int d[5], r, numel, last, out_numel, out_last, s, spatial;
  Syms() {
    for (int i = 0; i < 5; ++i) d[i] = intern_symbol("d" + std::to_string(i));
    r = intern_symbol("r");
    numel = intern_symbol("numel");
    last = intern_symbol("last");
    out_numel = intern_symbol("out_numel");
    out_last = intern_symbol("out_last");
    s = intern_symbol("s");
    spatial = intern_symbol("spatial");
  }
};
const Syms& syms() {
  static const Syms s;
  return s;
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

void bind_shape(Env& env, const Shape& in) {
  const Syms& S = syms();
  int r = static_cast<int>(in.size());
  for (int i = 0; i < r && i < 5; ++i) env.set(S.d[i], in[static_cast<std::size_t>(i)]);
  env.set(S.r, r);
  int64_t n = numel_of(in);
  env.set(S.numel, n);
  env.set(S.last, r ? in.back() : 1);
  env.set(S.spatial, r >= 2 ? n / (in[0] * in[1]) : 1);
}

void bind_args(Env& env, const OpSpec& spec, const std::vector<ArgValue>& args) {
  for (std::size_t i = 0; i < args.size(); ++i)
    if (args[i].is_int) env.set(spec.args[i].sym, args[i].i);
}

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

std::string shape_literal(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  // Always a tuple: torch.randn and torch.randint both take one.
  return s.size() == 1 ? "(" + out + ",)" : "(" + out + ")";
}

ca::Json shape_json(const Shape& s) {
  ca::Json a = ca::Json::array();
  for (auto d : s) a.push_back(d);
  return a;
}

ca::Json distribution(const std::string& kind, int64_t high) {
  if (kind == "uniform") return ca::Json{{"kind", "uniform"}, {"low", 0.0}, {"high", 1.0}};
  if (kind == "randint") return ca::Json{{"kind", "randint"}, {"low", 0}, {"high", high}};
  if (kind == "sign") return ca::Json{{"kind", "derived"}, {"values", ca::Json::array({-1, 1})}};
  return ca::Json{{"kind", "normal"}, {"mean", 0.0}, {"std", 1.0}};
}

// Eager-time targets (ms) drawn per task; the batch is scaled toward one of them.
const std::vector<double> kTargetsMs = {2, 3, 4, 6, 8, 12, 16, 24, 32, 48};
// Past this batch a task is more data than work; it is redrawn instead.
constexpr int64_t kMaxBatch = 65536;

}  // namespace

const GpuProfile* find_gpu_profile(const std::string& name) {
  for (const auto& p : gpu_profiles())
    if (p.name == name) return &p;
  return nullptr;
}

std::string gpu_profile_names() {
  std::string out;
  for (const auto& p : gpu_profiles()) out += (out.empty() ? "" : "|") + p.name;
  return out;
}

std::string category_name(int c) { return c == kCategories - 1 ? "module" : std::to_string(c + 1); }

Mix parse_mix(const std::string& text) {
  Mix mix{};
  std::stringstream ss(text);
  std::string item;
  double total = 0;
  std::array<double, kCategories> w{};
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) throw ca::UsageError("--mix: expected K=WEIGHT items, got '" + item + "'");
    std::string key = item.substr(0, eq);
    int c = -1;
    for (int i = 0; i < kCategories; ++i)
      if (category_name(i) == key) c = i;
    if (c < 0) throw ca::UsageError("--mix: unknown category '" + key + "' (1..5 or module)");
    try {
      w[static_cast<std::size_t>(c)] = std::stod(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw ca::UsageError("--mix: bad weight in '" + item + "'");
    }
    if (w[static_cast<std::size_t>(c)] < 0) throw ca::UsageError("--mix: negative weight in '" + item + "'");
    total += w[static_cast<std::size_t>(c)];
  }
  if (total <= 0) throw ca::UsageError("--mix: weights sum to zero");
  uint32_t assigned = 0;
  for (int i = 0; i < kCategories; ++i) {
    mix[static_cast<std::size_t>(i)] = static_cast<uint32_t>(w[static_cast<std::size_t>(i)] / total * 10000 + 0.5);
    assigned += mix[static_cast<std::size_t>(i)];
  }
  // Rounding slack goes to the heaviest category so the weights sum to 10,000.
  auto heaviest = std::max_element(mix.begin(), mix.end());
  *heaviest = *heaviest + 10000 - assigned;
  return mix;
}

struct Generator::Built {
  int category = 0;
  Shape start;
  std::vector<OpInstance> chain;
  std::vector<Applied> steps;
  const ModuleSpec* module = nullptr;
  std::vector<int64_t> consts;  // module constants, in the spec's order
  std::vector<Shape> module_in, module_out;
  int64_t flops = 0, bytes = 0;
  double est_ms = 0;
};

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

int Generator::category_of(int64_t index) const {
  // A golden-ratio (Weyl) sequence instead of independent draws: every prefix of the output
  // follows the mix to within a fraction of a task, as a 2,000-task test can check at 2 points.
  uint64_t u = weyl_offset_ + static_cast<uint64_t>(index + 1) * 0x9E3779B97F4A7C15ull;
  unsigned __int128 scaled = static_cast<unsigned __int128>(u) * 10000;
  uint64_t bucket = static_cast<uint64_t>(scaled >> 64);  // in [0, 10000)
  uint64_t cum = 0;
  for (int c = 0; c < kCategories; ++c) {
    cum += opt_.mix[static_cast<std::size_t>(c)];
    if (bucket < cum) return c;
  }
  return 1;
}

bool Generator::apply(const OpInstance& op, const Shape& in, Applied& out) const {
  const OpSpec& spec = *op.spec;
  const Syms& S = syms();
  int r = static_cast<int>(in.size());
  if (std::find(spec.ranks.begin(), spec.ranks.end(), r) == spec.ranks.end()) return false;
  Env env;
  bind_shape(env, in);
  bind_args(env, spec, op.args);
  try {
    for (const auto& req : spec.requires_)
      if (!req.eval(env)) return false;
    Shape o;
    switch (spec.out.kind) {
      case OutRule::kSame: o = in; break;
      case OutRule::kScalar: break;
      case OutRule::kList:
        for (const auto& e : spec.out.dims) o.push_back(e.eval(env));
        break;
      case OutRule::kChannelsSpatial:
        o = in;
        if (r >= 2 && !spec.out.channels.empty()) o[1] = spec.out.channels.eval(env);
        if (!spec.out.spatial.empty())
          for (int i = 2; i < r; ++i) {
            Env e2 = env;
            e2.set(S.s, in[static_cast<std::size_t>(i)]);
            o[static_cast<std::size_t>(i)] = spec.out.spatial.eval(e2);
          }
        break;
      case OutRule::kReduce: {
        o = in;
        int64_t d = spec.out.dim.eval(env);
        if (d < 0) d += r;
        if (d < 0 || d >= r) return false;
        bool keep = !spec.out.keepdim.empty() && spec.out.keepdim.eval(env);
        if (keep) o[static_cast<std::size_t>(d)] = 1;
        else o.erase(o.begin() + d);
        break;
      }
      case OutRule::kSwap: {
        o = in;
        int64_t a = spec.out.a.eval(env), b = spec.out.b.eval(env);
        if (a < 0 || b < 0 || a >= r || b >= r) return false;
        std::swap(o[static_cast<std::size_t>(a)], o[static_cast<std::size_t>(b)]);
        break;
      }
      case OutRule::kLast:
        o = in;
        if (o.empty()) return false;
        o.back() = spec.out.last.eval(env);
        break;
    }
    if (spec.out.kind != OutRule::kScalar && o.empty()) return false;
    if (o.size() > 5) return false;
    for (auto d : o)
      if (d < 1) return false;
    std::vector<Shape> extras;
    for (const auto& x : spec.extras) {
      if (x.same_shape) {
        extras.push_back(in);
      } else {
        Shape s;
        for (const auto& e : x.shape) s.push_back(e.eval(env));
        for (auto d : s)
          if (d < 1) return false;
        extras.push_back(std::move(s));
      }
    }
    int64_t out_numel = numel_of(o);
    if (profile_->max_numel && (out_numel > profile_->max_numel || numel_of(in) > profile_->max_numel)) return false;
    env.set(S.out_numel, out_numel);
    env.set(S.out_last, o.empty() ? 1 : o.back());
    out.in = in;
    out.out = std::move(o);
    out.extras = std::move(extras);
    out.flops = spec.flops.eval(env);
    out.bytes = spec.bytes.eval(env);
  } catch (const EvalError&) {
    return false;
  }
  return true;
}

bool Generator::sample_op(const OpSpec& spec, const Shape& in, bool last, Rng& rng, OpInstance& inst,
                          Applied& applied) const {
  if (spec.terminal && !last) return false;
  Env env;
  bind_shape(env, in);
  for (int tries = 0; tries < 4; ++tries) {
    inst.spec = &spec;
    inst.args.assign(spec.args.size(), ArgValue{});
    Env e = env;
    bool ok = true;
    for (std::size_t i = 0; i < spec.args.size() && ok; ++i) {
      const ArgSpec& a = spec.args[i];
      ArgValue& v = inst.args[i];
      try {
        switch (a.kind) {
          case ArgSpec::kChoice:
            if (a.is_text()) {
              v.is_int = false;
              v.text = a.text_choices[rng.below(a.text_choices.size())];
            } else {
              v.i = a.int_choices[rng.below(a.int_choices.size())];
            }
            break;
          case ArgSpec::kRange: {
            int64_t lo = a.lo.eval(e), hi = a.hi.eval(e);
            if (hi < lo) ok = false;
            else v.i = rng.range(lo, hi);
            break;
          }
          case ArgSpec::kExpr: v.i = a.expr.eval(e); break;
          case ArgSpec::kSize: {
            const auto& list = profile_->lists.at(a.size_key);
            v.i = list[rng.below(list.size())];
            break;
          }
          case ArgSpec::kDivisorOf: {
            int64_t n = a.expr.eval(e), lo = a.min.eval(e), hi = a.max.eval(e);
            std::vector<int64_t> divs;
            for (int64_t d = std::max<int64_t>(lo, 1); d <= std::min(hi, n) && d <= 4096; ++d)
              if (n % d == 0) divs.push_back(d);
            if (divs.empty()) ok = false;
            else v.i = divs[rng.below(divs.size())];
            break;
          }
        }
      } catch (const EvalError&) {
        ok = false;
      }
      if (ok && v.is_int) e.set(a.sym, v.i);
    }
    if (ok && apply(inst, in, applied)) return true;
  }
  return false;
}

bool Generator::propagate(const std::vector<OpInstance>& chain, const Shape& start, std::vector<Applied>& steps) const {
  steps.resize(chain.size());
  Shape cur = start;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    if (!apply(chain[i], cur, steps[i])) return false;
    cur = steps[i].out;
  }
  return true;
}

double Generator::estimate_ms(int64_t flops, int64_t bytes, int n_ops) const {
  // Roofline with typical eager efficiencies (half of fp32 peak, 70% of bandwidth) and a launch
  // overhead per op; a ranking guess, not a measurement: the filter measures the real time.
  double compute_s = static_cast<double>(flops) / (gpu_->fp32_flops * 0.5);
  double memory_s = static_cast<double>(bytes) / (gpu_->bytes_per_s * 0.7);
  return (std::max(compute_s, memory_s) + 8e-6 * n_ops) * 1e3;
}

bool Generator::fits(const std::vector<Applied>& steps, double& est_ms) const {
  int64_t flops = 0, bytes = 0;
  double ms = 0;
  for (const auto& s : steps) {
    flops += s.flops;
    bytes += s.bytes;
    ms += estimate_ms(s.flops, s.bytes, 1);
    for (const auto& x : s.extras)
      if (profile_->max_numel && numel_of(x) > profile_->max_numel) return false;
  }
  if (profile_->max_flops && flops > profile_->max_flops) return false;
  est_ms = ms;
  return true;
}

bool Generator::build_chain(int k, uint64_t seed, Built& b) {
  Rng rng(seed);
  // The first op fixes the start rank; later ops are drawn among those taking the current rank.
  std::vector<const OpSpec*> firsts;
  std::vector<uint32_t> weights;
  for (const auto& op : cat_.ops) {
    bool usable = false;
    for (int r : op.ranks)
      for (auto* p : by_rank_[static_cast<std::size_t>(r)]) usable = usable || p == &op;
    if (!usable || (op.terminal && k > 1)) continue;
    firsts.push_back(&op);
    weights.push_back(op.weight);
  }
  if (firsts.empty()) return false;
  const OpSpec* first = firsts[rng.weighted(weights)];
  std::vector<int> start_ranks;
  for (int r : first->ranks)
    if (cat_.starts.count(r)) start_ranks.push_back(r);
  int rank = start_ranks[rng.below(start_ranks.size())];
  const StartLayout& layout = cat_.starts.at(rank);
  b.start.clear();
  for (const auto& key : layout.dims) {
    auto it = profile_->lists.find(key);
    if (it == profile_->lists.end()) throw ca::InputError(cat_.path + ": sizes." + opt_.sizes + " lacks '" + key + "'");
    b.start.push_back(it->second[rng.below(it->second.size())]);
  }
  b.chain.clear();
  b.steps.clear();
  Shape cur = b.start;
  for (int pos = 0; pos < k; ++pos) {
    bool last = pos == k - 1;
    OpInstance inst;
    Applied applied;
    bool placed = false;
    if (pos == 0) {
      placed = sample_op(*first, cur, last, rng, inst, applied);
    } else {
      int r = static_cast<int>(cur.size());
      if (r >= static_cast<int>(by_rank_.size())) return false;
      const auto& cands = by_rank_[static_cast<std::size_t>(r)];
      if (cands.empty()) return false;
      std::vector<uint32_t> w;
      w.reserve(cands.size());
      for (auto* c : cands) w.push_back((c->terminal && !last) ? 0 : c->weight);
      for (int tries = 0; tries < 24 && !placed; ++tries) {
        const OpSpec* spec = cands[rng.weighted(w)];
        // A chain of the same op twice in a row adds nothing a kernel writer must learn.
        if (!b.chain.empty() && b.chain.back().spec == spec) continue;
        placed = sample_op(*spec, cur, last, rng, inst, applied);
      }
    }
    if (!placed) return false;
    cur = applied.out;
    b.chain.push_back(std::move(inst));
    b.steps.push_back(std::move(applied));
  }
  if (opt_.sizes == "gpu") return size_for_gpu(b, rng);
  return fits(b.steps, b.est_ms);
}

bool Generator::size_for_gpu(Built& b, Rng& rng) {
  double target = kTargetsMs[rng.below(kTargetsMs.size())];
  target = std::min(std::max(target, opt_.min_ms * 1.5), opt_.max_ms / 1.5);
  double est = 0;
  if (!fits(b.steps, est)) return false;
  // Scale the batch dimension toward the target; every shape and the estimate follow it.
  for (int it = 0; it < 24; ++it) {
    Shape s = b.start;
    if (est < target / 1.41 && s[0] * 2 <= kMaxBatch) s[0] *= 2;
    else if (est > target * 1.41 && s[0] > 1) s[0] = std::max<int64_t>(1, s[0] / 2);
    else break;
    std::vector<Applied> steps;
    double e2 = 0;
    if (!propagate(b.chain, s, steps) || !fits(steps, e2)) break;
    b.start = s;
    b.steps = std::move(steps);
    est = e2;
  }
  b.est_ms = est;
  return est >= opt_.min_ms && est <= opt_.max_ms;
}

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

bool Generator::size_module(Built& b, double target) const {
  if (opt_.sizes != "gpu") return true;
  const ModuleSpec& m = *b.module;
  std::size_t batch = 0;
  for (; batch < m.constants.size() && m.constants[batch].name != "batch_size"; ++batch) {
  }
  if (batch < m.constants.size()) {
    for (int it = 0; it < 24; ++it) {
      auto c2 = b.consts;
      if (b.est_ms < target / 1.41 && c2[batch] * 2 <= kMaxBatch) c2[batch] *= 2;
      else if (b.est_ms > target * 1.41 && c2[batch] > 1) c2[batch] /= 2;
      else break;
      Built trial = b;
      if (!evaluate_module(m, c2, trial)) break;
      b = std::move(trial);
    }
  }
  return b.est_ms >= opt_.min_ms && b.est_ms <= opt_.max_ms;
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

namespace {

// Constructor parameters and module-level constants of one rendered Model.
struct Names {
  std::vector<std::pair<std::string, int64_t>> constants;
  std::vector<std::string> params;
  std::vector<int64_t> param_values;
  std::vector<std::string> used;  // attribute and input names

  const int64_t* constant(const std::string& n) const {
    for (const auto& [k, v] : constants)
      if (k == n) return &v;
    return nullptr;
  }
  std::string claim_param(const std::string& base, int64_t value) {
    for (int suffix = 1;; ++suffix) {
      std::string n = suffix == 1 ? base : base + "_" + std::to_string(suffix);
      auto it = std::find(params.begin(), params.end(), n);
      if (it != params.end()) {
        if (param_values[static_cast<std::size_t>(it - params.begin())] == value) return n;
        continue;
      }
      const int64_t* c = constant(n);
      if (c && *c != value) continue;
      if (!c && std::find(used.begin(), used.end(), n) != used.end()) continue;
      if (!c) constants.emplace_back(n, value);
      params.push_back(n);
      param_values.push_back(value);
      return n;
    }
  }
  std::string unique(const std::string& base) {
    for (int suffix = 1;; ++suffix) {
      std::string n = suffix == 1 ? base : base + "_" + std::to_string(suffix);
      if (std::find(used.begin(), used.end(), n) == used.end() && !constant(n) &&
          std::find(params.begin(), params.end(), n) == params.end()) {
        used.push_back(n);
        return n;
      }
    }
  }
};

struct RenderScope {
  const OpSpec* spec;
  const std::vector<ArgValue>* args;
  const Shape* in;
  const std::string* attr;
  const std::vector<std::string>* extra_names;
  const Shape* extra_shape;  // for make templates
};

std::string render(const Template& t, const RenderScope& sc, Names* names) {
  std::string out;
  for (const auto& p : t.pieces) {
    if (p.literal) {
      out += p.text;
      continue;
    }
    const std::string& v = p.text;
    bool have_int = false, is_dim = false;
    int64_t iv = 0;
    std::string text;
    if (v == "v") {
      out += *sc.attr;
      continue;
    }
    if (v == "x") {
      out += "x";
      continue;
    }
    if (v == "shape") {
      std::string lit = shape_literal(*sc.extra_shape);
      out += lit;
      continue;
    }
    if (v == "bshape") {
      out += std::to_string(sc.in->size() >= 2 ? (*sc.in)[1] : 1);
      for (std::size_t i = 2; i < sc.in->size(); ++i) out += ", 1";
      if (sc.in->size() <= 2) out += ",";
      continue;
    }
    if (v == "last") {
      have_int = is_dim = true;
      iv = sc.in->empty() ? 1 : sc.in->back();
    } else if (v.size() == 2 && v[0] == 'd' && std::isdigit(static_cast<unsigned char>(v[1]))) {
      std::size_t i = static_cast<std::size_t>(v[1] - '0');
      if (i >= sc.in->size()) throw ca::InternalError("template of " + sc.spec->name + " uses " + v + " on a rank-" +
                                                      std::to_string(sc.in->size()) + " input");
      have_int = is_dim = true;
      iv = (*sc.in)[i];
    } else {
      bool found = false;
      for (std::size_t i = 0; i < sc.spec->args.size(); ++i)
        if (sc.spec->args[i].name == v) {
          const ArgValue& a = (*sc.args)[i];
          have_int = a.is_int;
          iv = a.i;
          text = a.text;
          found = true;
        }
      for (std::size_t i = 0; !found && i < sc.spec->extras.size(); ++i)
        if (sc.spec->extras[i].name == v) {
          text = (*sc.extra_names)[i];
          found = true;
        }
      if (!found) throw ca::InternalError("template of " + sc.spec->name + " uses unknown '{" + v + "}'");
    }
    if (p.filter == "bool") {
      out += (have_int ? iv != 0 : text == "True") ? "True" : "False";
    } else if (have_int && names && (!p.param.empty() || !is_dim)) {
      out += names->claim_param(p.param.empty() ? v : p.param, iv);
    } else if (have_int) {
      out += std::to_string(iv);
    } else {
      out += text;
    }
  }
  return out;
}

const char* kHeader = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n";

}  // namespace

ca::Json Generator::render_chain(const Built& b, int64_t index, int attempt) const {
  Names names;
  const StartLayout& layout = cat_.starts.at(static_cast<int>(b.start.size()));
  for (std::size_t i = 0; i < b.start.size(); ++i) names.constants.emplace_back(layout.names[i], b.start[i]);
  for (const char* reserved : {"x", "torch", "nn", "F", "Model", "self", "get_inputs", "get_init_inputs"})
    names.used.push_back(reserved);

  std::string init_body, forward_body, extra_inputs_code;
  std::vector<std::string> forward_params = {"x"};
  ca::Json inputs = ca::Json::array();
  inputs.push_back(ca::Json{{"name", "x"}, {"shape", shape_json(b.start)}, {"dtype", "F32"},
                              {"distribution", distribution("normal", 0)}});
  ca::Json ops = ca::Json::array();
  std::string task_name;
  for (std::size_t k = 0; k < b.chain.size(); ++k) {
    const OpInstance& inst = b.chain[k];
    const OpSpec& spec = *inst.spec;
    const Applied& st = b.steps[k];
    ops.push_back(spec.api);
    task_name += (k ? "_" : "") + spec.name;
    std::string attr = spec.init.pieces.empty() ? "" : names.unique(spec.attr);
    std::vector<std::string> extra_names;
    for (std::size_t e = 0; e < spec.extras.size(); ++e) {
      std::string n = names.unique(spec.extras[e].name);
      extra_names.push_back(n);
      forward_params.push_back(n);
    }
    RenderScope sc{&spec, &inst.args, &st.in, &attr, &extra_names, nullptr};
    if (!attr.empty()) init_body += "        self." + attr + " = " + render(spec.init, sc, &names) + "\n";
    forward_body += "        x = " + render(spec.forward, sc, nullptr) + "\n";
    for (std::size_t e = 0; e < spec.extras.size(); ++e) {
      const ExtraInput& x = spec.extras[e];
      RenderScope xs = sc;
      xs.extra_shape = &st.extras[e];
      extra_inputs_code += ", " + render(x.make, xs, nullptr);
      int64_t high = 0;
      if (!x.dist_high.empty()) {
        Env env;
        bind_shape(env, st.in);
        bind_args(env, spec, inst.args);
        int64_t h = 0;
        if (x.dist_high.try_eval(env, h)) high = h;
      }
      inputs.push_back(ca::Json{{"name", extra_names[e]}, {"shape", shape_json(st.extras[e])}, {"dtype", x.dtype},
                                  {"distribution", distribution(x.dist, high)}});
    }
  }
  std::string code = kHeader;
  code += "class Model(nn.Module):\n";
  code += "    \"\"\"" + task_name + " (ops-synth, " + std::to_string(b.chain.size()) + " op" +
          (b.chain.size() > 1 ? "s" : "") + ")\"\"\"\n\n";
  code += "    def __init__(self";
  for (const auto& p : names.params) code += ", " + p;
  code += "):\n        super(Model, self).__init__()\n" + init_body + "\n";
  code += "    def forward(self";
  for (const auto& p : forward_params) code += ", " + p;
  code += "):\n" + forward_body + "        return x\n\n\n";
  for (const auto& [k, v] : names.constants) code += k + " = " + std::to_string(v) + "\n";
  code += "\n\ndef get_inputs():\n    return [torch.randn(";
  for (std::size_t i = 0; i < b.start.size(); ++i) code += (i ? ", " : "") + layout.names[i];
  code += ")" + extra_inputs_code + "]\n\n\ndef get_init_inputs():\n    return [";
  for (std::size_t i = 0; i < names.params.size(); ++i) code += (i ? ", " : "") + names.params[i];
  code += "]\n";

  const Applied& last = b.steps.back();
  ca::Json outputs = ca::Json::array();
  outputs.push_back(ca::Json{{"name", "output"}, {"shape", shape_json(last.out)}, {"dtype", b.chain.back().spec->out_dtype}});
  ca::Json init_inputs = ca::Json::array();
  for (auto v : names.param_values) init_inputs.push_back(v);
  int64_t flops = 0, bytes = 0;
  for (const auto& s : b.steps) {
    flops += s.flops;
    bytes += s.bytes;
  }
  ca::Json key{{"code", code}, {"init_inputs", init_inputs}, {"inputs", inputs}};
  ca::Json rec;
  rec["schema"] = "cuda-agent/task/v1";
  rec["task_id"] = ca::task_id_for(key);
  rec["name"] = task_name;
  rec["ops"] = std::move(ops);
  rec["data_source"] = "torch#" + std::to_string(b.chain.size());
  rec["code"] = std::move(code);
  rec["inputs"] = std::move(inputs);
  rec["outputs"] = std::move(outputs);
  rec["init_inputs"] = std::move(init_inputs);
  rec["seed"] = opt_.seed;
  rec["estimates"] = ca::Json{{"flops", flops}, {"bytes", bytes}, {"eager_ms", b.est_ms},
                                {"gpu_profile", gpu_->name}};
  rec["synth"] = ca::Json{{"index", index}, {"attempt", attempt}, {"category", category_name(b.category)},
                            {"sizes", opt_.sizes}, {"catalog_version", cat_.version}};
  return rec;
}

ca::Json Generator::render_module(const Built& b, int64_t index, int attempt) const {
  const ModuleSpec& m = *b.module;
  std::string code = m.source;
  for (std::size_t i = 0; i < m.constants.size(); ++i) {
    std::string key = "\n" + m.constants[i].name + " = ";
    auto pos = code.find(key);
    auto end = code.find('\n', pos + key.size());
    code.replace(pos + key.size(), end - pos - key.size(), std::to_string(b.consts[i]));
  }
  auto value_of = [&](const std::string& name) -> int64_t {
    for (std::size_t i = 0; i < m.constants.size(); ++i)
      if (m.constants[i].name == name) return b.consts[i];
    throw ca::InternalError("module " + m.name + ": init input '" + name + "' is not a constant");
  };
  ca::Json inputs = ca::Json::array(), outputs = ca::Json::array(), init_inputs = ca::Json::array();
  for (std::size_t i = 0; i < m.inputs.size(); ++i)
    inputs.push_back(ca::Json{{"name", m.inputs[i].name}, {"shape", shape_json(b.module_in[i])},
                                {"dtype", m.inputs[i].dtype}, {"distribution", distribution("normal", 0)}});
  for (std::size_t i = 0; i < m.outputs.size(); ++i)
    outputs.push_back(ca::Json{{"name", m.outputs[i].name.empty() ? "output" : m.outputs[i].name},
                                 {"shape", shape_json(b.module_out[i])}, {"dtype", m.outputs[i].dtype}});
  for (const auto& n : m.init_inputs) init_inputs.push_back(value_of(n));
  ca::Json key{{"code", code}, {"init_inputs", init_inputs}, {"inputs", inputs}};
  ca::Json rec;
  rec["schema"] = "cuda-agent/task/v1";
  rec["task_id"] = ca::task_id_for(key);
  rec["name"] = m.name;
  rec["ops"] = ca::Json::array({m.api});
  rec["data_source"] = "transformers#1";
  rec["code"] = std::move(code);
  rec["inputs"] = std::move(inputs);
  rec["outputs"] = std::move(outputs);
  rec["init_inputs"] = std::move(init_inputs);
  rec["seed"] = opt_.seed;
  rec["estimates"] = ca::Json{{"flops", b.flops}, {"bytes", b.bytes}, {"eager_ms", b.est_ms},
                                {"gpu_profile", gpu_->name}};
  rec["synth"] = ca::Json{{"index", index}, {"attempt", attempt}, {"category", "module"},
                            {"sizes", opt_.sizes}, {"catalog_version", cat_.version}};
  return rec;
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
