// Head split and merge for multi-head attention (64-bit indices).
// tf_split_qkv: qkv [B, T, 3, H, D] (a c_attn / in_proj output row [q | k | v], each H heads of D)
//   -> out [3, B, H, T, D] (q, k, v each [B, H, T, D], dense per (b, h) for batched gemms).
// row_stride is the qkv row length in floats (3 * H * D for a packed projection).
__global__ void tf_split_qkv(const float* qkv, float* out, int B, int T, int H, int D, long long row_stride) {
  const long long per = (long long)B * H * T * D;
  const long long n = 3 * per;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    // e indexes the source in order (b, t, part, h, d): reads coalesced
    const int d = (int)(e % D);
    long long r = e / D;
    const int h = (int)(r % H);
    r /= H;
    const int part = (int)(r % 3);
    r /= 3;
    const int t = (int)(r % T);
    const int b = (int)(r / T);
    const float v = qkv[((long long)b * T + t) * row_stride + ((long long)part * H + h) * D + d];
    out[part * per + (((long long)b * H + h) * T + t) * D + d] = v;
  }
}

// tf_merge_heads: y [B, H, T, D] -> out [B, T, H * D] (y.transpose(1, 2).contiguous().view(B, T, C)).
__global__ void tf_merge_heads(const float* y, float* out, int B, int H, int T, int D) {
  const long long n = (long long)B * H * T * D;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    // e indexes the destination (b, t, h, d): writes coalesced
    const int d = (int)(e % D);
    long long r = e / D;
    const int h = (int)(r % H);
    r /= H;
    const int t = (int)(r % T);
    const int b = (int)(r / T);
    out[e] = y[(((long long)b * H + h) * T + t) * D + d];
  }
}

// tf_transpose: in [batch, R, C] -> out [batch, C, R], 32x32 tiles through shared memory
// (block [32, 8], grid [cdiv(C, 32), cdiv(R, 32), batch]).
__global__ void tf_transpose(const float* in, float* out, int R, int C) {
  __shared__ float tile[32][33];
  const long long base = (long long)blockIdx.z * R * C;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int k = threadIdx.y; k < 32; k += 8) {
    int r = r0 + k, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[k][threadIdx.x] = in[base + (long long)r * C + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += 8) {
    int c = c0 + k, r = r0 + threadIdx.x;
    if (r < R && c < C) out[base + (long long)c * R + r] = tile[threadIdx.x][k];
  }
}

// tf_gather_rows: out[i, :] = in[i * stride + offset, :] for i < rows, rows of cols floats
// (x[:, 0] of a [B, S, E] tensor: stride S, offset 0).
__global__ void tf_gather_rows(const float* in, float* out, int rows, int cols, long long stride, long long offset) {
  const long long n = (long long)rows * cols;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long i = e / cols, c = e % cols;
    out[e] = in[(i * stride + offset) * cols + c];
  }
}
