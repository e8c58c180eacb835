// ViT patch embedding pieces (KernelBench level3/28_VisionTransformer).
// vit_patches: img.unfold(2, p, p).unfold(3, p, p).reshape(B, -1, p*p*C). The unfolded tensor is
// [B, C, G, G, p, p] (G = image / p) and the reshape takes it in that order, so the flattened index
// f = (((c * G + gy) * G + gx) * p + py) * p + px of image b holds img[b, c, gy*p + py, gx*p + px];
// out is [B, G*G*C*p*p] = [B * G*G, C*p*p] rows, written in order (coalesced).
__global__ void vit_patches(const float* img, float* out, int B, int C, int HW, int p) {
  const int G = HW / p;
  const long long per = (long long)C * HW * HW;  // = C * G * G * p * p
  const long long n = (long long)B * per;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long b = e / per;
    long long f = e % per;
    const int px = (int)(f % p);
    f /= p;
    const int py = (int)(f % p);
    f /= p;
    const int gx = (int)(f % G);
    f /= G;
    const int gy = (int)(f % G);
    const int c = (int)(f / G);
    out[e] = img[((b * C + c) * HW + gy * p + py) * (long long)HW + gx * p + px];
  }
}

// x [B, S1, E] (S1 = patches + 1) holds the patch embeddings in rows 1.. of each image (row 0
// unwritten): x[b, 0] = cls + pos[0]; x[b, s] += pos[s] for s >= 1 (torch.cat then += pos).
__global__ void vit_add_pos(float* x, const float* cls, const float* pos, int B, int S1, int E) {
  const long long n = (long long)B * S1 * E;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const int c = (int)(e % E);
    const int s = (int)((e / E) % S1);
    const long long i = (long long)s * E + c;
    x[e] = (s == 0 ? cls[c] : x[e]) + pos[i];
  }
}
