// Multi-head attention over short sequences (a few tokens per sequence), one warp per (query
// position, sequence, head), online softmax over the keys (running max, rescaled sum and output),
// so any sequence length works and nothing [S, S] is stored.
// qkv: the packed in-projection output, rows of 3E floats ([q | k | v], head h at h * HD in each);
// the row of token s of sequence n is s * ss + n * sn (seq-first [S, Nb, E]: ss = Nb, sn = 1;
// batch-first [Nb, S, E]: ss = 1, sn = S). out: rows of E floats, same row numbering, heads side by
// side (what out_proj reads). HD <= 128. scale = 1/sqrt(HD), applied to q.k as PyTorch scales q.
__global__ void tf_attn_small(const float* qkv, float* out, int S, int Nb, int NH, int HD, int E, long long ss,
                              long long sn, float scale) {
  const long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (w >= (long long)S * Nb * NH) return;  // whole warps leave together
  const int h = (int)(w % NH);
  const long long sq_n = w / NH;
  const int n = (int)(sq_n % Nb);
  const int sq = (int)(sq_n / Nb);
  const float* q = qkv + (sq * ss + n * sn) * 3 * E + h * HD;
  float qv[4], acc[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < HD ? q[d] : 0.0f;
    acc[i] = 0.0f;
  }
  float m = __int_as_float(0xff800000), l = 0.0f;
  for (int j = 0; j < S; ++j) {
    const float* kr = qkv + (j * ss + n * sn) * 3 * E + E + h * HD;
    const float* vr = kr + E;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + 32 * i;
      if (d < HD) dot += qv[i] * kr[d];
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float sc = dot * scale;
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn);  // 0 on the first key (m = -inf)
    const float p = expf(sc - mn);
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int d = lane + 32 * i;
      if (d < HD) acc[i] = acc[i] * corr + p * vr[d];
    }
    m = mn;
  }
  float* o = out + (sq * ss + n * sn) * E + h * HD;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int d = lane + 32 * i;
    if (d < HD) o[d] = acc[i] / l;
  }
}
