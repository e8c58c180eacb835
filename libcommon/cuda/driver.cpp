// CUDA driver loader: dlopen libcuda.so.1, then every entry point through cuGetProcAddress at the
// version of its PFN_ typedef, so a newer driver never hands us an entry point of another signature.
#include "libcommon/cuda/driver.hpp"

#include "libcommon/cuda/dl.hpp"
#include "libcommon/errors.hpp"

namespace ca::cuda {

bool CudaError::sticky() const {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return true;
    default:
      return false;
  }
}

namespace {
LoadOnce g_load;
Driver g_driver;
const CudaLibrary kLibrary{"CUDA driver (libcuda.so.1)", {"libcuda.so.1", "libcuda.so"},
                         "the NVIDIA driver (it brings libcuda.so.1; in a container, start it with the GPU runtime)"};

PFN_cuGetProcAddress_v12000 g_get_proc = nullptr;

template <class F> void load(F& fn, const char* name, int version) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  CUresult r = g_get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r != CUDA_SUCCESS || !p) throw LibraryMissing(kLibrary, std::string("entry point ") + name + " missing (driver too old?)");
  fn = reinterpret_cast<F>(p);
}

void load_all() {
  void* h = open_library(kLibrary);
  g_get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(library_symbol(h, "cuGetProcAddress_v2", kLibrary));
  Driver& d = g_driver;
  load(d.cuInit, "cuInit", 2000);
  load(d.cuDriverGetVersion, "cuDriverGetVersion", 2020);
  load(d.cuDeviceGetCount, "cuDeviceGetCount", 2000);
  load(d.cuDeviceGet, "cuDeviceGet", 2000);
  load(d.cuDeviceGetName, "cuDeviceGetName", 2000);
  load(d.cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000);
  load(d.cuDeviceTotalMem, "cuDeviceTotalMem", 3020);
  load(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
  load(d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
  load(d.cuCtxSetCurrent, "cuCtxSetCurrent", 4000);
  load(d.cuCtxSynchronize, "cuCtxSynchronize", 2000);
  load(d.cuCtxGetDevice, "cuCtxGetDevice", 2000);
  load(d.cuCtxGetCurrent, "cuCtxGetCurrent", 4000);
  load(d.cuCtxCreate, "cuCtxCreate", 12050);
  load(d.cuCtxDestroy, "cuCtxDestroy", 4000);
  load(d.cuCtxPushCurrent, "cuCtxPushCurrent", 4000);
  load(d.cuCtxPopCurrent, "cuCtxPopCurrent", 4000);
  load(d.cuCtxSetLimit, "cuCtxSetLimit", 3010);
  load(d.cuCtxGetLimit, "cuCtxGetLimit", 3010);
  load(d.cuModuleLoadData, "cuModuleLoadData", 2000);
  load(d.cuModuleUnload, "cuModuleUnload", 2000);
  load(d.cuModuleGetFunction, "cuModuleGetFunction", 2000);
  load(d.cuModuleGetGlobal, "cuModuleGetGlobal", 3020);
  load(d.cuFuncGetAttribute, "cuFuncGetAttribute", 2020);
  load(d.cuFuncSetAttribute, "cuFuncSetAttribute", 9000);
  load(d.cuLaunchKernel, "cuLaunchKernel", 4000);
  load(d.cuLaunchKernelEx, "cuLaunchKernelEx", 11060);
  load(d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050);
  load(d.cuMemAlloc, "cuMemAlloc", 3020);
  load(d.cuMemFree, "cuMemFree", 3020);
  load(d.cuMemGetInfo, "cuMemGetInfo", 3020);
  load(d.cuMemcpyHtoD, "cuMemcpyHtoD", 3020);
  load(d.cuMemcpyDtoH, "cuMemcpyDtoH", 3020);
  load(d.cuMemcpyDtoD, "cuMemcpyDtoD", 3020);
  load(d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020);
  load(d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020);
  load(d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync", 3020);
  load(d.cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 4000);
  load(d.cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010);
  load(d.cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 11000);
  load(d.cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010);
  load(d.cuMemsetD8, "cuMemsetD8", 3020);
  load(d.cuMemsetD32, "cuMemsetD32", 3020);
  load(d.cuMemsetD8Async, "cuMemsetD8Async", 3020);
  load(d.cuMemsetD32Async, "cuMemsetD32Async", 3020);
  load(d.cuStreamCreate, "cuStreamCreate", 2000);
  load(d.cuStreamDestroy, "cuStreamDestroy", 4000);
  load(d.cuStreamSynchronize, "cuStreamSynchronize", 2000);
  load(d.cuStreamQuery, "cuStreamQuery", 2000);
  load(d.cuStreamWaitEvent, "cuStreamWaitEvent", 3020);
  load(d.cuStreamBeginCapture, "cuStreamBeginCapture", 10010);
  load(d.cuStreamEndCapture, "cuStreamEndCapture", 10000);
  load(d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040);
  load(d.cuGraphLaunch, "cuGraphLaunch", 10000);
  load(d.cuGraphDestroy, "cuGraphDestroy", 10000);
  load(d.cuGraphExecDestroy, "cuGraphExecDestroy", 10000);
  load(d.cuEventCreate, "cuEventCreate", 2000);
  load(d.cuEventRecord, "cuEventRecord", 2000);
  load(d.cuEventSynchronize, "cuEventSynchronize", 2000);
  load(d.cuEventElapsedTime, "cuEventElapsedTime", 12080);
  load(d.cuEventDestroy, "cuEventDestroy", 4000);
  load(d.cuGetErrorName, "cuGetErrorName", 6000);
  load(d.cuGetErrorString, "cuGetErrorString", 6000);
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) throw EnvironmentError("CUDA driver: cuInit failed: " + d.error_text(r));
  d.cuDriverGetVersion(&d.driver_version);
  d.cuDeviceGetCount(&d.device_count);
  if (d.device_count == 0) throw EnvironmentError("CUDA driver: no GPU visible");
}
}  // namespace

Driver& Driver::get() {
  g_load.run(load_all);
  g_load.rethrow();
  return g_driver;
}

bool Driver::available(std::string* why) {
  g_load.run(load_all);
  if (why) *why = g_load.why();
  return g_load.why().empty();
}

std::string Driver::error_text(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(static_cast<int>(r))) + ": " + (text ? text : "?");
}

void Driver::check(CUresult r, const std::string& what) const {
  if (r != CUDA_SUCCESS) throw CudaError(r, what + ": " + error_text(r));
}

DeviceInfo Driver::device_info(int ordinal) const {
  DeviceInfo info;
  info.ordinal = ordinal;
  CUdevice dev;
  check(cuDeviceGet(&dev, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  char name[256] = {0};
  cuDeviceGetName(name, sizeof name - 1, dev);
  info.name = name;
  cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  cuDeviceGetAttribute(&info.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  cuDeviceTotalMem(&info.total_memory, dev);
  return info;
}

CUcontext Driver::primary_context(int ordinal) const {
  CUdevice dev;
  check(cuDeviceGet(&dev, ordinal), "cuDeviceGet(" + std::to_string(ordinal) + ")");
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

}  // namespace ca::cuda
