// Output comparison.
#include "libcommon/bundle/compare.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/dtype.hpp"
#include "libcommon/errors.hpp"

namespace ca::bundle {

CalibrationRule calibration_rule(const std::string& precision) {
  // compare.hpp says why these numbers; numerics.py's CALIBRATE_DEFAULTS repeats them for clients
  // that send none (kernel-check sends these with every request).
  // The floor is fp32's for every claim: a claim below fp32 earns K times what its reference loses
  // against fp32's, and nothing else (claim_term).
  constexpr double floor = 5e-6, floor_min = 3e-6;
  if (precision == "fp32") return {"fp32", 8, floor, floor_min};
  if (precision == "tf32") return {"tf32", 4, floor, floor_min};
  if (precision == "fp16") return {"fp16", 4, floor, floor_min};
  if (precision == "bf16") return {"bf16", 4, floor, floor_min};
  if (precision == "int8" || precision == "fp8") return {"bf16", 16, floor, floor_min};
  throw ca::InputError("compare: no calibration rule for precision '" + precision +
                       "' (fp32, tf32, fp16, bf16, int8, fp8)");
}

double claim_term(double fp32_err, double claim_err, double k) {
  if (!(fp32_err < INFINITY) || !(claim_err < INFINITY)) return INFINITY;
  return calibration_rule("fp32").k * fp32_err + k * std::max(0.0, claim_err - fp32_err);
}

static bool is_float_dtype(const std::string& dtype) {
  const ca::DtypeInfo* info = ca::dtype_info(dtype);
  if (!info) throw ca::InputError("compare: unknown dtype '" + dtype + "'");
  return info->is_float;
}

Tolerance Tolerance::for_dtype(const std::string& mode, const std::string& dtype, double atol_o, double rtol_o) {
  Tolerance t;
  bool is_int = !is_float_dtype(dtype);
  if (is_int) t.atol = t.rtol = 0;
  else if (mode == "strict" && (dtype == "F32" || dtype == "F64")) {
    t.atol = t.rtol = 1e-4;
    t.rel_norm = 1e-3;
  }
  t.mode = is_int ? "exact" : mode == "strict" ? "strict" : "published";
  if (atol_o >= 0) t.atol = atol_o;
  if (rtol_o >= 0) t.rtol = rtol_o;
  return t;
}

Tolerances Tolerances::by_mode(const std::string& mode, double atol_o, double rtol_o) {
  Tolerances t;
  if (mode == "published" || mode == "default") t.mode_ = "published";
  else if (mode == "strict") t.mode_ = "strict";
  else if (mode == "calibrated") {
    t.mode_ = "calibrated";
    t.calibration_error_ = "no calibration given to the comparison";
  } else
    throw ca::InputError("compare: tolerance mode '" + mode + "' (calibrated, published or strict)");
  t.atol_ = atol_o;
  t.rtol_ = rtol_o;
  return t;
}

// A measured error of the calibration: a number >= 0, or null / absent (infinite: the precision
// could not compute the output).
static double calibration_error_of(const ca::Json& entry, const std::string& name, const char* key) {
  if (!entry.contains(key) || entry[key].is_null()) return INFINITY;
  if (!entry[key].is_number() || entry[key].get<double>() < 0 || std::isnan(entry[key].get<double>()))
    throw ca::InputError("compare: calibration of " + name + ": '" + key + "' is not a number >= 0");
  return entry[key].get<double>();
}

// The part of the output's norm the inputs move (the worker's load measures it on two plain draws):
// a number in [0, 1]; absent (a worker or record from before it) is 1, the whole norm.
static double varying_fraction_of(const ca::Json& entry, const std::string& name) {
  if (!entry.contains("varying_fraction")) return 1.0;
  const ca::Json& v = entry["varying_fraction"];
  if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() <= 1))
    throw ca::InputError("compare: calibration of " + name + ": 'varying_fraction' is not a number in [0, 1]");
  return v.get<double>();
}

// The reference's largest absolute error against float64: a number >= 0; absent (a worker or record
// from before it) or null is 0, no slack.
static double max_abs_error_of(const ca::Json& entry, const std::string& name, const char* key) {
  if (!entry.contains(key) || entry[key].is_null()) return 0;
  const ca::Json& v = entry[key];
  if (!v.is_number() || !(v.get<double>() >= 0) || !std::isfinite(v.get<double>()))
    throw ca::InputError("compare: calibration of " + name + ": '" + key + "' is not a finite number >= 0");
  return v.get<double>();
}

// Elements the reference missed the elementwise gate on against float64: an integer >= 0; absent
// (a worker or record from before it) is 0, no allowance.
static int64_t misses_of(const ca::Json& entry, const std::string& name, const char* key) {
  if (!entry.contains(key)) return 0;
  const ca::Json& v = entry[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw ca::InputError("compare: calibration of " + name + ": '" + key + "' is not an integer >= 0");
  return v.get<int64_t>();
}

Tolerances Tolerances::calibrated(const std::string& precision, const ca::Json& calibration,
                                  const std::string& calibration_error, double atol_o, double rtol_o) {
  const CalibrationRule rule = calibration_rule(precision);
  Tolerances t;
  t.mode_ = "calibrated";
  t.precision_ = precision;
  t.atol_ = atol_o;
  t.rtol_ = rtol_o;
  t.calibration_error_ = calibration_error;
  if (calibration.is_null()) {
    if (t.calibration_error_.empty()) t.calibration_error_ = "the reference came without a calibration";
    return t;
  }
  if (!calibration.is_object()) throw ca::InputError("compare: a calibration is an object of outputs");
  for (const auto& [name, entry] : calibration.items()) {
    if (!entry.is_object()) throw ca::InputError("compare: calibration of " + name + " is not an object");
    const ca::Json& of = entry.contains("precision") ? entry["precision"] : ca::Json();
    if (of != precision)
      throw ca::InputError("compare: calibration of " + name + " is for precision " + of.dump() + ", the claim is " + precision);
    Tolerance tol;
    tol.mode = "calibrated";
    tol.precision = precision;
    tol.ref_err_rel_l2 = calibration_error_of(entry, name, "ref_err_rel_l2");
    tol.fp32_err_rel_l2 = calibration_error_of(entry, name, "fp32_err_rel_l2");
    tol.varying_fraction = varying_fraction_of(entry, name);
    tol.ref_elementwise_misses =
        std::max(misses_of(entry, name, "ref_elementwise_misses"), misses_of(entry, name, "fp32_elementwise_misses"));
    // Each allowance is fp32's plus K times what the claim's reference loses beyond fp32's (claim_term):
    // a claim where that reference is no worse than fp32's (autocast leaves the task in fp32) earns nothing.
    // (The count capped here only so that a hostile one cannot overflow; judge_output caps it at a fraction of the output.)
    tol.allowed_misses = static_cast<int64_t>(std::min(
        claim_term(double(misses_of(entry, name, "fp32_elementwise_misses")),
                   double(misses_of(entry, name, "ref_elementwise_misses")), rule.k),
        1e18));
    tol.elementwise_slack = claim_term(max_abs_error_of(entry, name, "fp32_err_max_abs"),
                                       max_abs_error_of(entry, name, "ref_err_max_abs"), rule.k);
    const double bound = claim_term(tol.fp32_err_rel_l2, tol.ref_err_rel_l2, rule.k) +
                         std::max(rule.floor * tol.varying_fraction, rule.floor_min);
    tol.rel_norm = std::min(bound, kPublishedRelL2);  // never looser than published; inf -> published
    t.calibrated_[name] = tol;
  }
  return t;
}

std::string Tolerances::fill_calibration(ca::Json& calibration, std::string& error, const ca::Json& fallback) {
  if (!fallback.is_object()) return "";
  if (!calibration.is_object()) calibration = ca::Json::object();
  std::string note;
  for (const auto& [name, entry] : fallback.items())
    if (!calibration.contains(name)) {
      calibration[name] = entry;
      note = "this call's calibration failed" + (error.empty() ? std::string() : " (" + error + ")") + ": " + name +
             " bounded by the warm call's";
    }
  if (!note.empty()) error.clear();
  return note;
}

Tolerance Tolerances::for_output(const std::string& name, const std::string& dtype) const {
  if (mode_ != "calibrated") return Tolerance::for_dtype(mode_, dtype, atol_, rtol_);
  // The elementwise gate is the published one, with the calibrated slack and allowance; the norm bound is the calibrated one.
  Tolerance t = Tolerance::for_dtype("published", dtype, atol_, rtol_);
  if (!is_float_dtype(dtype)) return t;  // exact: nothing to calibrate
  t.mode = "calibrated";
  t.precision = precision_;
  auto it = calibrated_.find(name);
  if (it != calibrated_.end()) {
    t.rel_norm = it->second.rel_norm;
    t.ref_err_rel_l2 = it->second.ref_err_rel_l2;
    t.fp32_err_rel_l2 = it->second.fp32_err_rel_l2;
    t.varying_fraction = it->second.varying_fraction;
    t.ref_elementwise_misses = it->second.ref_elementwise_misses;
    t.allowed_misses = it->second.allowed_misses;
    t.elementwise_slack = it->second.elementwise_slack;
  } else {
    t.mode = "published";
    t.fallback = calibration_error_.empty() ? "no calibration for " + name : calibration_error_;
  }
  return t;
}

ca::Json CompareResult::to_json() const {
  ca::Json j{{"max_abs_err", max_abs_err},
             {"max_rel_err", max_rel_err},
             {"mismatch_fraction", mismatch_fraction},
             {"rel_l2_err", rel_l2_err}};
  ca::Json tol{{"mode", mode}};
  if (!precision.empty()) tol["precision"] = precision;
  // The output closest to its bound speaks for the comparison.
  const std::pair<const std::string, OutputJudgement>* worst = nullptr;
  auto ratio = [](const OutputJudgement& o) { return o.bound_rel_l2 > 0 ? o.measured_rel_l2 / o.bound_rel_l2 : INFINITY; };
  for (const auto& kv : outputs)
    if (!worst || ratio(kv.second) > ratio(worst->second)) worst = &kv;
  if (worst) {
    tol["output"] = worst->first;
    tol["bound_rel_l2"] = worst->second.bound_rel_l2;
    tol["measured_rel_l2"] = std::isfinite(worst->second.measured_rel_l2) ? worst->second.measured_rel_l2 : 1e308;
  }
  std::string fallback;
  for (const auto& [name, o] : outputs)
    if (!o.fallback.empty() && fallback.empty()) fallback = name + " judged by the published bound: " + o.fallback;
  if (!fallback.empty()) tol["fallback"] = fallback;
  // Outputs the reference itself cannot judge elementwise on every element: how many the candidate
  // missed, of how many allowed (compare.hpp's kMaxElementwiseMissFraction).
  for (const auto& [name, o] : outputs)
    if (o.allowed_misses > 0) tol["elementwise_allowance"][name] = {{"misses", o.misses}, {"allowed", o.allowed_misses}};
  for (const auto& [name, o] : outputs)
    if (o.elementwise_slack > 0)
      tol["elementwise_slack"][name] = {{"slack", o.elementwise_slack}, {"misses", o.soft_misses}, {"allowed", o.soft_allowed}};
  if (outputs.size() > 1) {
    ca::Json per = ca::Json::object();
    for (const auto& [name, o] : outputs)
      per[name] = {{"mode", o.mode},
                   {"bound_rel_l2", o.bound_rel_l2},
                   {"measured_rel_l2", std::isfinite(o.measured_rel_l2) ? o.measured_rel_l2 : 1e308}};
    tol["outputs"] = per;
  }
  j["tolerance"] = tol;
  return j;
}

static std::string index_text(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

static std::string num(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

namespace {

// What one output's comparison comes to, wherever its bytes were.
struct OutputStats {
  int64_t n = 0, bad = 0;                // bad: past atol + slack + rtol |ref|
  int64_t first_bad = -1;              // lowest failing flat index
  double first_got = 0, first_want = 0;  // the values there
  int64_t soft = 0, first_soft = -1;     // soft: past the published atol + rtol |ref| (bad ones included)
  double soft_got = 0, soft_want = 0;
  double max_abs = 0, max_rel = 0;
  double diff2 = 0, ref2 = 0;          // over finite reference elements, for the relative error norm
};

// The element rule, shared in spirit with the device kernel's (kCompareSource): keep them equal.
OutputStats host_stats(const ca::Tensor& g, const ca::Tensor& w, const Tolerance& tol) {
  OutputStats st;
  // In chunks: outputs reach gigabytes (KernelBench level 1), and a whole copy as doubles would not fit.
  const size_t n = static_cast<size_t>(w.numel());
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<double> gv(std::min(n, kChunk)), wv(std::min(n, kChunk));
  st.n = static_cast<int64_t>(n);
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t m = std::min(kChunk, n - base);
    ca::to_doubles(g, base, m, gv.data());
    ca::to_doubles(w, base, m, wv.data());
    for (size_t j = 0; j < m; ++j) {
      double a = gv[j], b = wv[j];
      if (std::isfinite(b)) {
        const double d = std::isfinite(a) ? a - b : INFINITY;
        st.diff2 += d * d;
        st.ref2 += b * b;
      }
      bool fail, soft;
      double abs_err, rel_err;
      if (std::isnan(b) || std::isinf(b)) {
        fail = soft = !(std::isnan(b) ? std::isnan(a) : a == b);
        abs_err = rel_err = fail ? INFINITY : 0;
      } else if (!std::isfinite(a)) {
        fail = soft = true;
        abs_err = rel_err = INFINITY;
      } else {
        abs_err = std::fabs(a - b);
        rel_err = abs_err / std::max(std::fabs(b), 1e-12);
        soft = abs_err > tol.atol + tol.rtol * std::fabs(b);
        fail = abs_err > tol.atol + tol.elementwise_slack + tol.rtol * std::fabs(b);
      }
      if (soft) {
        if (st.soft == 0) {
          st.first_soft = static_cast<int64_t>(base + j);
          st.soft_got = a;
          st.soft_want = b;
        }
        ++st.soft;
      }
      st.max_abs = std::max(st.max_abs, abs_err);
      if (!std::isnan(b)) st.max_rel = std::max(st.max_rel, std::isfinite(rel_err) ? rel_err : INFINITY);
      if (fail) {
        if (st.bad == 0) {
          st.first_bad = static_cast<int64_t>(base + j);
          st.first_got = a;
          st.first_want = b;
        }
        ++st.bad;
      }
    }
  }
  return st;
}

// Folds one output's stats into the result: the first failure's reason, the norm bound.
void judge_output(const std::string& name, const std::vector<int64_t>& shape, const OutputStats& st, const Tolerance& tol,
                  CompareResult& r) {
  r.max_abs_err = std::max(r.max_abs_err, st.max_abs);
  r.max_rel_err = std::max(r.max_rel_err, st.max_rel);
  // Calibrated: the elements the reference itself cannot judge to the published tolerance (compare.hpp).
  const int64_t allowed =
      std::min(tol.allowed_misses, static_cast<int64_t>(kMaxElementwiseMissFraction * static_cast<double>(st.n)));
  // And the slack: misses of the published gate within atol + slack, on at most kMaxSoftMissFraction more
  // (at least one: an output of fewer than 100 elements has a near-zero element as often as any).
  const int64_t soft_allowed =
      allowed + (tol.elementwise_slack > 0
                     ? std::max<int64_t>(1, static_cast<int64_t>(kMaxSoftMissFraction * static_cast<double>(st.n)))
                     : 0);
  // calibrated only (a slack or an allowance): how claim_term made it from the reference's `what`
  auto k_text = [&](const std::string& what) {
    const CalibrationRule rule = calibration_rule(tol.precision);
    if (tol.precision == "fp32") return num(rule.k) + " x the reference's " + what;
    return num(calibration_rule("fp32").k) + " x fp32's " + what + " + " + num(rule.k) + " x what the " +
           rule.reference_precision + " reference's exceeds it";
  };
  if (st.bad > allowed && r.ok) {
    r.ok = false;
    const double a = st.first_got, b = st.first_want;
    std::string got_text = std::isnan(a) ? "nan" : num(a);
    r.reason = name + index_text(st.first_bad, shape) + ": expected " + num(b) + ", got " + got_text + " (atol " +
               (tol.elementwise_slack > 0 ? num(tol.atol) + " + " + num(tol.elementwise_slack) + " (" +
                                                k_text("largest error against float64") + ")"
                                          : num(tol.atol)) +
               ", rtol " + num(tol.rtol) + ")";
    if (allowed > 0)
      r.reason += "; " + std::to_string(st.bad) + " of " + std::to_string(st.n) + " elements of " + name +
                  " miss it, more than the " + std::to_string(allowed) + " allowed (" +
                  k_text("count of elements missed against float64") + ")";
  } else if (st.soft > soft_allowed && r.ok) {
    r.ok = false;
    const double a = st.soft_got, b = st.soft_want;
    r.reason = name + index_text(st.first_soft, shape) + ": expected " + num(b) + ", got " + num(a) + " (atol " +
               num(tol.atol) + ", rtol " + num(tol.rtol) + "); " + std::to_string(st.soft) + " of " + std::to_string(st.n) +
               " elements of " + name + " miss it, more than the " + std::to_string(soft_allowed) +
               " allowed within atol " + num(tol.atol) + " + " + num(tol.elementwise_slack) + " (" +
               k_text("largest error against float64") + "; at most " + num(kMaxSoftMissFraction) +
               " of the output)";
  }
  if (st.ref2 > 0) {
    const double rel = std::sqrt(st.diff2 / st.ref2);
    r.rel_l2_err = std::max(r.rel_l2_err, std::isfinite(rel) ? rel : INFINITY);
    if (tol.mode != "exact")
      r.outputs[name] = OutputJudgement{tol.mode, tol.rel_norm, std::isfinite(rel) ? rel : INFINITY, tol.fallback,
                                        st.bad, allowed, tol.elementwise_slack, st.soft, soft_allowed};
    if (rel > tol.rel_norm && r.ok) {
      r.ok = false;
      if (tol.mode == "calibrated") {
        const CalibrationRule rule = calibration_rule(tol.precision);
        r.reason = name + ": relative error norm ||out - ref|| / ||ref|| = " + num(rel) + " is over the calibrated bound " +
                   num(tol.rel_norm) + " for " + tol.precision + " (" +
                   (tol.precision == "fp32"
                        ? num(rule.k) + " x the reference's error against float64 " +
                              num(std::max(tol.ref_err_rel_l2, tol.fp32_err_rel_l2))
                        : num(calibration_rule("fp32").k) + " x fp32's error against float64 " + num(tol.fp32_err_rel_l2) +
                              " + " + num(rule.k) + " x what the " + rule.reference_precision + " reference's (" +
                              num(tol.ref_err_rel_l2) + ") exceeds it") +
                   " + " +
                   (tol.varying_fraction < 1 ? "max(" + num(rule.floor) + " x " + num(tol.varying_fraction) +
                                                   " (the part of the output's norm the inputs move), " + num(rule.floor_min) + ")"
                                             : "max(" + num(rule.floor) + ", " + num(rule.floor_min) + ")") +
                   "): a record read as " + tol.precision + " may lose only what " + rule.reference_precision +
                   " loses on this task (half-precision storage, a partial or sampled reduction, an approximation?)";
      } else {
        r.reason = name + ": relative error norm ||out - ref|| / ||ref|| = " + num(rel) + " is over " + num(tol.rel_norm) +
                   " (elementwise within atol " + num(tol.atol) + ", but the output as a whole is not the reference's: "
                   "a zero or constant output where the reference is small?)";
      }
    }
  }
}

// Walks the reference's outputs, asking `stats_of` for each one present in `got` with the same
// shape and dtype; the common frame of both comparisons.
template <typename Got, typename Want, typename StatsOf>
CompareResult compare_with(const Got& got, const Want& want, const Tolerances& tolerances, StatsOf stats_of) {
  CompareResult r;
  r.mode = tolerances.mode();
  r.precision = tolerances.precision();
  int64_t total = 0, bad = 0;
  for (const auto& [name, w] : want) {
    if (name.rfind("outputs.", 0) != 0) continue;
    auto it = got.find(name);
    if (it == got.end()) {
      r.ok = false;
      if (r.reason.empty()) r.reason = name + " missing from the candidate's outputs";
      continue;
    }
    if (it->second.shape != w.shape || it->second.dtype != w.dtype) {
      r.ok = false;
      if (r.reason.empty()) r.reason = name + ": shape/dtype differ from the reference";
      continue;
    }
    Tolerance tol = tolerances.for_output(name, w.dtype);
    OutputStats st = stats_of(it->second, w, tol);
    total += st.n;
    bad += st.soft;
    judge_output(name, w.shape, st, tol, r);
  }
  r.mismatch_fraction = total ? static_cast<double>(bad) / static_cast<double>(total) : 0;
  if (!r.ok && bad > 1) r.reason += "; " + std::to_string(bad) + " of " + std::to_string(total) + " elements differ";
  // JSON has no Infinity: cap for the record.
  if (!std::isfinite(r.max_abs_err)) r.max_abs_err = 1e308;
  if (!std::isfinite(r.max_rel_err)) r.max_rel_err = 1e308;
  if (!std::isfinite(r.rel_l2_err)) r.rel_l2_err = 1e308;
  return r;
}

// The device kernel: the element rule of host_stats, one pass, warp-reduced, atomics per warp.
// Non-negative doubles order as their bit patterns, so the maxima are integer atomicMax.
const char* kCompareSource = R"(
struct CaStats { double diff2, ref2; unsigned long long max_abs, max_rel, bad, first_bad, soft, first_soft; };
__device__ __forceinline__ bool ca_nan(double x) {
  unsigned long long u = __double_as_longlong(x);
  return ((u >> 52) & 0x7ff) == 0x7ff && (u & 0xfffffffffffffull) != 0;
}
__device__ __forceinline__ bool ca_finite(double x) { return ((__double_as_longlong(x) >> 52) & 0x7ff) != 0x7ff; }
__device__ __forceinline__ double ca_load(int kind, const void* p, unsigned long long i) {
  const double inf = __longlong_as_double(0x7ff0000000000000ll), nan = __longlong_as_double(0x7ff8000000000000ll);
  switch (kind) {
    case 0: return ((const double*)p)[i];
    case 1: return ((const float*)p)[i];
    case 2: {  // F16
      unsigned h = ((const unsigned short*)p)[i], s = (h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
      if (e == 0) { float v = (float)m * 5.9604644775390625e-08f; return s ? -v : v; }
      if (e == 31) return __uint_as_float(s | 0x7f800000u | (m << 13));
      return __uint_as_float(s | ((e + 112) << 23) | (m << 13));
    }
    case 3: return __uint_as_float(((unsigned)((const unsigned short*)p)[i]) << 16);  // BF16
    case 4: return (double)((const long long*)p)[i];
    case 5: return (double)((const int*)p)[i];
    case 6: return (double)((const short*)p)[i];
    case 7: return (double)((const signed char*)p)[i];
    case 8: return (double)((const unsigned char*)p)[i];
    case 9: return ((const unsigned char*)p)[i] ? 1.0 : 0.0;  // BOOL
    case 10: {  // F8_E4M3 (fn: no infinities, S.1111.111 is NaN)
      unsigned b = ((const unsigned char*)p)[i], e = (b >> 3) & 15, m = b & 7;
      double v = e == 15 && m == 7 ? nan : e == 0 ? m / 512.0 : (8 + m) * (double)(1u << e) / 1024.0;
      return (b >> 7) ? -v : v;
    }
    default: {  // 11: F8_E5M2
      unsigned b = ((const unsigned char*)p)[i], e = (b >> 2) & 31, m = b & 3;
      double v = e == 31 ? (m ? nan : inf) : e == 0 ? m / 65536.0 : (4 + m) * (double)(1u << e) / 131072.0;
      return (b >> 7) ? -v : v;
    }
  }
}
extern "C" __global__ void ca_compare(const void* got, const void* want, unsigned long long n, int kind, double atol,
                                      double rtol, double slack, CaStats* out) {
  const double inf = __longlong_as_double(0x7ff0000000000000ll);
  double diff2 = 0, ref2 = 0, max_abs = 0, max_rel = 0;
  unsigned long long bad = 0, first = ~0ull, soft = 0, first_soft = ~0ull;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    double a = ca_load(kind, got, i), b = ca_load(kind, want, i);
    bool fa = ca_finite(a), fb = ca_finite(b), fail, sf;
    double ae, re;
    if (fb) { double d = fa ? a - b : inf; diff2 += d * d; ref2 += b * b; }
    if (!fb) { fail = sf = ca_nan(b) ? !ca_nan(a) : a != b; ae = re = fail ? inf : 0; }
    else if (!fa) { fail = sf = true; ae = re = inf; }
    else {
      ae = fabs(a - b); re = ae / fmax(fabs(b), 1e-12);
      sf = ae > atol + rtol * fabs(b);
      fail = ae > atol + slack + rtol * fabs(b);
    }
    max_abs = fmax(max_abs, ae);
    if (!ca_nan(b)) max_rel = fmax(max_rel, re);
    if (fail) { ++bad; if (i < first) first = i; }
    if (sf) { ++soft; if (i < first_soft) first_soft = i; }
  }
  for (int off = 16; off > 0; off >>= 1) {
    diff2 += __shfl_down_sync(0xffffffffu, diff2, off);
    ref2 += __shfl_down_sync(0xffffffffu, ref2, off);
    max_abs = fmax(max_abs, __shfl_down_sync(0xffffffffu, max_abs, off));
    max_rel = fmax(max_rel, __shfl_down_sync(0xffffffffu, max_rel, off));
    bad += __shfl_down_sync(0xffffffffu, bad, off);
    unsigned long long f = __shfl_down_sync(0xffffffffu, first, off);
    first = f < first ? f : first;
    soft += __shfl_down_sync(0xffffffffu, soft, off);
    f = __shfl_down_sync(0xffffffffu, first_soft, off);
    first_soft = f < first_soft ? f : first_soft;
  }
  if ((threadIdx.x & 31) == 0) {
    if (diff2 != 0) atomicAdd(&out->diff2, diff2);
    if (ref2 != 0) atomicAdd(&out->ref2, ref2);
    atomicMax(&out->max_abs, (unsigned long long)__double_as_longlong(max_abs));
    atomicMax(&out->max_rel, (unsigned long long)__double_as_longlong(max_rel));
    if (bad) { atomicAdd(&out->bad, bad); atomicMin(&out->first_bad, first); }
    if (soft) { atomicAdd(&out->soft, soft); atomicMin(&out->first_soft, first_soft); }
  }
}
)";

struct DeviceStats {
  double diff2, ref2;
  uint64_t max_abs, max_rel, bad, first_bad, soft, first_soft;
};

int kind_of(const std::string& dtype) {
  static const std::map<std::string, int> kinds = {{"F64", 0}, {"F32", 1},  {"F16", 2}, {"BF16", 3},
                                                   {"I64", 4}, {"I32", 5},  {"I16", 6}, {"I8", 7},
                                                   {"U8", 8},  {"BOOL", 9}, {"F8_E4M3", 10}, {"F8_E5M2", 11}};
  auto it = kinds.find(dtype);
  if (it == kinds.end()) throw ca::InputError("compare: no device comparison for dtype " + dtype);
  return it->second;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const Tolerances& tolerances) {
  return compare_with(got, want, tolerances,
                      [](const ca::Tensor& g, const ca::Tensor& w, const Tolerance& tol) { return host_stats(g, w, tol); });
}

CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const std::string& mode, double atol,
                              double rtol) {
  return compare_outputs(got, want, Tolerances::by_mode(mode, atol, rtol));
}

CompareResult compare_outputs_device(const DeviceOutputs& got, const DeviceOutputs& want, const std::string& mode,
                                     double atol, double rtol, CUstream stream) {
  return compare_outputs_device(got, want, Tolerances::by_mode(mode, atol, rtol), stream);
}

CompareResult compare_outputs_device(const DeviceOutputs& got, const DeviceOutputs& want, const Tolerances& tolerances,
                                     CUstream stream) {
  auto& d = ca::cuda::Driver::get();
  CUfunction fn = trusted_kernel("compare.cu", kCompareSource, "ca_compare");
  CUdeviceptr stats = 0;
  d.check(d.cuMemAlloc(&stats, sizeof(DeviceStats)), "cuMemAlloc(compare stats)");
  struct Free {
    CUdeviceptr p;
    ~Free() { ca::cuda::Driver::get().cuMemFree(p); }
  } free_stats{stats};
  auto stats_of = [&](const DeviceOutput& g, const DeviceOutput& w, const Tolerance& tol) {
    OutputStats st;
    st.n = numel_of(w.shape);
    if (st.n == 0) return st;
    DeviceStats init{0, 0, 0, 0, 0, ~uint64_t(0), 0, ~uint64_t(0)};
    d.check(d.cuMemcpyHtoDAsync(stats, &init, sizeof init, stream), "compare stats");
    CUdeviceptr gp = g.ptr, wp = w.ptr;
    unsigned long long n = static_cast<unsigned long long>(st.n);
    int kind = kind_of(w.dtype);
    double a = tol.atol, r = tol.rtol, slack = tol.elementwise_slack;
    void* args[] = {&gp, &wp, &n, &kind, &a, &r, &slack, &stats};
    d.check(d.cuLaunchKernel(fn, 1056, 1, 1, 256, 1, 1, 0, stream, args, nullptr), "compare kernel");
    DeviceStats out;
    d.check(d.cuMemcpyDtoHAsync(&out, stats, sizeof out, stream), "compare stats");
    d.check(d.cuStreamSynchronize(stream), "compare");
    st.diff2 = out.diff2;
    st.ref2 = out.ref2;
    std::memcpy(&st.max_abs, &out.max_abs, sizeof(double));
    std::memcpy(&st.max_rel, &out.max_rel, sizeof(double));
    st.bad = static_cast<int64_t>(out.bad);
    st.soft = static_cast<int64_t>(out.soft);
    // A failing element's two values, for the reason.
    auto element = [&](uint64_t index, double& got_v, double& want_v) {
      const size_t es = ca::Tensor::dtype_size(w.dtype), at = static_cast<size_t>(index) * es;
      ca::Tensor one;
      one.dtype = w.dtype;
      one.shape = {1};
      one.data.resize(es);
      d.check(d.cuMemcpyDtoH(one.data.data(), g.ptr + at, es), "compare: first failing element");
      ca::to_doubles(one, 0, 1, &got_v);
      d.check(d.cuMemcpyDtoH(one.data.data(), w.ptr + at, es), "compare: first failing element");
      ca::to_doubles(one, 0, 1, &want_v);
    };
    if (st.bad > 0) {
      st.first_bad = static_cast<int64_t>(out.first_bad);
      element(out.first_bad, st.first_got, st.first_want);
    }
    if (st.soft > 0) {
      st.first_soft = static_cast<int64_t>(out.first_soft);
      element(out.first_soft, st.soft_got, st.soft_want);
    }
    return st;
  };
  return compare_with(got, want, tolerances, stats_of);
}

}  // namespace ca::bundle
