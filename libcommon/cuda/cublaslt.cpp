// cuBLASLt loader.
#include "libcommon/cuda/cublaslt.hpp"

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {
LoadOnce g_load;
CublasLt g_lt;
const CudaLibrary kLibrary{"cuBLASLt (libcublasLt)", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"},
                         "the CUDA toolkit's cuBLAS (pip: nvidia-cublas), or set CUDA_HOME to a toolkit"};

template <class F> void load(F& fn, void* h, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(h, name, kLibrary));
}

void load_all() {
  void* h = open_library(kLibrary);
  CublasLt& l = g_lt;
  load(l.create, h, "cublasLtCreate");
  load(l.destroy, h, "cublasLtDestroy");
  load(l.getVersion, h, "cublasLtGetVersion");
  load(l.matmulDescCreate, h, "cublasLtMatmulDescCreate");
  load(l.matmulDescDestroy, h, "cublasLtMatmulDescDestroy");
  load(l.matmulDescSetAttribute, h, "cublasLtMatmulDescSetAttribute");
  load(l.matrixLayoutCreate, h, "cublasLtMatrixLayoutCreate");
  load(l.matrixLayoutDestroy, h, "cublasLtMatrixLayoutDestroy");
  load(l.matrixLayoutSetAttribute, h, "cublasLtMatrixLayoutSetAttribute");
  load(l.preferenceCreate, h, "cublasLtMatmulPreferenceCreate");
  load(l.preferenceDestroy, h, "cublasLtMatmulPreferenceDestroy");
  load(l.preferenceSetAttribute, h, "cublasLtMatmulPreferenceSetAttribute");
  load(l.algoGetHeuristic, h, "cublasLtMatmulAlgoGetHeuristic");
  load(l.matmul, h, "cublasLtMatmul");
}
}  // namespace

const CublasLt& CublasLt::get() {
  g_load.run(load_all);
  g_load.rethrow();
  return g_lt;
}

bool CublasLt::available(std::string* why) {
  g_load.run(load_all);
  if (why) *why = g_load.why();
  return g_load.why().empty();
}

void CublasLt::check(cublasStatus_t s, const std::string& what) const {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt status " + std::to_string(static_cast<int>(s)));
}

}  // namespace ca::cuda
