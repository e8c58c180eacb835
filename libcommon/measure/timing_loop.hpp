// The timing method of DESIGN.md §6 for anything that can enqueue one call on a stream (a bundle's
// forward steps replayed as a CUDA graph, a test's copy kernel): warm-up; before every timed call
// the L2 flush, the persisting-L2 reset and the call's own preparation (output poisoning), all
// outside the timed window; CUDA events around the call alone; input sets rotated; CUPTI kernel
// records for device time per call; stop by the rule in stop_rule.hpp.
#pragma once
#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

#include "libcommon/cuda/cupti.hpp"
#include "libcommon/jsonl.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/measure/stats.hpp"
#include "libcommon/measure/stop_rule.hpp"

namespace ca::measure {

class TimedTarget {
 public:
  virtual ~TimedTarget() = default;
  virtual int input_sets() const = 0;
  // Untimed work before call on `set` (e.g. poisoning its outputs), enqueued on `stream`.
  virtual void prepare(int set, CUstream stream) {}
  // The timed call itself: enqueue one forward call on input set `set`.
  virtual void enqueue(int set, CUstream stream) = 0;
};

struct LoopOptions {
  StopRule stop;
  int warmup_calls = 3;          // untimed calls first (module load, lazy init, clocks up)
  double warmup_min_s = 0.05;    // ... and at least this long, so the clocks have ramped
  int batch = 8;                 // calls enqueued before the host waits (the flush memset keeps the GPU behind)
  bool use_cupti = true;
  // With batch 1: each timed call also bracketed by the host's clock (the flush waited for, then from
  // before the start event to the call's completion seen by the host), and the loop's device and event
  // times held to at least what that clock saw less the launch overhead (host_floor_us). The GPU
  // writes its own timers' records (CUPTI's, the events') in memory of the candidate's context; the
  // host clock is the one no kernel can write.
  bool host_bound = false;
  // Tests only: the GPU timers' per-call values multiplied by this before the host floor holds them, as
  // a kernel that rewrote its timers' records would leave them (tests/kernel-prof/gpu_measure_test.cpp).
  double forged_records_scale = 1;
  // Device time counts only the kernels launched from inside enqueue() (CUPTI external correlation
  // marks its API calls): what prepare(), the flush or any trusted code launches is left out by how
  // it was launched, whatever its kernels are named.
  Json to_json() const;
};

struct KernelStat {  // one kernel of the call, aggregated over the timed calls
  std::string name, demangled;
  int grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  int registers_per_thread = 0, static_shared_bytes = 0, dynamic_shared_bytes = 0;
  int64_t launches = 0;  // over all timed calls
  Summary time_us;       // per launch
  Json to_json() const;
};

struct LoopResult {
  std::vector<double> event_us;   // per timed call, CUDA events around the call
  std::vector<double> device_us;  // per timed call, sum of its kernels' CUPTI durations (empty without CUPTI)
  Summary event, device;
  std::vector<KernelStat> kernels;
  StopReason stop = StopReason::none;
  double timed_wall_s = 0, warmup_s = 0;
  std::string cupti_note;  // why device time is missing or approximate; empty when all is well
  int64_t calls = 0;       // timed calls made
  // host_bound: per timed call, the host's bracket of it (us); the bracket of an empty graph of one
  // empty kernel, timed the same way under the same tracing, 32 times before the calls and once after
  // each (the launch overhead); the kernels a call runs;
  // and the host floor per call (host_us less the overhead's median and kHostGapUs per kernel after
  // the first). host_bound_note: set when the GPU's own times were below that floor and were raised
  // to it (device or event median under the host floor's median: records that do not match the work).
  std::vector<double> host_us, host_overhead_us, host_floor_us;
  int64_t kernels_per_call = 0;
  std::string host_bound_note;
};

// The gap the host's bracket of a call may hold between two kernels of its graph beyond the launch
// overhead, per kernel after the first (graph nodes start about 1 us apart on an H100): what a
// call's host floor leaves for it.
constexpr double kHostGapUs = 2.0;

// The host clock's jitter a GPU timer's median may fall under the host floor's median by before it is
// held to it (a forged record gains at most this): 2% and 1 us.
constexpr double kHostSlack = 0.02, kHostSlackUs = 1.0;

// Per call: host_us[i] - median(overhead) - kHostGapUs * (kernels - 1), at least 0.
std::vector<double> host_floor_us(const std::vector<double>& host_us, const std::vector<double>& overhead_us, int64_t kernels);

// Holds `times` (a GPU timer's per-call values, the same calls as `floor`) to the host floor: when
// their median is under the floor's median (less kHostSlack), the floor's values replace them and the returned text
// says by how much; else "" and `times` unchanged (an honest call's GPU time is the bracket less
// overhead and gaps, so at least the floor up to the host clock's jitter).
std::string hold_to_host_floor(std::vector<double>& times, const std::vector<double>& floor, const std::string& timer);

// Appends a later round of the same target's timed calls to `into`: every timer's per-call values
// and the host floor's, their summaries, the counts and the host-floor note. Device time stays only
// while every round has it (a round without it leaves a sample of other calls: none then).
void append_round(LoopResult& into, const LoopResult& more);

// Times `target` on `stream` (the current context must be the GPU's; the caller holds the GPU lock).
LoopResult time_target(TimedTarget& target, CUstream stream, L2Flusher& flusher, const LoopOptions& options);

// Whether the records (each marked with its call's external id) hold every kernel of every one of
// `calls` timed calls: a graph replays the same kernel nodes every call, so every call has records
// and all have the same count. A call without records, or with fewer than another, lost some (a full
// activity buffer), and a sum over what is left would be a time smaller than the call's: "" when
// complete, else why the device time is void (never reported, never compared).
std::string incomplete_call_records(const std::vector<cuda::KernelActivity>& records, int64_t calls);

// Aggregates kernel records by (name, grid, block) into per-kernel statistics, ordered by total time.
std::vector<KernelStat> aggregate_kernels(const std::vector<cuda::KernelActivity>& records);

}  // namespace ca::measure
