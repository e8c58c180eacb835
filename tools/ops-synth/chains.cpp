// Drawing an op chain: each op's shape rule applied to its input, arguments sampled until the op
// fits, and chains of k ops whose links are shape-compatible.
#include <algorithm>

#include "libcommon/errors.hpp"
#include "tools/ops-synth/generate.hpp"
#include "tools/ops-synth/generate_detail.hpp"
#include "tools/ops-synth/rng.hpp"

namespace ca::ops_synth {

using detail::bind_args;
using detail::bind_shape;
using detail::numel_of;

namespace {

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

// The output shape an op's rule gives for input `in` (false when it does not fit: a dimension out
// of range, below 1, or a rank over 5). Throws EvalError as the rule's expressions do.
bool out_shape(const OpSpec& spec, const Shape& in, const Env& env, Shape& o) {
  const Syms& S = syms();
  int r = static_cast<int>(in.size());
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
  return true;
}

}  // namespace

namespace detail {

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

}  // namespace detail

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
    if (!out_shape(spec, in, env, o)) return false;
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

}  // namespace ca::ops_synth
