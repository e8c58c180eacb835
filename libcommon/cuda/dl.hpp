// dlopen helpers for the CUDA libraries: every CUDA library is opened at run time, never linked, so
// every tool starts (and does its CPU part) on a machine without a GPU, driver or toolkit. A missing
// library or symbol is reported one way for all of them: LibraryMissing, thrown from one place.
#pragma once
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "libcommon/errors.hpp"

namespace ca::cuda {

// One CUDA library as its loader asks for it.
struct CudaLibrary {
  std::string what;                // how a user knows it: "NVRTC (libnvrtc)"
  std::vector<std::string> names;  // file names dlopen tries, in order
  std::string install;             // what to install (or set) when none opens
};

// The one error a CUDA library loader throws for a library or symbol it cannot find: an
// EnvironmentError (exit 3) whose message names the library, what went wrong and what to install:
// "NVRTC (libnvrtc) not available (tried libnvrtc.so.13, ...): <dlerror>; install <...>".
struct LibraryMissing : EnvironmentError {
  LibraryMissing(const CudaLibrary& lib, const std::string& detail);
  std::string library;  // lib.what
};

// The first of lib.names that dlopen accepts (each tried as given, then under the extra directories:
// $CUDA_HOME/lib64, /usr/local/cuda/lib64, and the nvidia/*/lib folders of torch's pip wheels).
// Throws LibraryMissing naming every name tried, with dlerror's last word.
void* open_library(const CudaLibrary& lib);
// dlsym that throws LibraryMissing ("symbol X missing (library too old?)") instead of returning null.
void* library_symbol(void* handle, const char* name, const CudaLibrary& lib);

// A loader's one-time load (thread-safe): run() calls load once; afterwards rethrow() throws the
// ca::Error it ended with (LibraryMissing, or another EnvironmentError such as "no GPU visible"),
// with its type, and why() says it ("" when it loaded).
class LoadOnce {
 public:
  void run(void (*load)());
  void rethrow() const;
  const std::string& why() const { return why_; }

 private:
  std::once_flag once_;
  std::exception_ptr failure_;
  std::string why_;
};

}  // namespace ca::cuda
