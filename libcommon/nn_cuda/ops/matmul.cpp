// Linear layers on the GPU: matmul_forward, matmul_backward (declared in libcommon/nn_cuda/ops.hpp), on
// cuBLASLt (Gpu::gemm) with the row-major to column-major mapping; the bias gradient is matmul.cu's
// column_sum_add, which rmsnorm.cpp launches too (ops::column_sum_add).
//   CPU twin  ca::nn::matmul_forward, ca::nn::matmul_backward (libcommon/nn/ops.hpp)
//   test      tests/nn_cuda/ops/matmul_test.cpp
#include "libcommon/errors.hpp"
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> matmul_kernels() { return for_both_dtypes({"column_sum_add"}); }

void column_sum_add(Gpu& gpu, DType dt, Ptr out, Ptr a, Ptr b, Ptr rowscale, int rows, int cols) {
  int rpb = kColumnRows;
  gpu.launch(kernel("column_sum_add", dt), {cdiv(cols, 256), cdiv(rows, rpb)}, {256}, 0,
             {&out, &a, &b, &rowscale, &rows, &cols, &cols, &rpb});
}

}  // namespace ops

// Row-major out[rows, N] = in[rows, K] w[N, K]^T is, column-major, out^T (N x rows) = w^T... :
// A = w seen as K x N (lda K) transposed, B = in seen as K x rows (ldb K), C = out (ldc N).
void matmul_forward(Gpu& gpu, DType dt, Ptr out, Ptr in, Ptr w, Ptr bias, int rows, int K, int N, Ptr residual) {
  Gpu::Gemm g;
  g.trans_a = true;
  g.m = N, g.n = rows, g.k = K;
  g.a = w, g.lda = K;
  g.b = in, g.ldb = K;
  g.c = residual ? residual : out, g.d = out, g.ldc = N;
  g.beta = residual ? 1.f : 0.f;
  g.bias = bias;
  g.in = g.out = dt;
  if (bias && residual) throw InternalError("nn_cuda matmul_forward: bias and residual together are not supported");
  gpu.gemm(g);
}

void matmul_backward(Gpu& gpu, DType dt, Ptr din, bool accumulate_din, Ptr dw, Ptr dbias, Ptr dout, Ptr in, Ptr w,
                     int rows, int K, int N) {
  if (din) {  // din (K x rows) = w (K x N, ld K) * dout (N x rows, ld N)
    Gpu::Gemm g;
    g.m = K, g.n = rows, g.k = N;
    g.a = w, g.lda = K;
    g.b = dout, g.ldb = N;
    g.d = din, g.ldc = K;
    g.beta = accumulate_din ? 1.f : 0.f;
    g.in = g.out = dt;
    gpu.gemm(g);
  }
  if (dw) {  // dw (K x N, ld K) += in (K x rows) * dout^T (rows x N)
    Gpu::Gemm g;
    g.trans_b = true;
    g.m = K, g.n = N, g.k = rows;
    g.a = in, g.lda = K;
    g.b = dout, g.ldb = N;
    g.d = dw, g.ldc = K;
    g.beta = 1.f;
    g.in = dt, g.out = DType::F32;
    gpu.gemm(g);
  }
  if (dbias) ops::column_sum_add(gpu, dt, dbias, dout, 0, 0, rows, N);
}

}  // namespace ca::nn_cuda
