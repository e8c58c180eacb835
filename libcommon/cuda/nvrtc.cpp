// NVRTC loader.
#include "libcommon/cuda/nvrtc.hpp"

#include <mutex>

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {
std::once_flag g_once;
Nvrtc g_nvrtc;
std::string g_error;

template <class F> void load(F& fn, void* h, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(h, name, "NVRTC"));
}

void load_all() {
  try {
    void* h = open_library({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, "NVRTC (libnvrtc)");
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
  } catch (const Error& e) {
    g_error = e.what();
  }
}
}  // namespace

const Nvrtc& Nvrtc::get() {
  std::call_once(g_once, load_all);
  if (!g_error.empty()) throw EnvironmentError(g_error);
  return g_nvrtc;
}

bool Nvrtc::available(std::string* why) {
  std::call_once(g_once, load_all);
  if (why) *why = g_error;
  return g_error.empty();
}

void Nvrtc::check(nvrtcResult r, const char* what) const {
  if (r != NVRTC_SUCCESS) throw InternalError(std::string("NVRTC ") + what + ": " + getErrorString(r));
}

}  // namespace ca::cuda
