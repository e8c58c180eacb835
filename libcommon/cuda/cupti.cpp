// CUPTI activity tracing through dlopen (see cupti.hpp).
#include "libcommon/cuda/cupti.hpp"

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "libcommon/cuda/dl.hpp"
#include "libcommon/log.hpp"

namespace ca::cuda {

namespace {

// The CUPTI entry points we use, resolved by name from the library we opened.
struct CuptiApi {
  decltype(&::cuptiGetResultString) get_result_string = nullptr;
  decltype(&::cuptiGetVersion) get_version = nullptr;
  decltype(&::cuptiSubscribe) subscribe = nullptr;
  decltype(&::cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&::cuptiActivityEnable) enable = nullptr;
  decltype(&::cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&::cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&::cuptiActivityGetNumDroppedRecords) num_dropped = nullptr;
  decltype(&::cuptiActivityPushExternalCorrelationId) push_external = nullptr;
  decltype(&::cuptiActivityPopExternalCorrelationId) pop_external = nullptr;
};
CuptiApi api;
CUpti_SubscriberHandle subscriber = nullptr;

constexpr std::size_t kBufferBytes = 8 << 20;

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (api.get_result_string && api.get_result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(int(r));
}

template <class F> void load(void* lib, const char* name, F& fn, const CudaLibrary& library) {
  fn = reinterpret_cast<F>(library_symbol(lib, name, library));
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  if (!buffer) return;
  CuptiTracer::instance().take_buffer(buffer, valid_size);
  std::free(buffer);
}

// A no-op callback: holding a subscriber makes a second profiling tool see us, and lets us see it.
void CUPTIAPI no_op_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

}  // namespace

CuptiTracer& CuptiTracer::instance() {
  static CuptiTracer* tracer = new CuptiTracer();  // never destroyed: CUPTI may call back at exit
  return *tracer;
}

CuptiTracer::CuptiTracer() { open(); }

void CuptiTracer::open() {
  // A profiler that injected itself (ncu, nsys, compute-sanitizer) owns CUPTI in this process.
  for (const char* var : {"CUDA_INJECTION64_PATH", "NV_COMPUTE_PROFILER_PERFWORKS_DIR"}) {
    if (const char* v = std::getenv(var); v && *v) {
      why_ = std::string("another profiler is attached (") + var + " is set, running under ncu/nsys?)";
      return;
    }
  }
  // libcupti ships with the toolkit (lib64, or extras/CUPTI/lib64) and with torch's pip wheels
  // (nvidia/cuda_cupti/lib), which open_library also searches.
  CudaLibrary library{"CUPTI (libcupti)", {}, "the CUDA toolkit's CUPTI (pip: nvidia-cuda-cupti), or set CUDA_AGENT_CUPTI to its path"};
  if (const char* p = std::getenv("CUDA_AGENT_CUPTI"); p && *p) library.names.emplace_back(p);
  library.names.insert(library.names.end(),
                       {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib/libcupti.so.13",
                        "/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13"});
  void* lib = nullptr;
  try {
    lib = open_library(library);
    Dl_info info{};
    library_path_ = ::dladdr(library_symbol(lib, "cuptiGetVersion", library), &info) && info.dli_fname
                        ? info.dli_fname
                        : library.names.back();
    load(lib, "cuptiGetResultString", api.get_result_string, library);
    load(lib, "cuptiGetVersion", api.get_version, library);
    load(lib, "cuptiSubscribe", api.subscribe, library);
    load(lib, "cuptiActivityRegisterCallbacks", api.register_callbacks, library);
    load(lib, "cuptiActivityEnable", api.enable, library);
    load(lib, "cuptiActivityFlushAll", api.flush_all, library);
    load(lib, "cuptiActivityGetNextRecord", api.next_record, library);
    load(lib, "cuptiActivityPushExternalCorrelationId", api.push_external, library);
    load(lib, "cuptiActivityPopExternalCorrelationId", api.pop_external, library);
  } catch (const LibraryMissing& e) {
    why_ = e.what();  // tracing off; callers fall back to CUDA events alone
    return;
  }
  // Optional: older CUPTI lacks it, and the dropped count then reads as unknown.
  api.num_dropped = reinterpret_cast<decltype(api.num_dropped)>(::dlsym(lib, "cuptiActivityGetNumDroppedRecords"));
  api.get_version(&version_);
  CUptiResult r = api.subscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(&no_op_callback), nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    why_ = "another CUPTI subscriber is active (running under ncu, nsys or a framework profiler?)";
    return;
  }
  if (r != CUPTI_SUCCESS) {
    why_ = "cuptiSubscribe: " + result_text(r);
    return;
  }
  if ((r = api.register_callbacks(&buffer_requested, &buffer_completed)) != CUPTI_SUCCESS) {
    why_ = "cuptiActivityRegisterCallbacks: " + result_text(r);
    return;
  }
  // CONCURRENT_KERNEL (not KERNEL): records without serializing kernels.
  if ((r = api.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
    why_ = "cuptiActivityEnable(CONCURRENT_KERNEL): " + result_text(r);
    return;
  }
  // Which kernels a timed call launched is known by identity: the call's API calls are marked with
  // an external correlation id, and CUPTI writes an external-correlation record for each driver
  // API record made inside the mark (so driver API records are enabled too, and ignored).
  for (auto kind : {CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
    if ((r = api.enable(kind)) != CUPTI_SUCCESS) {
      why_ = "cuptiActivityEnable(" + std::to_string(int(kind)) + "): " + result_text(r);
      return;
    }
  available_ = true;
  log::debug("CUPTI ", version_, " from ", library_path_);
}

void CuptiTracer::take_buffer(uint8_t* buffer, std::size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelActivity> got;
  std::vector<std::pair<uint32_t, uint64_t>> external;
  while (api.next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) external.emplace_back(e->correlationId, e->externalId);
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelActivity a;
    a.name = k->name ? k->name : "?";
    a.start_ns = k->start;
    a.end_ns = k->end;
    a.correlation_id = k->correlationId;
    a.device_id = k->deviceId;
    a.stream_id = k->streamId;
    a.graph_id = k->graphId;
    a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
    a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
    a.registers_per_thread = k->registersPerThread;
    a.static_shared_bytes = k->staticSharedMemory;
    a.dynamic_shared_bytes = k->dynamicSharedMemory;
    got.push_back(std::move(a));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  records_.insert(records_.end(), std::make_move_iterator(got.begin()), std::make_move_iterator(got.end()));
  for (auto& [corr, ext] : external) external_of_[corr] = ext;
}

void CuptiTracer::push_call(uint64_t id) {
  if (available_) api.push_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void CuptiTracer::pop_call() {
  uint64_t last = 0;
  if (available_) api.pop_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

void CuptiTracer::begin() {
  if (!available_) return;
  api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(mutex_);
  records_.clear();
  external_of_.clear();
}

std::vector<KernelActivity> CuptiTracer::end() {
  if (!available_) return {};
  CUptiResult r = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (r != CUPTI_SUCCESS) log::warn("cuptiActivityFlushAll: ", result_text(r));
  if (api.num_dropped) {
    size_t dropped = 0;
    if (api.num_dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS) dropped_ += dropped;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<KernelActivity> out;
  out.swap(records_);
  for (auto& k : out)
    if (auto it = external_of_.find(k.correlation_id); it != external_of_.end()) k.external_id = it->second;
  external_of_.clear();
  return out;
}

std::vector<double> device_time_per_call_us(const std::vector<KernelActivity>& records) {
  struct Call {
    uint64_t first_start = UINT64_MAX;
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [start, end) of each kernel, ns
  };
  std::map<uint64_t, Call> calls;
  for (const auto& r : records) {
    // External ids (push_call) and correlation ids kept apart: the high bit marks the latter.
    Call& c = calls[r.external_id ? r.external_id : (uint64_t(1) << 63 | r.correlation_id)];
    c.first_start = std::min(c.first_start, r.start_ns);
    c.spans.emplace_back(r.start_ns, std::max(r.start_ns, r.end_ns));
  }
  std::vector<Call*> ordered;
  for (auto& [id, c] : calls) ordered.push_back(&c);
  std::sort(ordered.begin(), ordered.end(), [](const Call* a, const Call* b) { return a->first_start < b->first_start; });
  std::vector<double> out;
  for (Call* c : ordered) {
    // The union's length: spans by start, each adding what reaches past the covered end so far.
    std::sort(c->spans.begin(), c->spans.end());
    uint64_t busy = 0, covered = 0;
    for (const auto& [start, end] : c->spans) {
      const uint64_t from = std::max(start, covered);
      if (end > from) busy += end - from;
      covered = std::max(covered, end);
    }
    out.push_back(double(busy) / 1e3);
  }
  return out;
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return mangled;
  std::string out(d);
  std::free(d);
  return out;
}

}  // namespace ca::cuda
