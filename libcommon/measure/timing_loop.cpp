// The timing loop (see timing_loop.hpp).
#include "libcommon/measure/timing_loop.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/log.hpp"

namespace ca::measure {

Json LoopOptions::to_json() const {
  Json j = stop.to_json();
  j["warmup_calls"] = warmup_calls;
  j["warmup_min_s"] = warmup_min_s;
  j["batch"] = batch;
  return j;
}

Json KernelStat::to_json() const {
  return Json{{"name", demangled},
              {"mangled", name},
              {"grid", {grid[0], grid[1], grid[2]}},
              {"block", {block[0], block[1], block[2]}},
              {"registers", registers_per_thread},
              {"shared_bytes", static_shared_bytes + dynamic_shared_bytes},
              {"static_shared_bytes", static_shared_bytes},
              {"dynamic_shared_bytes", dynamic_shared_bytes},
              {"launches", launches},
              {"time_us", time_us.to_json()}};
}

std::vector<KernelStat> aggregate_kernels(const std::vector<cuda::KernelActivity>& records) {
  using Key = std::tuple<std::string, int, int, int, int, int, int>;
  std::map<Key, std::pair<KernelStat, std::vector<double>>> by;
  for (const auto& r : records) {
    Key key{r.name, r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2]};
    auto& [stat, times] = by[key];
    if (times.empty()) {
      stat.name = r.name;
      stat.demangled = cuda::demangle(r.name);
      std::copy(r.grid, r.grid + 3, stat.grid);
      std::copy(r.block, r.block + 3, stat.block);
      stat.registers_per_thread = r.registers_per_thread;
      stat.static_shared_bytes = r.static_shared_bytes;
      stat.dynamic_shared_bytes = r.dynamic_shared_bytes;
    }
    times.push_back(r.duration_us());
  }
  std::vector<KernelStat> out;
  for (auto& [key, v] : by) {
    v.first.launches = int64_t(v.second.size());
    v.first.time_us = summarize(v.second);
    out.push_back(std::move(v.first));
  }
  std::sort(out.begin(), out.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.time_us.mean * double(a.launches) > b.time_us.mean * double(b.launches);
  });
  return out;
}

std::string incomplete_call_records(const std::vector<cuda::KernelActivity>& records, int64_t calls) {
  std::map<uint64_t, int64_t> per_call;
  for (const auto& r : records) ++per_call[r.external_id];
  if (int64_t(per_call.size()) != calls)
    return log::cat("CUPTI saw kernels of ", per_call.size(), " of ", calls, " timed calls");
  int64_t least = INT64_MAX, most = 0;
  for (const auto& [id, n] : per_call) {
    least = std::min(least, n);
    most = std::max(most, n);
  }
  if (least != most)
    return log::cat("CUPTI saw between ", least, " and ", most,
                    " kernels per timed call of one graph (every replay runs the same kernels): records were lost");
  return "";
}

std::vector<double> host_floor_us(const std::vector<double>& host_us, const std::vector<double>& overhead_us, int64_t kernels) {
  const double overhead = overhead_us.empty() ? 0.0 : summarize(overhead_us).median;
  const double gaps = kHostGapUs * double(std::max<int64_t>(0, kernels - 1));
  std::vector<double> out;
  out.reserve(host_us.size());
  for (double h : host_us) out.push_back(std::max(0.0, h - overhead - gaps));
  return out;
}

std::string hold_to_host_floor(std::vector<double>& times, const std::vector<double>& floor, const std::string& timer) {
  if (times.empty() || floor.size() != times.size()) return "";
  const double got = summarize(times).median, least = summarize(floor).median;
  if (got >= least * (1 - kHostSlack) - kHostSlackUs) return "";
  times = floor;
  return log::cat("the ", timer, " time's median (", got, " us) was under what the host clock saw of the calls less the launch "
                  "overhead (", least, " us): the host's floor is the time (a GPU timer's records do not match the work)");
}

namespace {
void append_note(std::string& notes, const std::string& note) {
  if (!note.empty()) notes += (notes.empty() ? "" : "; ") + note;
}
}  // namespace

void append_round(LoopResult& into, const LoopResult& more) {
  auto append = [](std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); };
  append(into.event_us, more.event_us);
  append(into.device_us, more.device_us);
  if (more.device_us.empty()) into.device_us.clear();
  append(into.host_us, more.host_us);
  append(into.host_overhead_us, more.host_overhead_us);
  append(into.host_floor_us, more.host_floor_us);
  into.event = summarize(into.event_us);
  into.device = summarize(into.device_us);
  into.calls += more.calls;
  into.timed_wall_s += more.timed_wall_s;
  append_note(into.host_bound_note, more.host_bound_note);
}

namespace {
struct Events {
  std::vector<CUevent> start, end;
  explicit Events(int n) {
    auto& drv = cuda::Driver::get();
    start.resize(n);
    end.resize(n);
    for (int i = 0; i < n; ++i) {
      drv.check(drv.cuEventCreate(&start[i], CU_EVENT_DEFAULT), "cuEventCreate");
      drv.check(drv.cuEventCreate(&end[i], CU_EVENT_DEFAULT), "cuEventCreate");
    }
  }
  ~Events() {
    auto& drv = cuda::Driver::get();
    for (auto e : start) drv.cuEventDestroy(e);
    for (auto e : end) drv.cuEventDestroy(e);
  }
};
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

constexpr int kOverheadSamples = 32;

// A graph of one empty kernel, launched and bracketed by the host's clock exactly as time_target
// brackets a timed call (the stream idle; start event, the call's CUPTI correlation pushed, the
// launch, popped, end event; to the completion the host sees): the launch overhead a call's bracket
// holds beyond its kernels. Bracketed under the same tracing as the calls and once after each of
// them (session 34, H100: 32 brackets before CUPTI began read 1.3 us less than the calls' own
// overhead, and held an honest 9.7 us copy to a 11.0 us floor). Its kernel's records carry the
// correlation 0, which device time leaves out (no call of the target's).
class EmptyCall {
 public:
  // Made, then bracketed kOverheadSamples times into `samples` (after two that warm the launch path).
  EmptyCall(CUstream timed, cuda::CuptiTracer* tracer, std::vector<double>& samples) {
    make();
    try {
      for (int i = 0; i < kOverheadSamples + 2; ++i) {
        const double us = bracket(timed, tracer);
        if (i >= 2) samples.push_back(us);
      }
    } catch (...) {
      cuda::Driver::get().cuGraphExecDestroy(exec_);  // no destructor runs for a constructor that throws
      throw;
    }
  }
  ~EmptyCall() {
    if (exec_) cuda::Driver::get().cuGraphExecDestroy(exec_);
  }
  EmptyCall(const EmptyCall&) = delete;
  EmptyCall& operator=(const EmptyCall&) = delete;

  double bracket(CUstream stream, cuda::CuptiTracer* traced) {
    auto& drv = cuda::Driver::get();
    drv.check(drv.cuStreamSynchronize(stream), "empty call");
    const auto h0 = std::chrono::steady_clock::now();
    drv.check(drv.cuEventRecord(ev_.start[0], stream), "cuEventRecord");
    if (traced) traced->push_call(0);
    CUresult launched = drv.cuGraphLaunch(exec_, stream);
    if (traced) traced->pop_call();
    drv.check(launched, "cuGraphLaunch (empty call)");
    drv.check(drv.cuEventRecord(ev_.end[0], stream), "cuEventRecord");
    drv.check(drv.cuStreamSynchronize(stream), "empty call");
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
  }

 private:
  void make() {
    auto& drv = cuda::Driver::get();
    CUstream stream = nullptr;
    drv.check(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate (empty call)");
    CUfunction empty = bundle::trusted_kernel("host_bound_empty.cu", "extern \"C\" __global__ void ca_host_bound_empty() {}",
                                              "ca_host_bound_empty");
    CUgraph graph = nullptr;
    CUresult began = drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    CUresult launched = began == CUDA_SUCCESS ? drv.cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr) : began;
    CUresult ended = began == CUDA_SUCCESS ? drv.cuStreamEndCapture(stream, &graph) : began;
    drv.cuStreamDestroy(stream);
    drv.check(began, "cuStreamBeginCapture");
    drv.check(launched, "empty kernel (capture)");
    drv.check(ended, "cuStreamEndCapture");
    CUresult r = drv.cuGraphInstantiateWithFlags(&exec_, graph, 0);
    drv.cuGraphDestroy(graph);
    drv.check(r, "cuGraphInstantiate");
  }

  CUgraphExec exec_ = nullptr;
  Events ev_{1};
};

// Warm-up: the same sequence as a timed call, untimed; its seconds.
double warm_up(TimedTarget& target, CUstream stream, L2Flusher& flusher, const LoopOptions& options) {
  auto& drv = cuda::Driver::get();
  const int sets = std::max(1, target.input_sets());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < options.warmup_calls || seconds_since(t0) < options.warmup_min_s; ++i) {
    target.prepare(i % sets, stream);
    flusher.flush(stream);
    target.enqueue(i % sets, stream);
    drv.check(drv.cuStreamSynchronize(stream), "warm-up call");
    if (i > 10000) break;
  }
  return seconds_since(t0);
}

// The host floor applied to one GPU timer's values (hold_to_host_floor), its text kept.
void hold(LoopResult& result, std::vector<double>& times, const char* timer) {
  append_note(result.host_bound_note, hold_to_host_floor(times, result.host_floor_us, timer));
}

// After the timed calls: the CUPTI records of the calls' kernels into the per-kernel statistics and
// the device time per call (none when some call's records were lost), held to the host floor.
void device_times(LoopResult& result, cuda::CuptiTracer& cupti, int64_t calls, const LoopOptions& options, bool host_bound) {
  auto records = cupti.end();
  // The call's kernels, by identity: launched from inside enqueue().
  records.erase(std::remove_if(records.begin(), records.end(), [](const cuda::KernelActivity& a) { return a.external_id == 0; }),
                records.end());
  result.kernels = aggregate_kernels(records);
  // A sum over some of a call's kernels is no device time: none then (the profile compares nothing).
  if (std::string why = incomplete_call_records(records, calls); !why.empty()) {
    result.cupti_note = why + (cupti.dropped_records() ? log::cat(" (", cupti.dropped_records(), " records dropped)") : "") +
                        ": no device time";
    return;
  }
  std::vector<double> per_call = cuda::device_time_per_call_us(records);
  // The device-time sample keeps the calls whose events were kept, so both describe the same calls.
  if (per_call.size() > result.event_us.size()) per_call.resize(result.event_us.size());
  if (options.forged_records_scale != 1)
    for (double& t : per_call) t *= options.forged_records_scale;
  result.device_us = per_call;
  // The kernels of a call (every call of a graph runs the same: incomplete_call_records), for the gaps
  // its host bracket may hold between them.
  result.kernels_per_call = calls > 0 ? int64_t(records.size()) / calls : 0;
  if (host_bound) {
    result.host_floor_us = host_floor_us(result.host_us, result.host_overhead_us, result.kernels_per_call);
    hold(result, result.device_us, "device");
  }
  result.device = summarize(result.device_us);
}
}  // namespace

LoopResult time_target(TimedTarget& target, CUstream stream, L2Flusher& flusher, const LoopOptions& options) {
  auto& drv = cuda::Driver::get();
  LoopResult result;
  const int sets = std::max(1, target.input_sets());

  result.warmup_s = warm_up(target, stream, flusher, options);

  const bool host_bound = options.host_bound && options.batch == 1;
  cuda::CuptiTracer* cupti = options.use_cupti ? &cuda::CuptiTracer::instance() : nullptr;
  const bool traced = cupti && cupti->available();
  if (!traced) result.cupti_note = cupti ? "CUPTI unavailable: " + cupti->why() : "CUPTI off (--no-cupti)";
  if (traced) cupti->begin();
  cuda::CuptiTracer* tracer = traced ? cupti : nullptr;
  // The host's bracket of an empty call (EmptyCall): the launch overhead a call's bracket holds.
  std::optional<EmptyCall> empty;
  if (host_bound) empty.emplace(stream, tracer, result.host_overhead_us);

  const int batch = std::max(1, options.batch);
  Events ev(batch);
  StopTracker tracker(options.stop);
  auto start = std::chrono::steady_clock::now();
  int64_t call = 0;
  for (;;) {
    for (int b = 0; b < batch; ++b, ++call) {
      const int set = int(call % sets);
      target.prepare(set, stream);
      flusher.flush(stream);
      std::chrono::steady_clock::time_point h0;
      if (host_bound) {
        drv.check(drv.cuStreamSynchronize(stream), "flush");
        h0 = std::chrono::steady_clock::now();
      }
      drv.check(drv.cuEventRecord(ev.start[b], stream), "cuEventRecord");
      if (traced) cupti->push_call(uint64_t(call) + 1);
      try {
        target.enqueue(set, stream);
      } catch (...) {
        if (traced) cupti->pop_call();
        throw;
      }
      if (traced) cupti->pop_call();
      drv.check(drv.cuEventRecord(ev.end[b], stream), "cuEventRecord");
      if (host_bound) {
        drv.check(drv.cuStreamSynchronize(stream), "timed call");
        result.host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count());
        result.host_overhead_us.push_back(empty->bracket(stream, tracer));  // the overhead beside this call, untimed
      }
    }
    drv.check(drv.cuStreamSynchronize(stream), "timed calls");
    StopReason stop = StopReason::none;
    for (int b = 0; b < batch; ++b) {
      float ms = 0;
      drv.check(drv.cuEventElapsedTime(&ms, ev.start[b], ev.end[b]), "cuEventElapsedTime");
      result.event_us.push_back(double(ms) * 1e3);
      stop = tracker.update(result.event_us, seconds_since(start));
      if (stop != StopReason::none) break;  // later calls of the batch are dropped (events only)
    }
    if (stop != StopReason::none) {
      result.stop = stop;
      break;
    }
  }
  result.timed_wall_s = seconds_since(start);
  result.calls = call;
  // The host brackets of the calls whose events were kept (a batch's later calls are dropped at a stop).
  if (result.host_us.size() > result.event_us.size()) result.host_us.resize(result.event_us.size());
  if (options.forged_records_scale != 1)
    for (double& t : result.event_us) t *= options.forged_records_scale;
  if (host_bound) {
    result.host_floor_us = host_floor_us(result.host_us, result.host_overhead_us, 1);  // the events hold the gaps
    hold(result, result.event_us, "event");
  }
  result.event = summarize(result.event_us);
  if (traced) device_times(result, *cupti, call, options, host_bound);
  return result;
}

}  // namespace ca::measure
