// Mamba-2 SSD (chunked state-space duality), KernelBench level3 48 (returns Y) and 49 (returns the
// final state), one block per (batch row b, head h), the chunks in order:
//   per chunk c (rows l, s in 0..Lc-1 of the chunk, t = c * Lc + l):
//     Acs[l] = cumsum of A[b, t, h] within the chunk, accumulated in double and rounded once (as
//       torch.cumsum of fp32 on the CPU accumulates; on the GPU it is a parallel scan): exp() turns a
//       prefix's rounding into relative error of everything after it, and at |cumsum| ~ 46 (49's
//       largest row, which carries the whole output's norm) a serial fp32 prefix left the final state
//       4.6x as far from float64 as PyTorch's (6.3e-6 against 1.4e-6; incorrect by the calibrated bound);
//     st[c][n][p] = sum_l B[l, n] * exp(Acs[Lc-1] - Acs[l]) * X[l, p]      (the chunk's state)
//     S_in(c) = sum_{c'=1..c} exp(cs[c] - cs[c']) * st[c'-1]               (new_states[:, c])
//       with cs = cumsum([0, Acs_last(0), Acs_last(1), ...]) (the padded segsum of the reference;
//       its c' = 0 term is the zero initial state);
//     Y[l, p] = sum_{s<=l} (C[l].B[s]) * exp(Acs[l] - Acs[s]) * X[s, p]       (Y_diag)
//             + exp(Acs[l]) * sum_n C[l, n] * S_in(c)[n][p]                     (Y_off)
//   FINAL: out[b, h, p, n] = sum_{c'=1..NC} exp(cs[NC] - cs[c']) * st[c'-1]  (new_states[:, -1]).
// Layouts: X, Y [Bsz, T, H, P]; A [Bsz, T, H]; B, C [Bsz, T, H, N]; out (FINAL) [Bsz, H, P, N].
// Dynamic shared memory, in floats: Lc*P + Lc*(N+1) + Lc*N + Lc*Lc + NC*N*P + N*P + Lc + NC + 1
// (NC = T / Lc chunks; launch with shared = that * 4 bytes).
template <int BLOCK, bool FINAL>
__global__ void tf_mamba2_ssd(const float* X, const float* A, const float* Bm, const float* Cm, float* out, int Bsz,
                              int T, int H, int P, int N, int Lc) {
  extern __shared__ float sm[];
  const int NC = T / Lc;
  float* sX = sm;                        // [Lc][P]
  float* sB = sX + Lc * P;               // [Lc][N + 1]
  float* sC = sB + Lc * (N + 1);         // [Lc][N]
  float* sM = sC + Lc * N;               // [Lc][Lc]
  float* sSt = sM + Lc * Lc;             // [NC][N][P]
  float* sIn = sSt + NC * N * P;         // [N][P]
  float* sAcs = sIn + N * P;             // [Lc]
  float* sCs = sAcs + Lc;                // [NC + 1]
  const long long b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int tid = threadIdx.x;
  if (tid == 0) sCs[0] = 0.0f;
  double cs = 0.0;  // the padded cumsum of the chunks' totals, in double as well (thread 0 only)
  for (int c = 0; c < NC; ++c) {
    const long long t0 = b * T + (long long)c * Lc;  // first row of the chunk in [Bsz * T]
    if (tid == 0) {
      double acc = 0.0;
      for (int l = 0; l < Lc; ++l) {
        acc += (double)A[(t0 + l) * H + h];
        sAcs[l] = (float)acc;
      }
      cs += (double)sAcs[Lc - 1];
      sCs[c + 1] = (float)cs;
    }
    for (int e = tid; e < Lc * P; e += BLOCK) {
      const int l = e / P, p = e % P;
      sX[e] = X[((t0 + l) * H + h) * P + p];
    }
    for (int e = tid; e < Lc * N; e += BLOCK) {
      const int l = e / N, n = e % N;
      const long long g = ((t0 + l) * H + h) * N + n;
      sB[l * (N + 1) + n] = Bm[g];
      sC[e] = Cm[g];
    }
    __syncthreads();
    const float alast = sAcs[Lc - 1];
    float* st = sSt + c * N * P;
    for (int e = tid; e < N * P; e += BLOCK) {
      const int n = e / P, p = e % P;
      float acc = 0.0f;
      for (int l = 0; l < Lc; ++l) acc += sB[l * (N + 1) + n] * expf(alast - sAcs[l]) * sX[l * P + p];
      st[e] = acc;
    }
    if (!FINAL) {
      // S_in(c) from the earlier chunks' states (st[c'-1] for c' = 1..c)
      for (int e = tid; e < N * P; e += BLOCK) {
        float acc = 0.0f;
        for (int k = 1; k <= c; ++k) acc += expf(sCs[c] - sCs[k]) * sSt[(k - 1) * N * P + e];
        sIn[e] = acc;
      }
      for (int e = tid; e < Lc * Lc; e += BLOCK) {
        const int l = e / Lc, s = e % Lc;
        float v = 0.0f;
        if (s <= l) {
          float dot = 0.0f;
          for (int n = 0; n < N; ++n) dot += sC[l * N + n] * sB[s * (N + 1) + n];
          v = dot * expf(sAcs[l] - sAcs[s]);
        }
        sM[e] = v;
      }
      __syncthreads();
      for (int e = tid; e < Lc * P; e += BLOCK) {
        const int l = e / P, p = e % P;
        float yd = 0.0f;
        for (int s = 0; s <= l; ++s) yd += sM[l * Lc + s] * sX[s * P + p];
        float yo = 0.0f;
        for (int n = 0; n < N; ++n) yo += sC[l * N + n] * sIn[n * P + p];
        out[((t0 + l) * H + h) * P + p] = yd + yo * expf(sAcs[l]);
      }
    }
    __syncthreads();  // the next chunk overwrites sX, sB, sC, sM, sAcs
  }
  if (FINAL) {
    for (int e = tid; e < N * P; e += BLOCK) {
      const int n = e / P, p = e % P;
      float acc = 0.0f;
      for (int k = 1; k <= NC; ++k) acc += expf(sCs[NC] - sCs[k]) * sSt[(k - 1) * N * P + e];
      out[((b * H + h) * P + p) * N + n] = acc;
    }
  }
}
