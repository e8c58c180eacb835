// x [B, 2, E] for the encoder: x[b, 0] = cls_token, x[b, 1] = lp[b] (torch.cat((cls, lp.unsqueeze(1)), 1)).
__global__ void cvit_cls_concat(const float* cls, const float* lp, float* x, int B, int E) {
  const long long n = (long long)B * 2 * E;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const int c = (int)(e % E);
    const int s = (int)((e / E) % 2);
    const long long b = e / (2 * E);
    x[e] = s == 0 ? cls[c] : lp[b * E + c];
  }
}
