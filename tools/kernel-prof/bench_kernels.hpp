// Reference kernels for kernel-prof's GPU tests and figures: a float4 copy of n floats (memory
// bound: its time tracks bytes moved) compiled with NVRTC, and a device-to-device memcpy target.
#pragma once
#include <cuda.h>

#include <string>

#include "libcommon/measure/timing_loop.hpp"

namespace ca::kernel_prof {

// One copy kernel over n floats (n % 4 == 0), `sets` source/destination pairs rotated.
class CopyKernelTarget : public measure::TimedTarget {
 public:
  CopyKernelTarget(std::size_t n_floats, int sets, const std::string& arch);
  ~CopyKernelTarget() override;
  int input_sets() const override { return int(src_.size()); }
  void enqueue(int set, CUstream stream) override;
  std::size_t bytes_moved() const { return 2 * n_ * sizeof(float); }  // read + write
  // Whether dst of `set` equals src (the copy really happened).
  bool verify(int set) const;

 private:
  std::size_t n_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  std::vector<CUdeviceptr> src_, dst_;
};

// cuMemcpyDtoDAsync of n floats: the device's own copy rate, to compare the kernel against.
class MemcpyTarget : public measure::TimedTarget {
 public:
  MemcpyTarget(std::size_t n_floats, int sets);
  ~MemcpyTarget() override;
  int input_sets() const override { return int(src_.size()); }
  void enqueue(int set, CUstream stream) override;
  std::size_t bytes_moved() const { return 2 * n_ * sizeof(float); }

 private:
  std::size_t n_;
  std::vector<CUdeviceptr> src_, dst_;
};

}  // namespace ca::kernel_prof
