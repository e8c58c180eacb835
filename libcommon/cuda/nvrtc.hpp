// NVRTC opened with dlopen (libnvrtc.so.13, libnvrtc.so, or under /usr/local/cuda/lib64): compiles
// CUDA C++ to PTX and cubin on the CPU, no driver needed. Types come from the real <nvrtc.h>.
#pragma once
#include <nvrtc.h>

#include <string>

namespace ca::cuda {

struct Nvrtc {
  // The loaded library (opened once, thread-safe). Throws LibraryMissing (dl.hpp) when NVRTC is missing.
  static const Nvrtc& get();
  static bool available(std::string* why = nullptr);

  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) getErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) createProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) destroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) compileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) getProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) getProgramLog = nullptr;
  decltype(&::nvrtcGetPTXSize) getPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) getPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) getCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) getCUBIN = nullptr;
  decltype(&::nvrtcAddNameExpression) addNameExpression = nullptr;
  decltype(&::nvrtcGetLoweredName) getLoweredName = nullptr;

  int major = 0, minor = 0;
  std::string version_text() const { return std::to_string(major) + "." + std::to_string(minor); }
  // Throws InternalError with NVRTC's message unless r == NVRTC_SUCCESS.
  void check(nvrtcResult r, const char* what) const;
};

}  // namespace ca::cuda
