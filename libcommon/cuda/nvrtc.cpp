// NVRTC loader.
#include "libcommon/cuda/nvrtc.hpp"

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {
LoadOnce g_load;
Nvrtc g_nvrtc;
const CudaLibrary kLibrary{"NVRTC (libnvrtc)", {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
                         "the CUDA toolkit's NVRTC (pip: nvidia-cuda-nvrtc), or set CUDA_HOME to a toolkit"};

template <class F> void load(F& fn, void* h, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(h, name, kLibrary));
}

void load_all() {
  void* h = open_library(kLibrary);
  Nvrtc& n = g_nvrtc;
  load(n.version, h, "nvrtcVersion");
  load(n.getErrorString, h, "nvrtcGetErrorString");
  load(n.createProgram, h, "nvrtcCreateProgram");
  load(n.destroyProgram, h, "nvrtcDestroyProgram");
  load(n.compileProgram, h, "nvrtcCompileProgram");
  load(n.getProgramLogSize, h, "nvrtcGetProgramLogSize");
  load(n.getProgramLog, h, "nvrtcGetProgramLog");
  load(n.getPTXSize, h, "nvrtcGetPTXSize");
  load(n.getPTX, h, "nvrtcGetPTX");
  load(n.getCUBINSize, h, "nvrtcGetCUBINSize");
  load(n.getCUBIN, h, "nvrtcGetCUBIN");
  load(n.addNameExpression, h, "nvrtcAddNameExpression");
  load(n.getLoweredName, h, "nvrtcGetLoweredName");
  n.version(&n.major, &n.minor);
}
}  // namespace

const Nvrtc& Nvrtc::get() {
  g_load.run(load_all);
  g_load.rethrow();
  return g_nvrtc;
}

bool Nvrtc::available(std::string* why) {
  g_load.run(load_all);
  if (why) *why = g_load.why();
  return g_load.why().empty();
}

void Nvrtc::check(nvrtcResult r, const char* what) const {
  if (r != NVRTC_SUCCESS) throw InternalError(std::string("NVRTC ") + what + ": " + getErrorString(r));
}

}  // namespace ca::cuda
