// cuDNN loader.
#include "libcommon/cuda/cudnn.hpp"

#include <stdexcept>

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

namespace {
LoadOnce g_load;
Cudnn g_dnn;
const CudaLibrary kLibrary{"cuDNN (libcudnn.so.9)", {"libcudnn.so.9", "libcudnn.so"},
                         "cuDNN 9 (pip: nvidia-cudnn-cu12, or NVIDIA's libcudnn9 package)"};

template <class F> void load(F& fn, void* h, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(h, name, kLibrary));
}

void load_all() {
  void* h = open_library(kLibrary);
  Cudnn& c = g_dnn;
  load(c.getVersion, h, "cudnnGetVersion");
  load(c.getErrorString, h, "cudnnGetErrorString");
  load(c.create, h, "cudnnCreate");
  load(c.destroy, h, "cudnnDestroy");
  load(c.setStream, h, "cudnnSetStream");
  load(c.createTensorDescriptor, h, "cudnnCreateTensorDescriptor");
  load(c.setTensor4dDescriptor, h, "cudnnSetTensor4dDescriptor");
  load(c.destroyTensorDescriptor, h, "cudnnDestroyTensorDescriptor");
  load(c.createFilterDescriptor, h, "cudnnCreateFilterDescriptor");
  load(c.setFilter4dDescriptor, h, "cudnnSetFilter4dDescriptor");
  load(c.destroyFilterDescriptor, h, "cudnnDestroyFilterDescriptor");
  load(c.createConvolutionDescriptor, h, "cudnnCreateConvolutionDescriptor");
  load(c.setConvolution2dDescriptor, h, "cudnnSetConvolution2dDescriptor");
  load(c.setConvolutionGroupCount, h, "cudnnSetConvolutionGroupCount");
  load(c.setConvolutionMathType, h, "cudnnSetConvolutionMathType");
  load(c.destroyConvolutionDescriptor, h, "cudnnDestroyConvolutionDescriptor");
  load(c.getConvolutionForwardAlgorithm_v7, h, "cudnnGetConvolutionForwardAlgorithm_v7");
  load(c.getConvolutionForwardWorkspaceSize, h, "cudnnGetConvolutionForwardWorkspaceSize");
  load(c.convolutionForward, h, "cudnnConvolutionForward");
  load(c.addTensor, h, "cudnnAddTensor");
  load(c.setTensorNdDescriptor, h, "cudnnSetTensorNdDescriptor");
  load(c.setFilterNdDescriptor, h, "cudnnSetFilterNdDescriptor");
  load(c.setConvolutionNdDescriptor, h, "cudnnSetConvolutionNdDescriptor");
  load(c.getConvolutionBackwardDataAlgorithm_v7, h, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
  load(c.getConvolutionBackwardDataWorkspaceSize, h, "cudnnGetConvolutionBackwardDataWorkspaceSize");
  load(c.convolutionBackwardData, h, "cudnnConvolutionBackwardData");
}
}  // namespace

const Cudnn& Cudnn::get() {
  g_load.run(load_all);
  g_load.rethrow();
  return g_dnn;
}

bool Cudnn::available(std::string* why) {
  g_load.run(load_all);
  if (why) *why = g_load.why();
  return g_load.why().empty();
}

void Cudnn::check(cudnnStatus_t s, const std::string& what) const {
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(what + ": " + getErrorString(s));
}

}  // namespace ca::cuda
