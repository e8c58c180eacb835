// Row softmax, one block per row, the row cached in dynamic shared memory (launch with
// shared: cols * 4). causal != 0 masks as masked_fill(tril == 0, -inf) of a [.., T, T] score
// tensor: in row r, the query index is i = r % qlen and columns j > i become 0 (exp(-inf)).
// Column 0 is never masked, so the max is finite. x and y may be the same buffer (in place).
#include "tf_reduce.cuh"

template <int BLOCK>
__global__ void tf_softmax_rows(const float* x, float* y, long long rows, int cols, int qlen, int causal) {
  extern __shared__ float tf_sm_row[];
  __shared__ float red[32];
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const int valid = causal ? (int)(row % qlen) + 1 : cols;  // columns [0, valid) take part
  const float* xr = x + row * cols;
  float m = TF_NEG_INF;
  for (int c = threadIdx.x; c < valid; c += BLOCK) {
    float v = xr[c];
    tf_sm_row[c] = v;
    m = fmaxf(m, v);
  }
  m = tf_block_max<BLOCK>(m, red);
  float s = 0.0f;
  for (int c = threadIdx.x; c < valid; c += BLOCK) {
    float e = expf(tf_sm_row[c] - m);
    tf_sm_row[c] = e;
    s += e;
  }
  const float inv = 1.0f / tf_block_sum<BLOCK>(s, red);
  float* yr = y + row * cols;
  for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c] = c < valid ? tf_sm_row[c] * inv : 0.0f;
}

// att = relu(masked_fill(att, tril == 0, -inf)) in place over [rows, T] where row r's query index
// is r % T: j <= i keeps max(v, 0) (NaN stays NaN as torch.relu keeps it), j > i becomes 0.
__global__ void tf_relu_causal(float* att, long long rows, int T) {
  const long long n = rows * T;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const int j = (int)(e % T);
    const int i = (int)((e / T) % T);
    float v = att[e];
    att[e] = j <= i ? (v > 0.0f || v != v ? v : 0.0f) : 0.0f;
  }
}
