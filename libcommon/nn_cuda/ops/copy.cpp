// Copies and dtype conversions on the GPU: copy_rows, convert (declared in libcommon/nn_cuda/ops.hpp).
//   CPU twin  a row copy, and ca::float_to_bf16 / ca::bf16_to_float (libcommon/safetensors.hpp)
//   test      tests/nn_cuda/ops/copy_test.cpp
#include "libcommon/nn_cuda/ops/common.hpp"

namespace ca::nn_cuda {

namespace ops {

// The name expressions of the kernels launched here (kernel_names() gathers every family's).
std::vector<std::string> copy_kernels() {
  std::vector<std::string> names = for_both_dtypes({"copy_rows"});
  names.push_back("convert<float, __nv_bfloat16>");
  names.push_back("convert<__nv_bfloat16, float>");
  return names;
}

}  // namespace ops

void copy_rows(Gpu& gpu, DType dt, Ptr dst, int ldd, Ptr src, int lds, int rows, int cols) {
  gpu.launch(ops::kernel("copy_rows", dt), {unsigned(rows)}, {256}, 0, {&dst, &ldd, &src, &lds, &rows, &cols});
}

void convert(Gpu& gpu, DType to, Ptr out, DType from, Ptr in, std::size_t n) {
  long long nn = (long long)n;
  if (to == from) {
    gpu.check(gpu.drv().cuMemcpyDtoDAsync(out, in, n * dtype_size(to), gpu.stream()), "cuMemcpyDtoD");
    return;
  }
  std::string name = std::string("convert<") + dtype_cpp(to) + ", " + dtype_cpp(from) + ">";
  gpu.launch(name, {ops::cdiv(nn, 256)}, {256}, 0, {&out, &in, &nn});
}

}  // namespace ca::nn_cuda
