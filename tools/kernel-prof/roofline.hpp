// --metrics: per-kernel hardware counters through ncu run as a subprocess on a one-shot replay of
// the candidate (ncu owns CUPTI there, so our tracer stands aside), and the candidate's position on
// the roofline from the task's FLOP and byte estimates.
#pragma once
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "tools/kernel-prof/candidate.hpp"
#include "tools/kernel-prof/gpu_session.hpp"
#include "tools/kernel-prof/options.hpp"

namespace ca::kernel_prof {

// The ncu metrics asked for, in this order.
const std::vector<std::string>& ncu_metric_names();

struct NcuKernel {
  std::string name, grid, block;
  std::map<std::string, double> metrics;  // metric name -> value (percent, or ns for gpu__time_duration)
};
// Parses `ncu --csv --metrics ...` output (one row per kernel and metric; other lines ignored).
std::vector<NcuKernel> parse_ncu_csv(const std::string& text);

struct Peaks {
  double fp32_flops = 0;  // FLOP/s, theoretical: SMs x 128 lanes x 2 x max SM clock
  double dram_bytes_per_s = 0;  // theoretical: 2 x memory clock x bus width
};
Peaks device_peaks(int ordinal);
// {flops, bytes, intensity_flop_per_byte, achieved_flops, achieved_bytes_per_s, peak_*, ridge, bound,
//  fraction_of_roof}; null when the task has no estimates.
Json roofline(const Json& estimates, double time_us, const Peaks& peaks);

Json kernel_metrics(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                    const CandidateTiming& timing, const ProfOptions& options);

}  // namespace ca::kernel_prof
