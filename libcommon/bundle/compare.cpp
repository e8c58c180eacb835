// Output comparison.
#include "libcommon/bundle/compare.hpp"

#include <cmath>
#include <sstream>

namespace ca::bundle {

Tolerance Tolerance::for_dtype(const std::string& mode, const std::string& dtype, double atol_o, double rtol_o) {
  Tolerance t;
  bool is_int = dtype[0] == 'I' || dtype[0] == 'U' || dtype == "BOOL";
  if (is_int) t.atol = t.rtol = 0;
  else if (mode == "strict" && (dtype == "F32" || dtype == "F64")) {
    t.atol = t.rtol = 1e-4;
    t.rel_norm = 1e-3;
  }
  if (atol_o >= 0) t.atol = atol_o;
  if (rtol_o >= 0) t.rtol = rtol_o;
  return t;
}

ca::Json CompareResult::to_json() const {
  return ca::Json{{"max_abs_err", max_abs_err},
                  {"max_rel_err", max_rel_err},
                  {"mismatch_fraction", mismatch_fraction},
                  {"rel_l2_err", rel_l2_err}};
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

CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const std::string& mode, double atol,
                              double rtol) {
  CompareResult r;
  int64_t total = 0, bad = 0;
  for (const auto& [name, w] : want) {
    if (name.rfind("outputs.", 0) != 0) continue;
    auto it = got.find(name);
    if (it == got.end()) {
      r.ok = false;
      if (r.reason.empty()) r.reason = name + " missing from the candidate's outputs";
      continue;
    }
    const ca::Tensor& g = it->second;
    if (g.shape != w.shape || g.dtype != w.dtype) {
      r.ok = false;
      if (r.reason.empty()) r.reason = name + ": shape/dtype differ from the reference";
      continue;
    }
    Tolerance tol = Tolerance::for_dtype(mode, w.dtype, atol, rtol);
    // In chunks: outputs reach gigabytes (KernelBench level 1), and a whole copy as doubles would not fit.
    const size_t n = static_cast<size_t>(w.numel());
    constexpr size_t kChunk = size_t(1) << 20;
    std::vector<double> gv(std::min(n, kChunk)), wv(std::min(n, kChunk));
    total += static_cast<int64_t>(n);
    double diff2 = 0, ref2 = 0;  // for the relative error norm, over finite reference elements
    for (size_t base = 0; base < n; base += kChunk) {
      const size_t m = std::min(kChunk, n - base);
      ca::to_doubles(g, base, m, gv.data());
      ca::to_doubles(w, base, m, wv.data());
      for (size_t j = 0; j < m; ++j) {
        const size_t i = base + j;
        double a = gv[j], b = wv[j];
        if (std::isfinite(b)) {
          const double d = std::isfinite(a) ? a - b : INFINITY;
          diff2 += d * d;
          ref2 += b * b;
        }
        bool fail;
        double abs_err, rel_err;
        if (std::isnan(b) || std::isinf(b)) {
          fail = !(std::isnan(b) ? std::isnan(a) : a == b);
          abs_err = rel_err = fail ? INFINITY : 0;
        } else if (!std::isfinite(a)) {
          fail = true;
          abs_err = rel_err = INFINITY;
        } else {
          abs_err = std::fabs(a - b);
          rel_err = abs_err / std::max(std::fabs(b), 1e-12);
          fail = abs_err > tol.atol + tol.rtol * std::fabs(b);
        }
        r.max_abs_err = std::max(r.max_abs_err, abs_err);
        if (!std::isnan(b)) r.max_rel_err = std::max(r.max_rel_err, std::isfinite(rel_err) ? rel_err : INFINITY);
        if (fail) {
          ++bad;
          if (r.ok) {
            r.ok = false;
            std::string got_text = std::isnan(a) ? "nan" : num(a);
            r.reason = name + index_text(static_cast<int64_t>(i), w.shape) + ": expected " + num(b) + ", got " + got_text +
                       (std::isnan(a) && !std::isnan(b) ? " (never written? outputs are NaN-poisoned before each call)" : "") +
                       " (atol " + num(tol.atol) + ", rtol " + num(tol.rtol) + ")";
          }
        }
      }
    }
    if (ref2 > 0) {
      const double rel = std::sqrt(diff2 / ref2);
      r.rel_l2_err = std::max(r.rel_l2_err, std::isfinite(rel) ? rel : INFINITY);
      if (rel > tol.rel_norm && r.ok) {
        r.ok = false;
        r.reason = name + ": relative error norm ||out - ref|| / ||ref|| = " + num(rel) + " is over " + num(tol.rel_norm) +
                   " (elementwise within atol " + num(tol.atol) + ", but the output as a whole is not the reference's: "
                   "a zero or constant output where the reference is small?)";
      }
    }
  }
  r.mismatch_fraction = total ? static_cast<double>(bad) / static_cast<double>(total) : 0;
  if (!r.ok && bad > 1) r.reason += "; " + std::to_string(bad) + " of " + std::to_string(total) + " elements differ";
  // JSON has no Infinity: cap for the record.
  if (!std::isfinite(r.max_abs_err)) r.max_abs_err = 1e308;
  if (!std::isfinite(r.max_rel_err)) r.max_rel_err = 1e308;
  if (!std::isfinite(r.rel_l2_err)) r.rel_l2_err = 1e308;
  return r;
}

}  // namespace ca::bundle
