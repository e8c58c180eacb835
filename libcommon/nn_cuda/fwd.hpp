// nn_cuda's classes declared, not defined: for a header that holds them by pointer and should not
// pull in CUDA's headers (tools/ppo-step/backend.hpp). Their definitions: gpu.hpp and model.hpp.
#pragma once

namespace ca::nn_cuda {
class Gpu;
class CudaModel;
}  // namespace ca::nn_cuda
