// Output comparison in the parent: the candidate's outputs against the reference worker's, with
// dtype-aware tolerances (|got - want| <= atol + rtol * |want|, as torch.allclose), NaN/Inf named.
// Two places the bytes can be, one rule: on the host (safetensors tensors) or on the device (the
// runner's outputs and the worker's references mapped by CUDA IPC, compared by a trusted kernel
// where they are: gigabyte outputs never cross PCIe). Both reduce an output to the same
// OutputStats, and one function turns stats into the verdict.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::bundle {

struct Tolerance {
  double atol = 1e-2, rtol = 1e-2;
  // Bound on ||got - want|| / ||want|| (L2 over an output, non-finite reference elements left out):
  // allclose alone lets zero or constant outputs pass where the reference is small everywhere
  // (|want| < atol); this fails them wherever the reference is not itself zero.
  double rel_norm = 0.05;
  // "default": 1e-2 for every dtype (as published), relative norm 5e-2; "strict": 1e-4 for fp32/fp64
  // (as KernelBench now) with relative norm 1e-3, 1e-2 and 5e-2 for fp16/bf16, 0 for integers.
  // Overrides >= 0 win (atol, rtol; the norm bound stays).
  static Tolerance for_dtype(const std::string& mode, const std::string& dtype, double atol_override, double rtol_override);
};

struct CompareResult {
  bool ok = true;
  std::string reason;  // first failure: which output, which index, expected vs got
  double max_abs_err = 0, max_rel_err = 0, mismatch_fraction = 0;
  double rel_l2_err = 0;  // the largest ||got - want|| / ||want|| over the outputs
  ca::Json to_json() const;
};

CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const std::string& mode, double atol,
                              double rtol);

// One output on the device: its dtype and shape, and the address of its first byte in the current
// context (an IPC mapping or the process's own buffer).
struct DeviceOutput {
  std::string dtype;
  std::vector<int64_t> shape;
  CUdeviceptr ptr = 0;
};
using DeviceOutputs = std::map<std::string, DeviceOutput>;  // "outputs.0" -> ...

// The same comparison on the device, in the current context, on `stream` (synchronized before it
// returns). Throws cuda::CudaError when the device fails.
CompareResult compare_outputs_device(const DeviceOutputs& got, const DeviceOutputs& want, const std::string& mode,
                                     double atol, double rtol, CUstream stream);

}  // namespace ca::bundle
