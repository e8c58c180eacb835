// cuBLASLt opened with dlopen (libcublasLt.so.13/12), for the plan's `gemm` steps. Types and
// signatures come from the real <cublasLt.h>; nothing is linked.
#pragma once
#include <cublasLt.h>

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

}  // namespace ca::cuda
