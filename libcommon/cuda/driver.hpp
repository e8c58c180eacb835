// The CUDA driver API opened with dlopen (libcuda.so.1) through cuGetProcAddress; function pointer
// types are the PFN_ typedefs of the real <cudaTypedefs.h>, nothing is linked. Used by kernel-check's
// runner and the bundle executor, and by kernel-prof.
//
//   auto& drv = ca::cuda::Driver::get();          // EnvironmentError when there is no driver / GPU
//   CUcontext ctx = drv.primary_context(0);         // retained and made current on this thread
//   drv.check(drv.cuMemAlloc(&ptr, bytes), "cuMemAlloc");
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>

namespace ca::cuda {

// A failed driver call: the CUresult is kept so callers can tell a sticky fault (illegal address,
// trap: the context is dead, the process must go) from an ordinary error.
struct CudaError : std::runtime_error {
  CudaError(CUresult r, const std::string& what) : std::runtime_error(what), result(r) {}
  CUresult result;
  bool sticky() const;  // the context is unusable after this error
};

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  int sm_count = 0;
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

struct Driver {
  // Loads libcuda.so.1 and calls cuInit(0) once; safe to call from several threads. Throws
  // LibraryMissing (dl.hpp) when libcuda or an entry point is missing, EnvironmentError when cuInit
  // fails or no GPU is visible.
  static Driver& get();
  static bool available(std::string* why = nullptr);

  PFN_cuInit_v2000 cuInit = nullptr;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion = nullptr;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease = nullptr;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxCreate_v12050 cuCtxCreate = nullptr;  // cuCtxCreate_v4: params may be null
  PFN_cuCtxDestroy_v4000 cuCtxDestroy = nullptr;
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent = nullptr;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent = nullptr;
  PFN_cuCtxSetLimit_v3010 cuCtxSetLimit = nullptr;
  PFN_cuCtxGetLimit_v3010 cuCtxGetLimit = nullptr;
  PFN_cuModuleLoadData_v2000 cuModuleLoadData = nullptr;
  PFN_cuModuleUnload_v2000 cuModuleUnload = nullptr;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction = nullptr;
  PFN_cuModuleGetGlobal_v3020 cuModuleGetGlobal = nullptr;
  PFN_cuFuncGetAttribute_v2020 cuFuncGetAttribute = nullptr;
  PFN_cuFuncSetAttribute_v9000 cuFuncSetAttribute = nullptr;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel = nullptr;
  PFN_cuLaunchKernelEx_v11060 cuLaunchKernelEx = nullptr;  // cooperative and cluster launches
  PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050 cuOccupancyMaxActiveBlocksPerMultiprocessor = nullptr;
  PFN_cuMemAlloc_v3020 cuMemAlloc = nullptr;
  PFN_cuMemFree_v3020 cuMemFree = nullptr;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo = nullptr;
  PFN_cuMemcpyHtoD_v3020 cuMemcpyHtoD = nullptr;
  PFN_cuMemcpyDtoH_v3020 cuMemcpyDtoH = nullptr;
  PFN_cuMemcpyDtoD_v3020 cuMemcpyDtoD = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync = nullptr;
  PFN_cuMemcpyDtoDAsync_v3020 cuMemcpyDtoDAsync = nullptr;
  PFN_cuMemcpyPeerAsync_v4000 cuMemcpyPeerAsync = nullptr;  // between contexts of one device too
  PFN_cuMemsetD8_v3020 cuMemsetD8 = nullptr;
  PFN_cuMemsetD32_v3020 cuMemsetD32 = nullptr;
  PFN_cuMemsetD8Async_v3020 cuMemsetD8Async = nullptr;
  PFN_cuMemsetD32Async_v3020 cuMemsetD32Async = nullptr;
  PFN_cuStreamCreate_v2000 cuStreamCreate = nullptr;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy = nullptr;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize = nullptr;
  PFN_cuStreamQuery_v2000 cuStreamQuery = nullptr;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent = nullptr;  // the event may be another context's
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture = nullptr;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture = nullptr;
  PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags = nullptr;
  PFN_cuGraphLaunch_v10000 cuGraphLaunch = nullptr;
  PFN_cuGraphDestroy_v10000 cuGraphDestroy = nullptr;
  PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy = nullptr;
  PFN_cuEventCreate_v2000 cuEventCreate = nullptr;
  PFN_cuEventRecord_v2000 cuEventRecord = nullptr;
  PFN_cuEventSynchronize_v2000 cuEventSynchronize = nullptr;
  PFN_cuEventElapsedTime_v12080 cuEventElapsedTime = nullptr;
  PFN_cuEventDestroy_v4000 cuEventDestroy = nullptr;
  PFN_cuIpcGetMemHandle_v4010 cuIpcGetMemHandle = nullptr;
  PFN_cuIpcOpenMemHandle_v11000 cuIpcOpenMemHandle = nullptr;
  PFN_cuIpcCloseMemHandle_v4010 cuIpcCloseMemHandle = nullptr;
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;

  int driver_version = 0;  // e.g. 13000
  int device_count = 0;

  // "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"
  std::string error_text(CUresult r) const;
  // Throws CudaError("<what>: <error_text>") unless r == CUDA_SUCCESS.
  void check(CUresult r, const std::string& what) const;
  DeviceInfo device_info(int ordinal) const;
  // Retains the device's primary context (the one cuBLASLt and cuDNN use too) and makes it current.
  CUcontext primary_context(int ordinal) const;
};

// `ctx` current while this lives; the context current before it (`before`) made current again after.
class ContextSwitch {
 public:
  explicit ContextSwitch(CUcontext ctx) {
    const Driver& d = Driver::get();
    d.check(d.cuCtxGetCurrent(&before), "cuCtxGetCurrent");
    d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  ~ContextSwitch() { Driver::get().cuCtxSetCurrent(before); }
  ContextSwitch(const ContextSwitch&) = delete;
  ContextSwitch& operator=(const ContextSwitch&) = delete;
  CUcontext before = nullptr;
};

}  // namespace ca::cuda
