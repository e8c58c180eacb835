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

// An L2 flush by reading (a kernel summing a buffer twice the L2): leaves clean lines behind,
// where the memset flush leaves dirty ones the timed kernel must write back. For the bench's
// comparison of flush methods only; kernel-prof and the worker both use the memset flush.
class ReadFlush {
 public:
  ReadFlush(std::size_t bytes, const std::string& arch);
  ~ReadFlush();
  void flush(CUstream stream);

 private:
  std::size_t bytes_;
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  CUdeviceptr buffer_ = 0, sink_ = 0;
};

// `inner` with a ReadFlush before every call (in prepare, outside the timed window).
class ReadFlushedTarget : public measure::TimedTarget {
 public:
  ReadFlushedTarget(measure::TimedTarget& inner, ReadFlush& flush) : inner_(inner), flush_(flush) {}
  int input_sets() const override { return inner_.input_sets(); }
  void prepare(int set, CUstream stream) override {
    inner_.prepare(set, stream);
    flush_.flush(stream);
  }
  void enqueue(int set, CUstream stream) override { inner_.enqueue(set, stream); }

 private:
  measure::TimedTarget& inner_;
  ReadFlush& flush_;
};

}  // namespace ca::kernel_prof
