// The transformer's ops as plain CPU loops (llm.c style): each forward with its backward, shapes spelled
// out. These are the oracle every later CUDA kernel is compared against, so they stay simple.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <thread>
#include <type_traits>
#include <vector>

namespace ca::nn {

// Runs body(begin, end) over [0, n) on up to hardware_concurrency threads when the work is big enough
// to pay for them (`work` = multiply-adds); small problems stay on the calling thread.
template <class F> void parallel_rows(int n, double work, const F& body) {
  static const int kThreads = std::max(1u, std::thread::hardware_concurrency());
  int threads = work < 2e6 ? 1 : std::min(kThreads, n);
  if (threads <= 1) {
    body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    int begin = int((long long)n * i / threads), end = int((long long)n * (i + 1) / threads);
    pool.emplace_back([&, begin, end] { body(begin, end); });
  }
  for (auto& th : pool) th.join();
}

// out[t, n] = sum_k in[t, k] * w[n, k] + bias[n]   (w is [N, K] as nn.Linear stores it)
template <class T> void matmul_forward(T* out, const T* in, const T* w, std::type_identity_t<const T*> bias, int rows, int K, int N) {
  parallel_rows(rows, double(rows) * K * N, [&](int r0, int r1) {
    for (int t = r0; t < r1; ++t) {
      const T* x = in + std::size_t(t) * K;
      for (int n = 0; n < N; ++n) {
        const T* wr = w + std::size_t(n) * K;
        T s = bias ? bias[n] : T(0);
        for (int k = 0; k < K; ++k) s += x[k] * wr[k];
        out[std::size_t(t) * N + n] = s;
      }
    }
  });
}

// din[t, k] += sum_n dout[t, n] w[n, k];  dw[n, k] += sum_t dout[t, n] in[t, k];  dbias[n] += sum_t dout[t, n]
// (din, dw, dbias may each be null: not computed)
template <class T> void matmul_backward(T* din, T* dw, std::type_identity_t<T*> dbias, const T* dout, const T* in, const T* w, int rows,
                                        int K, int N) {
  const double work = double(rows) * K * N;
  if (din)
    parallel_rows(rows, work, [&](int r0, int r1) {
      for (int t = r0; t < r1; ++t) {
        T* dx = din + std::size_t(t) * K;
        for (int n = 0; n < N; ++n) {
          const T g = dout[std::size_t(t) * N + n];
          if (g == T(0)) continue;
          const T* wr = w + std::size_t(n) * K;
          for (int k = 0; k < K; ++k) dx[k] += g * wr[k];
        }
      }
    });
  if (!dw && !dbias) return;  // a frozen layer (LoRA's base): the input gradient only
  // Split over output rows n so threads never write the same dw row.
  parallel_rows(N, work, [&](int n0, int n1) {
    for (int n = n0; n < n1; ++n) {
      T* dwr = dw ? dw + std::size_t(n) * K : nullptr;
      T db = 0;
      for (int t = 0; t < rows; ++t) {
        const T g = dout[std::size_t(t) * N + n];
        db += g;
        if (g == T(0) || !dwr) continue;
        const T* x = in + std::size_t(t) * K;
        for (int k = 0; k < K; ++k) dwr[k] += g * x[k];
      }
      if (dbias) dbias[n] += db;
    }
  });
}

// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), per row of C (HF's Qwen2RMSNorm / LlamaRMSNorm).
template <class T> void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int rows, int C, T eps) {
  for (int t = 0; t < rows; ++t) {
    const T* xr = x + std::size_t(t) * C;
    T ss = 0;
    for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
    T r = T(1) / std::sqrt(ss / T(C) + eps);
    rstd[t] = r;
    for (int c = 0; c < C; ++c) y[std::size_t(t) * C + c] = xr[c] * r * w[c];
  }
}

// dx += r * (dy*w - x * r^2 / C * sum(dy*w*x));  dw += dy * x * r (dw null: frozen)
template <class T> void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int rows, int C) {
  for (int t = 0; t < rows; ++t) {
    const T* xr = x + std::size_t(t) * C;
    const T* g = dy + std::size_t(t) * C;
    const T r = rstd[t];
    T dot = 0;
    for (int c = 0; c < C; ++c) dot += g[c] * w[c] * xr[c];
    for (int c = 0; c < C; ++c) {
      dx[std::size_t(t) * C + c] += r * (g[c] * w[c] - xr[c] * r * r * dot / T(C));
      if (dw) dw[c] += g[c] * xr[c] * r;
    }
  }
}

// Rotary embedding as HF applies it (rotate_half): pairs (i, i + D/2) turn by pos * theta^(-2i/D).
template <class T> void rope_forward(T* x, int pos, int D, double theta) {
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    double angle = pos * std::pow(theta, -2.0 * i / D);
    T c = T(std::cos(angle)), s = T(std::sin(angle));
    T a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

// The transpose of the rotation (turn back by the same angle), applied to the gradient in place.
template <class T> void rope_backward(T* dx, int pos, int D, double theta) {
  const int half = D / 2;
  for (int i = 0; i < half; ++i) {
    double angle = pos * std::pow(theta, -2.0 * i / D);
    T c = T(std::cos(angle)), s = T(std::sin(angle));
    T a = dx[i], b = dx[i + half];
    dx[i] = a * c + b * s;
    dx[i + half] = b * c - a * s;
  }
}

// Causal attention with grouped-query heads: query head h reads key/value head h / (H / KV).
// q [T, H*D], k and v [T, KV*D], probs [H, T, T], out [T, H*D].
template <class T> void attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int Tn, int H, int KV, int D) {
  const T scale = T(1) / std::sqrt(T(D));
  const int group = H / KV;
  parallel_rows(H, double(H) * Tn * Tn * D, [&](int h0, int h1) {
    for (int h = h0; h < h1; ++h) {
      const int g = h / group;
      for (int t = 0; t < Tn; ++t) {
        const T* qt = q + (std::size_t(t) * H + h) * D;
        T* p = probs + (std::size_t(h) * Tn + t) * Tn;
        T mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const T* ku = k + (std::size_t(u) * KV + g) * D;
          T s = 0;
          for (int d = 0; d < D; ++d) s += qt[d] * ku[d];
          p[u] = s * scale;
          mx = std::max(mx, p[u]);
        }
        T sum = 0;
        for (int u = 0; u <= t; ++u) {
          p[u] = std::exp(p[u] - mx);
          sum += p[u];
        }
        T* o = out + (std::size_t(t) * H + h) * D;
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int u = 0; u <= t; ++u) {
          p[u] /= sum;
          const T* vu = v + (std::size_t(u) * KV + g) * D;
          for (int d = 0; d < D; ++d) o[d] += p[u] * vu[d];
        }
      }
    }
  });
}

// dq, dk, dv accumulate (+=). dk and dv rows are shared by a group of query heads, so the split over
// threads is by key/value head.
template <class T> void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* probs, const T* q, const T* k,
                                           const T* v, int Tn, int H, int KV, int D) {
  const T scale = T(1) / std::sqrt(T(D));
  const int group = H / KV;
  parallel_rows(KV, double(H) * Tn * Tn * D, [&](int g0, int g1) {
    std::vector<T> dp(Tn);
    for (int g = g0; g < g1; ++g)
      for (int h = g * group; h < (g + 1) * group; ++h)
        for (int t = 0; t < Tn; ++t) {
          const T* p = probs + (std::size_t(h) * Tn + t) * Tn;
          const T* go = dout + (std::size_t(t) * H + h) * D;
          const T* qt = q + (std::size_t(t) * H + h) * D;
          T* dqt = dq + (std::size_t(t) * H + h) * D;
          T sum = 0;
          for (int u = 0; u <= t; ++u) {
            const T* vu = v + (std::size_t(u) * KV + g) * D;
            T* dvu = dv + (std::size_t(u) * KV + g) * D;
            T s = 0;
            for (int d = 0; d < D; ++d) {
              s += go[d] * vu[d];
              dvu[d] += p[u] * go[d];
            }
            dp[u] = s;
            sum += p[u] * s;
          }
          for (int u = 0; u <= t; ++u) {
            T ds = p[u] * (dp[u] - sum) * scale;
            const T* ku = k + (std::size_t(u) * KV + g) * D;
            T* dku = dk + (std::size_t(u) * KV + g) * D;
            for (int d = 0; d < D; ++d) {
              dqt[d] += ds * ku[d];
              dku[d] += ds * qt[d];
            }
          }
        }
  });
}

// act = silu(gate) * up, silu(x) = x * sigmoid(x)
template <class T> void swiglu_forward(T* act, const T* gate, const T* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T s = T(1) / (T(1) + std::exp(-gate[i]));
    act[i] = gate[i] * s * up[i];
  }
}

// dgate = dact * up * silu'(gate), silu'(x) = s (1 + x (1 - s));  dup = dact * silu(gate)   (overwrites)
template <class T> void swiglu_backward(T* dgate, T* dup, const T* dact, const T* gate, const T* up, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    T s = T(1) / (T(1) + std::exp(-gate[i]));
    dgate[i] = dact[i] * up[i] * s * (T(1) + gate[i] * (T(1) - s));
    dup[i] = dact[i] * gate[i] * s;
  }
}

}  // namespace ca::nn
