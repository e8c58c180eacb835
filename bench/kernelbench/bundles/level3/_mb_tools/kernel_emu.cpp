// Runs the exact source of _lib/mb_bn.cu and _lib/mb_ew.cu on the CPU (CUDA threads as std::threads,
// through bench/kernelbench/cnn_lib_emu/emu.hpp, plus __shfl_down_sync below) against float64
// references written from PyTorch's definitions: training-mode BatchNorm (batch mean, biased
// variance, eps 1e-5) with every apply variant (ReLU, ReLU6, residual, channel shuffle, a second
// normalized shortcut), float4 and scalar paths, splits that do not divide the count, a mean of 100
// with a spread of 0.05; max pool with padding, ceil-mode sizes and NaN; plane means; ReLU, ReLU6
// and sigmoid in place, aligned and not. One line per check; exit 0 when all pass, 1 otherwise.
#include "../../../cnn_lib_emu/emu.hpp"

// __shfl_down_sync for float and double (CUDA: a lane past the warp's end keeps its own value).
namespace mbemu {
inline double xchg[1024];
}
template <typename T>
T __shfl_down_sync(unsigned, T v, int o) {
  const unsigned t = emu::tid();
  auto& bar = *emu::warp_bars[t / 32];
  mbemu::xchg[t] = (double)v;
  bar.arrive_and_wait();
  const T r = (T)mbemu::xchg[(t & 31u) + o < 32 ? t + o : t];
  bar.arrive_and_wait();
  return r;
}
#include <math.h>  // expf
using std::sqrt;

#include "../_lib/mb_bn.cu"
#include "../_lib/mb_ew.cu"

#include <cstdio>
#include <random>
#include <string>

static int failures = 0;
static std::mt19937 rng(4321);

static std::vector<float> randv(size_t n, float mean, float sd) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

static void check(const std::string& what, const float* got, const std::vector<double>& want, double tol) {
  double num = 0, den = 0, worst = 0;
  long bad = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i]) && bad < 0) bad = (long)i;
      continue;
    }
    const double d = std::fabs(got[i] - want[i]);
    num += d * d;
    den += want[i] * want[i];
    if (d > 10 * tol * (1 + std::fabs(want[i])) && bad < 0) bad = (long)i;
    worst = std::max(worst, d);
  }
  const double norm = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = bad < 0 && norm <= tol;
  if (!ok) ++failures;
  std::printf("%-4s %-66s err norm %.3g, worst abs err %.3g", ok ? "ok" : "FAIL", what.c_str(), norm, worst);
  if (bad >= 0) std::printf(" (element %ld: got %g want %g)", bad, got[bad], want[bad]);
  std::printf("\n");
}

static double act(double v, int a) {
  if (std::isnan(v)) return v;
  if (a == 1) return v < 0 ? 0 : v;
  if (a == 2) return v < 0 ? 0 : v > 6 ? 6 : v;
  if (a == 3) return 1 / (1 + std::exp(-v));
  return v;
}

struct BN {
  std::vector<double> mean, var;
  std::vector<float> gamma, beta;
};

static BN ref_bn(const std::vector<float>& x, int N, int C, int HW) {
  BN b;
  b.mean.assign(C, 0);
  b.var.assign(C, 0);
  for (int c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) s += x[((size_t)n * C + c) * HW + i];
    const double m = s / ((double)N * HW);
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) q += (x[((size_t)n * C + c) * HW + i] - m) * (x[((size_t)n * C + c) * HW + i] - m);
    b.mean[c] = m;
    b.var[c] = q / ((double)N * HW);
  }
  b.gamma = randv(C, 1.0f, 0.5f);
  b.beta = randv(C, 0.0f, 1.0f);
  return b;
}

static double bnv(const BN& b, int c, double v) { return (v - b.mean[c]) / std::sqrt(b.var[c] + 1e-5) * b.gamma[c] + b.beta[c]; }

static std::vector<double> stats(const std::vector<float>& x, int N, int C, int HW, int S) {
  std::vector<double> part((size_t)C * S * 2, NAN);
  emu::launch(dim3{(unsigned)C, (unsigned)S}, dim3{256}, mb_bn_stats<256>, x.data(), part.data(), C, HW, N * HW, S);
  return part;
}

template <int ACT, int RES>
static void test_apply(int N, int C, int H, int W, int S, int groups, float mean, float sd, double tol, const char* tag) {
  const int HW = H * W;
  const size_t n = (size_t)N * C * HW;
  auto x = randv(n, mean, sd), r = randv(n, 0.5f, 1.0f);
  BN b = ref_bn(x, N, C, HW);
  auto part = stats(x, N, C, HW, S);
  std::vector<float> y(n, NAN);
  const bool inplace = groups == 1 && !RES;
  float* out = inplace ? x.data() : y.data();
  std::vector<float> xin = x;
  emu::launch(dim3{(unsigned)(N * C), (unsigned)((HW + 1023) / 1024)}, dim3{256}, mb_bn_apply<ACT, RES>, (const float*)x.data(), out,
              (const double*)part.data(), (const float*)b.gamma.data(), (const float*)b.beta.data(), (const float*)r.data(), C, HW, S,
              N * HW, 1e-5f, groups);
  std::vector<double> want(n);
  const int cpg = C / groups;
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) {
      const int oc = (c % cpg) * groups + c / cpg;
      for (int p = 0; p < HW; ++p) {
        const size_t o = ((size_t)i * C + oc) * HW + p;
        want[o] = act(bnv(b, c, xin[((size_t)i * C + c) * HW + p]), ACT) + (RES ? r[o] : 0.0);
      }
    }
  char what[200];
  std::snprintf(what, sizeof what, "bn_apply<%d,%d> %s N%d C%d %dx%d S%d g%d%s", ACT, RES, tag, N, C, H, W, S, groups,
                inplace ? " in place" : "");
  check(what, out, want, tol);
}

static void test_add_bn(int N, int C, int H, int W, int S) {
  const int HW = H * W;
  const size_t n = (size_t)N * C * HW;
  auto x = randv(n, 0.3f, 2.0f), r = randv(n, -1.0f, 0.7f);
  BN b = ref_bn(x, N, C, HW), br = ref_bn(r, N, C, HW);
  auto part = stats(x, N, C, HW, S), part_r = stats(r, N, C, HW, S);
  std::vector<float> xin = x;
  emu::launch(dim3{(unsigned)(N * C), (unsigned)((HW + 1023) / 1024)}, dim3{256}, mb_bn_apply_add_bn<1>, (const float*)x.data(), x.data(),
              (const double*)part.data(), (const float*)b.gamma.data(), (const float*)b.beta.data(), (const float*)r.data(),
              (const double*)part_r.data(), (const float*)br.gamma.data(), (const float*)br.beta.data(), C, HW, S, N * HW, 1e-5f);
  std::vector<double> want(n);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < HW; ++p) {
        const size_t o = ((size_t)i * C + c) * HW + p;
        want[o] = act(bnv(b, c, xin[o]), 1) + bnv(br, c, r[o]);
      }
  check("bn_apply_add_bn<1> N" + std::to_string(N) + " C" + std::to_string(C) + " " + std::to_string(H) + "x" + std::to_string(W) +
            " S" + std::to_string(S) + " in place",
        x.data(), want, 2e-6);
}

template <int ACT>
static void test_maxpool(int NC, int H, int W, int k, int s, int p, bool ceil, bool nan) {
  auto x = randv((size_t)NC * H * W, 0.0f, 1.0f);
  if (nan) x[(size_t)H * W + W + 1] = NAN;  // plane 1, row 1, column 1
  auto osz = [&](int v) {
    int o = ceil ? (v + 2 * p - k + s - 1) / s + 1 : (v + 2 * p - k) / s + 1;
    if (ceil && (o - 1) * s >= v + p) --o;  // PyTorch: the last window must start inside
    return o;
  };
  const int OH = osz(H), OW = osz(W);
  std::vector<float> y((size_t)NC * OH * OW, NAN);
  emu::launch(dim3{(unsigned)((NC * OH * OW + 255) / 256)}, dim3{256}, mb_maxpool2d<ACT>, (const float*)x.data(), y.data(), NC, H, W, OH,
              OW, k, s, p);
  std::vector<double> want(y.size());
  for (int c = 0; c < NC; ++c)
    for (int oh = 0; oh < OH; ++oh)
      for (int ow = 0; ow < OW; ++ow) {
        double m = -INFINITY;
        for (int dh = 0; dh < k; ++dh)
          for (int dw = 0; dw < k; ++dw) {
            const int h = oh * s - p + dh, w = ow * s - p + dw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x[((size_t)c * H + h) * W + w];
            if (std::isnan(v) || std::isnan(m)) m = NAN;
            else m = std::max(m, v);
          }
        want[((size_t)c * OH + oh) * OW + ow] = act(m, ACT);
      }
  char what[200];
  std::snprintf(what, sizeof what, "maxpool2d<%d> NC%d %dx%d k%d s%d p%d%s -> %dx%d%s", ACT, NC, H, W, k, s, p, ceil ? " ceil" : "", OH,
                OW, nan ? " with NaN" : "");
  check(what, y.data(), want, 0);
}

template <int ACT>
static void test_mean(int NC, int HW) {
  auto x = randv((size_t)NC * HW, 0.2f, 1.0f);
  std::vector<float> y(NC, NAN);
  emu::launch(dim3{(unsigned)((NC + 7) / 8)}, dim3{256}, mb_mean_hw<ACT>, (const float*)x.data(), y.data(), NC, HW);
  std::vector<double> want(NC);
  for (int c = 0; c < NC; ++c) {
    double s = 0;
    for (int i = 0; i < HW; ++i) s += act(x[(size_t)c * HW + i], ACT);
    want[c] = s / HW;
  }
  check("mean_hw<" + std::to_string(ACT) + "> NC" + std::to_string(NC) + " HW" + std::to_string(HW), y.data(), want, 1e-6);
}

template <int ACT>
static void test_act(long long n, int offset) {
  auto buf = randv((size_t)n + offset, 0.0f, 5.0f);
  buf[offset + 3] = NAN;
  std::vector<double> want(n);
  for (long long i = 0; i < n; ++i) want[i] = act(buf[offset + i], ACT);
  if (ACT == 3) want[3] = NAN;
  emu::launch(dim3{2}, dim3{256}, mb_act_inplace<ACT>, buf.data() + offset, n);
  check("act_inplace<" + std::to_string(ACT) + "> n" + std::to_string(n) + " offset " + std::to_string(offset), buf.data() + offset,
        want, 1e-6);
}

int main() {
  test_apply<0, 0>(2, 3, 8, 8, 3, 1, 0.5f, 1.0f, 2e-6, "float4");         // 128 per channel in 3 splits
  test_apply<1, 0>(3, 4, 5, 7, 4, 1, -0.2f, 2.0f, 2e-6, "scalar");        // HW 35 (odd): the scalar path
  test_apply<2, 0>(2, 5, 36, 36, 7, 1, 2.0f, 3.0f, 2e-6, "two y-blocks");  // HW 1296 > 1024: grid.y = 2
  test_apply<0, 0>(2, 3, 8, 8, 5, 1, 100.0f, 0.05f, 2e-6, "mean 100 sd 0.05");
  test_apply<0, 1>(2, 4, 6, 6, 2, 1, 0.5f, 1.0f, 2e-6, "residual");
  test_apply<1, 1>(2, 6, 5, 5, 3, 1, 0.5f, 1.0f, 2e-6, "relu + residual");
  test_apply<0, 0>(2, 6, 4, 4, 2, 3, 0.5f, 1.0f, 2e-6, "shuffle");
  test_apply<1, 0>(3, 12, 3, 3, 1, 3, 0.5f, 1.0f, 2e-6, "shuffle");
  test_apply<2, 0>(2, 7, 1, 1, 1, 1, 0.5f, 1.0f, 2e-6, "1x1 maps");
  test_add_bn(2, 4, 6, 6, 3);
  test_add_bn(2, 3, 5, 3, 2);
  test_maxpool<0>(3, 9, 9, 3, 1, 1, false, true);
  test_maxpool<1>(2, 11, 10, 3, 2, 1, false, false);
  test_maxpool<0>(2, 12, 11, 3, 2, 0, true, true);
  test_maxpool<1>(2, 13, 13, 3, 2, 0, true, false);
  test_maxpool<0>(2, 8, 6, 2, 2, 0, false, false);
  test_mean<0>(13, 49);
  test_mean<1>(9, 100);
  test_act<1>(1000, 0);
  test_act<2>(1001, 0);
  test_act<1>(1000, 1);
  test_act<3>(257, 2);
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
