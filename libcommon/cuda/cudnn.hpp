// cuDNN opened with dlopen (libcudnn.so.9), for the plan's `conv` steps (the legacy convolution
// API, which cuDNN 9 keeps). Types and signatures from the real <cudnn.h>; nothing is linked.
#pragma once
#include <cudnn.h>

#include <string>

namespace ca::cuda {

struct Cudnn {
  static const Cudnn& get();  // LibraryMissing (dl.hpp) when missing
  static bool available(std::string* why = nullptr);

  decltype(&::cudnnGetVersion) getVersion = nullptr;
  decltype(&::cudnnGetErrorString) getErrorString = nullptr;
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnDestroy) destroy = nullptr;
  decltype(&::cudnnSetStream) setStream = nullptr;
  decltype(&::cudnnCreateTensorDescriptor) createTensorDescriptor = nullptr;
  decltype(&::cudnnSetTensor4dDescriptor) setTensor4dDescriptor = nullptr;
  decltype(&::cudnnDestroyTensorDescriptor) destroyTensorDescriptor = nullptr;
  decltype(&::cudnnCreateFilterDescriptor) createFilterDescriptor = nullptr;
  decltype(&::cudnnSetFilter4dDescriptor) setFilter4dDescriptor = nullptr;
  decltype(&::cudnnDestroyFilterDescriptor) destroyFilterDescriptor = nullptr;
  decltype(&::cudnnCreateConvolutionDescriptor) createConvolutionDescriptor = nullptr;
  decltype(&::cudnnSetConvolution2dDescriptor) setConvolution2dDescriptor = nullptr;
  decltype(&::cudnnSetConvolutionGroupCount) setConvolutionGroupCount = nullptr;
  decltype(&::cudnnSetConvolutionMathType) setConvolutionMathType = nullptr;
  decltype(&::cudnnDestroyConvolutionDescriptor) destroyConvolutionDescriptor = nullptr;
  decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) getConvolutionForwardAlgorithm_v7 = nullptr;
  decltype(&::cudnnGetConvolutionForwardWorkspaceSize) getConvolutionForwardWorkspaceSize = nullptr;
  decltype(&::cudnnConvolutionForward) convolutionForward = nullptr;
  decltype(&::cudnnAddTensor) addTensor = nullptr;
  // N-d convolutions (1-d as 2-d with a height of 1, 3-d) and transposed ones (backward data).
  decltype(&::cudnnSetTensorNdDescriptor) setTensorNdDescriptor = nullptr;
  decltype(&::cudnnSetFilterNdDescriptor) setFilterNdDescriptor = nullptr;
  decltype(&::cudnnSetConvolutionNdDescriptor) setConvolutionNdDescriptor = nullptr;
  decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) getConvolutionBackwardDataAlgorithm_v7 = nullptr;
  decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize) getConvolutionBackwardDataWorkspaceSize = nullptr;
  decltype(&::cudnnConvolutionBackwardData) convolutionBackwardData = nullptr;

  void check(cudnnStatus_t s, const std::string& what) const;  // throws std::runtime_error
};

}  // namespace ca::cuda
