// Runs the exact source of bench/kernelbench/bundles/level3/_lib/cnn_*.cu on the CPU (emu.hpp) against
// float64 references written from PyTorch's definitions, on small shapes chosen to reach every path:
// float4 and scalar loops, channel slices of a larger tensor (image strides), in place, odd sizes,
// padding, NaN, a large mean with a small spread (the variance must not cancel). Exit 0 when every
// check passes, 1 otherwise; one line per check on stdout.
#include "emu.hpp"
#include "../bundles/level3/_lib/cnn_bn.cu"
#include "../bundles/level3/_lib/cnn_pool.cu"
#include "../bundles/level3/_lib/cnn_eltwise.cu"

#include <cstdio>
#include <random>
#include <string>

static int failures = 0;
static std::mt19937 rng(1234);

static std::vector<float> randv(size_t n, float mean, float sd) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// As the checker judges: the error norm ||got - want|| / ||want|| within tol, and every element within
// atol = rtol = 10 * tol (NaN exactly where the reference has NaN). tol 0 asks for exact equality.
static void check(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double num = 0, den = 0, worst = 0;
  size_t at = 0;
  bool bad = got.size() < want.size();
  for (size_t i = 0; i < want.size() && !bad; ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i])) bad = true, at = i;
      continue;
    }
    const double d = std::fabs(got[i] - want[i]);
    num += d * d;
    den += want[i] * want[i];
    const double e = d / (10 * tol + 10 * tol * std::fabs(want[i]));
    if (tol == 0 ? d > 0 : e > 1) bad = true, at = i;
    if (d > worst) worst = d;
  }
  const double norm = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = !bad && norm <= tol;
  if (!ok) ++failures;
  std::printf("%-4s %-62s err norm %.3g, worst abs err %.3g%s\n", ok ? "ok" : "FAIL", what.c_str(), norm, worst,
              bad ? (" (first bad element " + std::to_string(at) + ": got " + std::to_string(got[at]) + " want " +
                     std::to_string(want[at]) + ")").c_str() : "");
}

// batch mean / biased variance of channel c of x (image stride ns)
static void ref_stats(const std::vector<float>& x, long ns, int N, int C, int HW, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(C, 0);
  var.assign(C, 0);
  for (int c = 0; c < C; ++c) {
    double s = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) s += x[n * ns + (long)c * HW + i];
    const double m = s / (N * (double)HW);
    double q = 0;
    for (int n = 0; n < N; ++n)
      for (int i = 0; i < HW; ++i) q += (x[n * ns + (long)c * HW + i] - m) * (x[n * ns + (long)c * HW + i] - m);
    mean[c] = m;
    var[c] = q / (N * (double)HW);
  }
}

static double bnref(double v, double m, double var, double g, double b) { return (v - m) / std::sqrt(var + 1e-5) * g + b; }
static double relu(double v) { return v < 0 ? 0 : v; }

static void test_bn(int N, int C, int H, int W, int Ctot, int P, float mean, float sd, const char* tag, double tol = 2e-6) {
  const int HW = H * W;
  const long ns = (long)Ctot * HW;  // the C channels are the first C of Ctot
  auto x = randv((size_t)N * ns + 4, mean, sd);
  auto gamma = randv(C, 1.0f, 0.5f), beta = randv(C, 0.0f, 1.0f);
  std::vector<double> part((size_t)C * P * 4, NAN), mv(2 * C, NAN);
  emu::launch(dim3{(unsigned)P, (unsigned)C}, dim3{64}, cnn_bn_partial, (const float*)x.data(), (long long)ns, part.data(), C, N, HW, P);
  emu::launch(dim3{(unsigned)C}, dim3{32}, cnn_bn_finalize, (const double*)part.data(), mv.data(), C, P);
  std::vector<double> m, v;
  ref_stats(x, ns, N, C, HW, m, v);
  std::vector<float> gm(C), gv(C);
  std::vector<double> wm(C), wv(C);
  for (int c = 0; c < C; ++c) gm[c] = mv[2 * c], gv[c] = mv[2 * c + 1], wm[c] = m[c], wv[c] = v[c];
  check(std::string(tag) + " stats: mean", gm, wm, 1e-6);
  check(std::string(tag) + " stats: biased variance", gv, wv, tol);

  // copy variant into a strided destination
  const int Cd = C + 3;
  std::vector<float> dst((size_t)N * Cd * HW, NAN);
  std::vector<double> part2((size_t)C * P * 4, NAN), mv2(2 * C, NAN);
  emu::launch(dim3{(unsigned)P, (unsigned)C}, dim3{64}, cnn_bn_partial_copy, (const float*)x.data(), (long long)ns,
              dst.data() + HW, (long long)Cd * HW, part2.data(), C, N, HW, P);
  emu::launch(dim3{(unsigned)C}, dim3{32}, cnn_bn_finalize, (const double*)part2.data(), mv2.data(), C, P);
  std::vector<float> gotc;
  std::vector<double> wantc;
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < HW; ++i) gotc.push_back(dst[n * Cd * HW + (c + 1) * HW + i]), wantc.push_back(x[n * ns + c * HW + i]);
  check(std::string(tag) + " partial_copy: copied values", gotc, wantc, 0);
  for (int c = 0; c < C; ++c) gv[c] = mv2[2 * c + 1];
  check(std::string(tag) + " partial_copy: variance", gv, wv, tol);

  // apply (+relu) into a dense y; in place on a copy of x
  const unsigned gx = (HW + 1023) / 1024;
  for (int relu_on = 0; relu_on < 2; ++relu_on) {
    std::vector<float> y((size_t)N * C * HW, NAN);
    emu::launch(dim3{gx, (unsigned)C, (unsigned)N}, dim3{256}, cnn_bn_apply, (const float*)x.data(), (long long)ns, y.data(),
                (long long)C * HW, (const double*)mv.data(), (const float*)gamma.data(), (const float*)beta.data(), 1e-5f, C, HW, relu_on);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i) {
          double o = bnref(x[n * ns + c * HW + i], m[c], v[c], gamma[c], beta[c]);
          want.push_back(relu_on ? relu(o) : o);
        }
    check(std::string(tag) + (relu_on ? " bn_apply relu (slice -> dense)" : " bn_apply (slice -> dense)"), y, want, tol);
  }
  {
    std::vector<float> xi = x;
    emu::launch(dim3{gx, (unsigned)C, (unsigned)N}, dim3{256}, cnn_bn_apply, (const float*)xi.data(), (long long)ns, xi.data(),
                (long long)ns, (const double*)mv.data(), (const float*)gamma.data(), (const float*)beta.data(), 1e-5f, C, HW, 1);
    std::vector<float> got;
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < Ctot; ++c)
        for (int i = 0; i < HW; ++i) {
          got.push_back(xi[n * ns + c * HW + i]);
          want.push_back(c < C ? relu(bnref(x[n * ns + c * HW + i], m[c], v[c], gamma[c], beta[c])) : x[n * ns + c * HW + i]);
        }
    check(std::string(tag) + " bn_apply relu in place (other channels untouched)", got, want, tol);
  }
  // residual variants: r dense [N, C, HW]
  auto r = randv((size_t)N * C * HW, 0.0f, 2.0f);
  std::vector<double> rm(2 * C);
  std::vector<float> rg = randv(C, 1.0f, 0.3f), rb = randv(C, 0.0f, 0.3f);
  std::vector<double> rmean, rvar;
  ref_stats(r, (long)C * HW, N, C, HW, rmean, rvar);
  for (int c = 0; c < C; ++c) rm[2 * c] = rmean[c], rm[2 * c + 1] = rvar[c];
  {
    std::vector<float> y((size_t)N * C * HW, NAN);
    emu::launch(dim3{gx, (unsigned)C, (unsigned)N}, dim3{256}, cnn_bn_add_relu, (const float*)x.data(), (long long)ns,
                (const float*)r.data(), (long long)C * HW, y.data(), (long long)C * HW, (const double*)mv.data(),
                (const float*)gamma.data(), (const float*)beta.data(), 1e-5f, C, HW);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i)
          want.push_back(relu(bnref(x[n * ns + c * HW + i], m[c], v[c], gamma[c], beta[c]) + r[(n * C + c) * HW + i]));
    check(std::string(tag) + " bn_add_relu", y, want, tol);
    std::vector<float> y2((size_t)N * C * HW, NAN);
    emu::launch(dim3{gx, (unsigned)C, (unsigned)N}, dim3{256}, cnn_bn_bn_add_relu, (const float*)x.data(), (long long)ns,
                (const float*)r.data(), (long long)C * HW, y2.data(), (long long)C * HW, (const double*)mv.data(),
                (const float*)gamma.data(), (const float*)beta.data(), (const double*)rm.data(), (const float*)rg.data(),
                (const float*)rb.data(), 1e-5f, C, HW);
    want.clear();
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int i = 0; i < HW; ++i)
          want.push_back(relu(bnref(x[n * ns + c * HW + i], m[c], v[c], gamma[c], beta[c]) +
                              bnref(r[(n * C + c) * HW + i], rmean[c], rvar[c], rg[c], rb[c])));
    check(std::string(tag) + " bn_bn_add_relu", y2, want, tol);
  }
  // bn + relu + avgpool 2x2 (floor)
  {
    const int OH = H / 2, OW = W / 2;
    std::vector<float> y((size_t)N * C * OH * OW + 1, NAN);
    emu::launch(dim3{(unsigned)((OH * OW + 255) / 256), (unsigned)C, (unsigned)N}, dim3{256}, cnn_bn_relu_avgpool2,
                (const float*)x.data(), (long long)ns, y.data(), (const double*)mv.data(), (const float*)gamma.data(),
                (const float*)beta.data(), 1e-5f, C, H, W);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int oh = 0; oh < OH; ++oh)
          for (int ow = 0; ow < OW; ++ow) {
            double s = 0;
            for (int a = 0; a < 2; ++a)
              for (int b = 0; b < 2; ++b)
                s += relu(bnref(x[n * ns + c * HW + (2 * oh + a) * W + 2 * ow + b], m[c], v[c], gamma[c], beta[c]));
            want.push_back(s / 4);
          }
    want.push_back(NAN);  // the element after the output stays unwritten
    check(std::string(tag) + " bn_relu_avgpool2", y, want, tol);
  }
  // bn + relu + global average pool (x dense: use the first-C-channel tensor only when Ctot == C)
  if (Ctot == C) {
    std::vector<float> y((size_t)N * C, NAN);
    emu::launch(dim3{(unsigned)((N * C + 7) / 8)}, dim3{256}, cnn_bn_relu_gap, (const float*)x.data(), y.data(),
                (const double*)mv.data(), (const float*)gamma.data(), (const float*)beta.data(), 1e-5f, N, C, HW);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        double s = 0;
        for (int i = 0; i < HW; ++i) s += relu(bnref(x[n * ns + c * HW + i], m[c], v[c], gamma[c], beta[c]));
        want.push_back(s / HW);
      }
    check(std::string(tag) + " bn_relu_gap", y, want, tol);
  }
}

static void test_pool(int N, int C, int H, int W, int k, int s, int pad, bool nan, const char* tag) {
  const int OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
  const long ns = (long)(C + 1) * H * W;  // x: a slice of C of C + 1 channels
  auto x = randv((size_t)N * ns, 0.0f, 1.0f);
  if (nan) x[(size_t)ns + 2 * W + 3] = NAN;  // image 1, channel 0, (2, 3)
  for (int relu_on = 0; relu_on < 2; ++relu_on) {
    std::vector<float> y((size_t)N * C * OH * OW, NAN);
    emu::launch(dim3{(unsigned)((OH * OW + 255) / 256), (unsigned)C, (unsigned)N}, dim3{128}, cnn_maxpool2d, (const float*)x.data(),
                (long long)ns, y.data(), (long long)C * OH * OW, C, H, W, OH, OW, k, s, pad, relu_on);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int oh = 0; oh < OH; ++oh)
          for (int ow = 0; ow < OW; ++ow) {
            double mx = -INFINITY;
            bool isn = false;
            for (int a = 0; a < k; ++a)
              for (int b = 0; b < k; ++b) {
                const int h = oh * s - pad + a, w = ow * s - pad + b;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const float v = x[n * ns + (long)c * H * W + h * W + w];
                if (std::isnan(v)) isn = true;
                else mx = std::max(mx, (double)v);
              }
            const double o = isn ? NAN : mx;
            want.push_back(relu_on && !isn ? relu(o) : o);
          }
    check(std::string(tag) + (relu_on ? " maxpool relu" : " maxpool"), y, want, 0);
  }
  for (int cip = 0; cip < 2; ++cip) {
    std::vector<float> y((size_t)N * C * OH * OW, NAN);
    emu::launch(dim3{(unsigned)((OH * OW + 255) / 256), (unsigned)C, (unsigned)N}, dim3{128}, cnn_avgpool2d, (const float*)x.data(),
                (long long)ns, y.data(), (long long)C * OH * OW, C, H, W, OH, OW, k, s, pad, cip);
    std::vector<double> want;
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c)
        for (int oh = 0; oh < OH; ++oh)
          for (int ow = 0; ow < OW; ++ow) {
            double sum = 0;
            int cnt = 0, padded = 0;
            for (int a = 0; a < k; ++a)
              for (int b = 0; b < k; ++b) {
                const int h = oh * s - pad + a, w = ow * s - pad + b;
                if (h < H + pad && w < W + pad) ++padded;  // torch: the window clipped to the padded input
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                sum += x[n * ns + (long)c * H * W + h * W + w];
                ++cnt;
              }
            want.push_back(sum / (cip ? padded : cnt));
          }
    check(std::string(tag) + (cip ? " avgpool count_include_pad" : " avgpool exclude pad"), y, want, 1e-5);
  }
}

int main() {
  test_bn(3, 5, 7, 9, 5, 3, 0.5f, 1.0f, "bn scalar HW=63");
  test_bn(2, 4, 8, 8, 6, 4, 0.0f, 2.0f, "bn float4 slice");
  // a mean of 1000 and a spread of 0.05: the statistics are summed in double around a shift and the
  // mean reaches the apply pass as a float pair, so x - mean is as exact as the fp32 data allows
  test_bn(4, 3, 6, 10, 3, 5, 1000.0f, 0.05f, "bn mean 1000 sd 0.05", 2e-6);
  test_bn(2, 3, 8, 8, 3, 2, -5e4f, 3.0f, "bn mean -5e4 sd 3", 2e-6);
  test_bn(2, 2, 16, 16, 2, 1, -3.0f, 0.5f, "bn P=1");
  test_bn(1, 2, 2, 2, 2, 8, 0.5f, 1.0f, "bn P=8 > work (empty blocks)");
  test_pool(2, 3, 9, 11, 3, 2, 1, true, "pool 3/2/1 NaN");
  test_pool(2, 2, 13, 13, 3, 2, 0, false, "pool 3/2/0");
  test_pool(1, 2, 8, 8, 2, 2, 0, false, "pool 2/2/0");
  test_pool(1, 1, 7, 6, 3, 1, 1, false, "pool 3/1/1");
  // global average pool, relu, add: odd sizes and a misaligned start
  {
    auto x = randv(3 * 50 + 1, 0.0f, 1.0f);
    std::vector<float> y(3, NAN);
    emu::launch(dim3{1}, dim3{256}, cnn_gap, (const float*)x.data() + 1, y.data(), 3ll, 50, 0);
    std::vector<double> want;
    for (int p = 0; p < 3; ++p) {
      double s = 0;
      for (int i = 0; i < 50; ++i) s += x[1 + p * 50 + i];
      want.push_back(s / 50);
    }
    check("gap", y, want, 1e-5);
    const long long n = 1003;
    auto a = randv(n + 1, 0.0f, 1.0f), b = randv(n + 1, 0.0f, 1.0f);
    a[7] = NAN;
    for (int off = 0; off < 2; ++off) {
      std::vector<float> r(n + 1, NAN), s2(n + 1, NAN);
      emu::launch(dim3{2}, dim3{256}, cnn_relu, (const float*)a.data() + off, r.data() + off, n);
      emu::launch(dim3{3}, dim3{256}, cnn_add, (const float*)a.data() + off, (const float*)b.data() + off, s2.data() + off, n, 1);
      std::vector<float> gr(r.begin() + off, r.begin() + off + n), gs(s2.begin() + off, s2.begin() + off + n);
      std::vector<double> wr, ws;
      for (long long i = 0; i < n; ++i) {
        const float av = a[i + off];
        wr.push_back(std::isnan(av) ? NAN : relu(av));
        const double sv = (double)av + b[i + off];
        ws.push_back(std::isnan(sv) ? NAN : relu(sv));
      }
      check(off ? "relu misaligned" : "relu aligned", gr, wr, 0);
      check(off ? "add relu misaligned" : "add relu aligned", gs, ws, 1e-6);
    }
  }
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
