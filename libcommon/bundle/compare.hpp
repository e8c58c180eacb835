// Output comparison in the parent: the candidate's outputs against the reference worker's, with
// dtype-aware tolerances (|got - want| <= atol + rtol * |want|, as torch.allclose), NaN/Inf named.
#pragma once
#include <string>

#include "libcommon/jsonl.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::bundle {

struct Tolerance {
  double atol = 1e-2, rtol = 1e-2;
  // "default": 1e-2 for every dtype (as published); "strict": 1e-4 for fp32/fp64 (as KernelBench
  // now), 1e-2 for fp16/bf16, 0 for integers. Overrides >= 0 win.
  static Tolerance for_dtype(const std::string& mode, const std::string& dtype, double atol_override, double rtol_override);
};

struct CompareResult {
  bool ok = true;
  std::string reason;  // first failure: which output, which index, expected vs got
  double max_abs_err = 0, max_rel_err = 0, mismatch_fraction = 0;
  ca::Json to_json() const;
};

CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const std::string& mode, double atol,
                              double rtol);

}  // namespace ca::bundle
