// CUPTI activity tracing, opened with dlopen at run time: per-kernel device times (start/end on
// the GPU's clock) with launch shape and resources, for kernel-prof's device_time_us and per-kernel
// breakdown. When CUPTI is missing or another tool holds it (e.g. under ncu or nsys), tracing is
// unavailable and why() says so; callers then fall back to CUDA events alone.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ca::cuda {

struct KernelActivity {
  std::string name;  // mangled, as the driver knows it
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation_id = 0;  // one per API call: all kernels of one graph launch share it
  // The id pushed with push_call() around the API call that launched it; 0 when none was: the
  // kernels a caller launched itself (a flush, a scrub, a fingerprint) are told apart from the
  // timed call's by how they were launched, never by their names.
  uint64_t external_id = 0;
  uint32_t device_id = 0, stream_id = 0, graph_id = 0;
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers_per_thread = 0;
  int static_shared_bytes = 0, dynamic_shared_bytes = 0;
  double duration_us() const { return double(end_ns - start_ns) / 1e3; }
};

class CuptiTracer {
 public:
  // The process's one tracer (CUPTI's activity API is process-wide). The first call opens the
  // library and enables concurrent-kernel records; it never throws.
  static CuptiTracer& instance();

  bool available() const { return available_; }
  // Why tracing is off (a LibraryMissing's text: "CUPTI (libcupti) not available (tried ...): ...;
  // install ...", "another CUPTI subscriber is active
  // (running under ncu/nsys?)", ...); empty when available.
  const std::string& why() const { return why_; }
  const std::string& library_path() const { return library_path_; }
  uint32_t version() const { return version_; }

  // Drops every kernel record so far (flushes first): what follows begin() is what end() returns.
  // Call with the device idle (after a synchronize), since pending kernels may land on either side.
  void begin();
  // Flushes (the caller has synchronized the device) and returns the kernel records since begin(),
  // in completion order as CUPTI delivered them.
  std::vector<KernelActivity> end();
  uint64_t dropped_records() const { return dropped_; }
  // Marks the API calls this thread makes until pop_call() with `id` (> 0): every kernel they
  // launch carries it in external_id (CUPTI external correlation).
  void push_call(uint64_t id);
  void pop_call();

  // Called by CUPTI's buffer callback; public only for that.
  void take_buffer(uint8_t* buffer, std::size_t valid_bytes);

 private:
  CuptiTracer();
  void open();
  bool available_ = false;
  std::string why_, library_path_;
  uint32_t version_ = 0;
  uint64_t dropped_ = 0;
  std::mutex mutex_;
  std::vector<KernelActivity> records_;
  std::map<uint32_t, uint64_t> external_of_;  // correlation id -> pushed id
};

// Groups kernel records into calls: records sharing an external id (the API calls of one
// push_call() region), else a correlation id (one graph launch or one kernel launch), form one
// call, ordered by their first start. Returns per-call device time in us: the time at least one of
// its kernels was running (the union of their [start, end) intervals). That is the sum of their
// durations, the published profiler's device time, whenever no two overlap; where kernels do
// overlap (a library's streams, a programmatic dependent launch) a sum would count the overlap
// twice, making a call that overlaps look slower than its GPU was busy.
std::vector<double> device_time_per_call_us(const std::vector<KernelActivity>& records);

// Demangled name when the C++ runtime can ("void scale_add<float>(float const*, ...)"), else as is.
std::string demangle(const std::string& mangled);

}  // namespace ca::cuda
