// The native transformer's CUDA kernels as one NVRTC module: the sources of ops/*.cu and *.cuh
// (compiled at run time as one translation unit) and the name expressions of every template
// instantiation the launchers use ("rmsnorm_forward<__nv_bfloat16>"). Both are generated at build
// time from the ops/ folder (libcommon/CMakeLists.txt, kernels.cpp.in): the sources embedded, the
// names gathered from each family's ops::<family>_kernels() in ops/<family>.cpp. There is no list of
// families or kernels to keep by hand.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace ca::nn_cuda {

// The sources by their path in the repository (embedded at build time), as compile_bundle takes them.
const std::map<std::string, std::string>& kernel_sources();
// Every family's name expressions, families in file-name order.
std::vector<std::string> kernel_names();

}  // namespace ca::nn_cuda
