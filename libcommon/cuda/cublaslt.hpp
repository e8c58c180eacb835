// cuBLASLt opened with dlopen (libcublasLt.so.13/12), for the plan's `gemm` steps. Types and
// signatures come from the real <cublasLt.h>; nothing is linked.
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <string>

namespace ca::cuda {

struct CublasLt {
  static const CublasLt& get();  // LibraryMissing (dl.hpp) when missing
  static bool available(std::string* why = nullptr);

  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtGetVersion) getVersion = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmulDescDestroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrixLayoutDestroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrixLayoutSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;

  void check(cublasStatus_t s, const std::string& what) const;  // throws InternalError-like CudaError
};

// The alignment in bytes a matrix at device address `address` has, as the heuristic's preferences
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES take it: the largest power of two dividing it, at
// most 256. Those preferences default to 256 ("selecting a smaller value will exclude algorithms that
// can not work with matrix A that is not as strictly aligned as they need", cublasLt.h): left at the
// default, cublasLtMatmulAlgoGetHeuristic may pick an algorithm that needs 16-byte (vectorized)
// loads for a view that starts at an odd element (x[:, 1:], a weight's second half).
inline uint32_t pointer_alignment(uint64_t address) {
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a >>= 1;
  return a;
}

}  // namespace ca::cuda
