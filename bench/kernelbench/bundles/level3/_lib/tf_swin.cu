// Swin (KernelBench level3 29_SwinMLP, 30_SwinTransformerV2) kernels. Tokens are [B, H, W, C]
// (row (b * H + y) * W + x of a [B * H * W, C] matrix); windows of ws x ws tokens, window (wy, wx)
// of image b, token j = iy * ws + ix inside it, as window_partition orders them. Head dim <= 32,
// ws * ws <= 64 (Swin's 7 x 7 windows and 32-wide heads).

// PatchMerging's gather: out[b, (i, j), :] = cat(x[2i, 2j], x[2i+1, 2j], x[2i, 2j+1], x[2i+1, 2j+1])
// (x0, x1, x2, x3 of the reference) -> [B * H/2 * W/2, 4C].
__global__ void swin_merge_gather(const float* x, float* out, int B, int H, int W, int C) {
  const int Ho = H / 2, Wo = W / 2;
  const long long n = (long long)B * Ho * Wo * 4 * C;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const int cc = (int)(e % (4 * C));
    const long long t = e / (4 * C);
    const int j = (int)(t % Wo);
    const int i = (int)((t / Wo) % Ho);
    const long long b = t / ((long long)Wo * Ho);
    const int part = cc / C, c = cc % C;
    const int dy = part & 1, dx = part >> 1;  // x1 is the odd row, x2 the odd column
    out[e] = x[((b * H + 2 * i + dy) * W + 2 * j + dx) * C + c];
  }
}

// AdaptiveAvgPool1d(1) over the tokens: out[b, c] = sum_l x[b, l, c] / L.
__global__ void swin_avgpool(const float* x, float* out, int B, int L, int C) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= B * C) return;
  const int b = e / C, c = e % C;
  float s = 0.0f;
  for (int l = 0; l < L; ++l) s += x[((long long)b * L + l) * C + c];
  out[e] = s / (float)L;
}

// Swin MLP's spatial MLP with its residual, one block per (image, window, head):
// the shifted frame is x zero-padded by pad = ws - shift on the top/left and shift on the
// bottom/right (shift > 0; none when shift = 0); in that frame, window token i of head h gets
// bias[h*NT + i] + sum_j w[h*NT + i, j] * xn[token j, h*hd + d] (the grouped Conv1d, padding tokens
// are 0), and tokens that are inside the image write out = shortcut + that. out may be shortcut.
// xn [B, H, W, C] (norm1's output), w [nh * NT, NT] (Conv1d weight, kernel size 1), NT = ws * ws.
__global__ void swin_spatial_mlp(const float* xn, const float* shortcut, const float* w, const float* bias, float* out,
                                 int B, int H, int W, int C, int nh, int ws, int shift) {
  __shared__ float sw[64 * 64];
  __shared__ float sin_[64 * 32];
  const int NT = ws * ws, hd = C / nh;
  const int pad = shift > 0 ? ws - shift : 0, ext = shift > 0 ? ws : 0;
  const int nWx = (W + ext) / ws, nWy = (H + ext) / ws;
  int r = blockIdx.x;
  const int h = r % nh;
  r /= nh;
  const int wx = r % nWx;
  r /= nWx;
  const int wy = r % nWy;
  const long long b = r / nWy;
  for (int e = threadIdx.x; e < NT * NT; e += blockDim.x) sw[e] = w[(long long)h * NT * NT + e];
  for (int e = threadIdx.x; e < NT * hd; e += blockDim.x) {
    const int j = e / hd, d = e % hd;
    const int y = wy * ws + j / ws - pad, x = wx * ws + j % ws - pad;
    sin_[e] = (y >= 0 && y < H && x >= 0 && x < W) ? xn[((b * H + y) * W + x) * C + h * hd + d] : 0.0f;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < NT * hd; e += blockDim.x) {
    const int i = e / hd, d = e % hd;
    const int y = wy * ws + i / ws - pad, x = wx * ws + i % ws - pad;
    if (y < 0 || y >= H || x < 0 || x >= W) continue;
    float acc = 0.0f;
    for (int j = 0; j < NT; ++j) acc += sw[i * NT + j] * sin_[j * hd + d];
    const long long idx = ((b * H + y) * W + x) * C + h * hd + d;
    out[idx] = shortcut[idx] + (acc + bias[h * NT + i]);
  }
}

// Swin V2 (init): the continuous relative position bias of one block:
// table[t, h] = cpb_mlp(coords[t]) = W2[h] . relu(W1 coords[t] + b1) (Linear(2, 512), ReLU,
// Linear(512, nh, no bias)); out[h, i, j] = 16 * sigmoid(table[index[i, j], h]).
// coords [T, 2] (relative_coords_table), index [NT * NT] (relative_position_index, int64).
// One thread per (h, i, j); the 512-wide hidden layer is recomputed per entry (init, untimed).
__global__ void swin2_rpb_init(const float* coords, const float* w1, const float* b1, const float* w2,
                               const long long* index, float* out, int nh, int NT, int hidden) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= nh * NT * NT) return;
  const int h = e / (NT * NT), ij = e % (NT * NT);
  const long long t = index[ij];
  const float c0 = coords[t * 2], c1 = coords[t * 2 + 1];
  float acc = 0.0f;
  for (int k = 0; k < hidden; ++k) {
    const float a = fmaxf(w1[k * 2] * c0 + w1[k * 2 + 1] * c1 + b1[k], 0.0f);
    acc += w2[(long long)h * hidden + k] * a;
  }
  out[e] = 16.0f / (1.0f + expf(-acc));
}

// Swin V2 (init): the qkv bias cat(q_bias, zeros, v_bias) [3C].
__global__ void swin2_qkv_bias_init(const float* q_bias, const float* v_bias, float* out, int C) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= 3 * C) return;
  out[e] = e < C ? q_bias[e] : e < 2 * C ? 0.0f : v_bias[e - 2 * C];
}

// Swin V2 window attention, one block per (image, window, head) of the cyclically shifted frame
// (torch.roll by -shift: frame position p holds token (p + shift) mod H/W; the reverse roll puts
// the output back at that same token). qkv [B * H * W, 3C] (the qkv linear of every token, bias
// included), out [B * H * W, C] (heads side by side, before proj). Cosine attention:
//   s[i, j] = normalize(q_i) . normalize(k_j) * exp(min(logit_scale[h], log(100))) + rpb[h, i, j]
//             (+ mask[window, i, j] when mask is given: shift > 0), softmax over j, o_i = sum_j p v_j.
// mask: the block's attn_mask buffer [nW, NT, NT], or the same pointer as rpb with use_mask = 0.
__global__ void swin2_window_attn(const float* qkv, float* out, const float* logit_scale, const float* rpb,
                                  const float* mask, int use_mask, int B, int H, int W, int C, int nh, int ws,
                                  int shift) {
  __shared__ float sq[64][33], sk[64][33], sv[64][33];
  __shared__ float sp[64][65];
  __shared__ long long srow[64];
  const int NT = ws * ws, hd = C / nh;
  const int nWx = W / ws, nWy = H / ws;
  int r = blockIdx.x;
  const int h = r % nh;
  r /= nh;
  const int wx = r % nWx;
  r /= nWx;
  const int wy = r % nWy;
  const long long b = r / nWy;
  const int widx = wy * nWx + wx;
  for (int j = threadIdx.x; j < NT; j += blockDim.x) {
    const int y = (wy * ws + j / ws + shift) % H, x = (wx * ws + j % ws + shift) % W;
    srow[j] = (b * H + y) * W + x;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < NT * hd; e += blockDim.x) {
    const int j = e / hd, d = e % hd;
    const float* row = qkv + srow[j] * 3 * C + h * hd + d;
    sq[j][d] = row[0];
    sk[j][d] = row[C];
    sv[j][d] = row[2 * C];
  }
  __syncthreads();
  // F.normalize(dim=-1): v / max(||v||, 1e-12), rows of q then rows of k
  for (int t = threadIdx.x; t < 2 * NT; t += blockDim.x) {
    float* v = t < NT ? sq[t] : sk[t - NT];
    float ss = 0.0f;
    for (int d = 0; d < hd; ++d) ss += v[d] * v[d];
    const float nrm = fmaxf(sqrtf(ss), 1e-12f);
    for (int d = 0; d < hd; ++d) v[d] = v[d] / nrm;
  }
  __syncthreads();
  const float scale = expf(fminf(logit_scale[h], logf(100.0f)));
  const float* bh = rpb + (long long)h * NT * NT;
  const float* mw = mask + (long long)widx * NT * NT;
  for (int e = threadIdx.x; e < NT * NT; e += blockDim.x) {
    const int i = e / NT, j = e % NT;
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot += sq[i][d] * sk[j][d];
    float s = dot * scale + bh[e];
    if (use_mask) s += mw[e];
    sp[i][j] = s;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  for (int i = warp; i < NT; i += nwarps) {
    float m = __int_as_float(0xff800000);
    for (int j = lane; j < NT; j += 32) m = fmaxf(m, sp[i][j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.0f;
    for (int j = lane; j < NT; j += 32) {
      const float p = expf(sp[i][j] - m);
      sp[i][j] = p;
      s += p;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    for (int j = lane; j < NT; j += 32) sp[i][j] = sp[i][j] / s;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < NT * hd; e += blockDim.x) {
    const int i = e / hd, d = e % hd;
    float acc = 0.0f;
    for (int j = 0; j < NT; ++j) acc += sp[i][j] * sv[j][d];
    out[srow[i] * C + h * hd + d] = acc;
  }
}
