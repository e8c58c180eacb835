// cuBLASLt loader.
#include "libcommon/cuda/cublaslt.hpp"

#include <mutex>

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {
std::once_flag g_once;
CublasLt g_lt;
std::string g_error;

template <class F> void load(F& fn, void* h, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(h, name, "cuBLASLt"));
}

void load_all() {
  try {
    void* h = open_library({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, "cuBLASLt (libcublasLt)");
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
  } catch (const Error& e) {
    g_error = e.what();
  }
}
}  // namespace

const CublasLt& CublasLt::get() {
  std::call_once(g_once, load_all);
  if (!g_error.empty()) throw EnvironmentError(g_error);
  return g_lt;
}

bool CublasLt::available(std::string* why) {
  std::call_once(g_once, load_all);
  if (why) *why = g_error;
  return g_error.empty();
}

void CublasLt::check(cublasStatus_t s, const std::string& what) const {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(what + ": cuBLASLt status " + std::to_string(static_cast<int>(s)));
}

}  // namespace ca::cuda
