// dlopen helpers for the CUDA libraries: every CUDA library is opened at run time, never linked, so
// every tool starts (and does its CPU part) on a machine without a GPU, driver or toolkit.
#pragma once
#include <string>
#include <vector>

namespace ca::cuda {

// The first of `names` that dlopen accepts (each tried as given, then under the extra directories:
// $CUDA_HOME/lib64, /usr/local/cuda/lib64, and the nvidia/*/lib folders of torch's pip wheels).
// Throws EnvironmentError naming `what` and every name tried, with dlerror's last word.
void* open_library(const std::vector<std::string>& names, const std::string& what);
// dlsym that throws EnvironmentError ("<what>: symbol X missing") instead of returning null.
void* library_symbol(void* handle, const char* name, const std::string& what);

}  // namespace ca::cuda
