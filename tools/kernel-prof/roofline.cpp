// --metrics: ncu counters per kernel and the roofline position.
#include "tools/kernel-prof/roofline.hpp"
#include "tools/kernel-prof/replay.hpp"

#include <chrono>
#include <sstream>

#include "libcommon/cuda/driver.hpp"
#include "libcommon/log.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"

namespace ca::kernel_prof {

const std::vector<std::string>& ncu_metric_names() {
  static const std::vector<std::string> names{
      "dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__warps_active.avg.pct_of_peak_sustained_active", "gpu__time_duration.sum"};
  return names;
}

namespace {
// One CSV line, RFC 4180 quoting as ncu writes it.
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += '"', ++i;
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}
}  // namespace

std::vector<NcuKernel> parse_ncu_csv(const std::string& text) {
  std::vector<NcuKernel> kernels;
  std::istringstream in(text);
  std::string line;
  std::map<std::string, int> col;
  std::map<std::string, std::size_t> by_id;
  while (std::getline(in, line)) {
    if (line.rfind("\"ID\"", 0) == 0) {  // the header row
      auto h = split_csv(line);
      col.clear();
      for (int i = 0; i < int(h.size()); ++i) col[h[i]] = i;
      continue;
    }
    if (col.empty() || line.empty() || line[0] != '"') continue;  // ==PROF== lines and the program's own output
    auto f = split_csv(line);
    auto get = [&](const char* name) -> std::string {
      auto it = col.find(name);
      return it != col.end() && it->second < int(f.size()) ? f[it->second] : std::string();
    };
    const std::string id = get("ID");
    if (!by_id.count(id)) {
      by_id[id] = kernels.size();
      kernels.push_back(NcuKernel{get("Kernel Name"), get("Grid Size"), get("Block Size"), {}});
    }
    std::string value = get("Metric Value");
    std::string digits;
    for (char c : value)
      if (c != ',') digits += c;  // "1,234.5" with --print-units base and thousands separators
    try {
      double v = std::stod(digits);
      const std::string unit = get("Metric Unit");
      // gpu__time_duration in ns whatever unit ncu picked.
      if (unit == "usecond") v *= 1e3;
      else if (unit == "msecond") v *= 1e6;
      else if (unit == "second") v *= 1e9;
      kernels[by_id[id]].metrics[get("Metric Name")] = v;
    } catch (const std::exception&) {
    }
  }
  return kernels;
}

Peaks device_peaks(int ordinal) {
  auto& drv = cuda::Driver::get();
  CUdevice dev = 0;
  drv.check(drv.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  int sms = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0;
  drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  drv.cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev);
  drv.cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev);
  drv.cuDeviceGetAttribute(&bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev);
  Peaks p;
  p.fp32_flops = double(sms) * 128 * 2 * double(clock_khz) * 1e3;  // 128 FP32 lanes per SM from Volta to Hopper
  p.dram_bytes_per_s = 2.0 * double(mem_khz) * 1e3 * double(bus_bits) / 8;
  return p;
}

Json roofline(const Json& estimates, double time_us, const Peaks& peaks) {
  if (!estimates.is_object() || !estimates.contains("flops") || !estimates["flops"].is_number() || !estimates.contains("bytes") ||
      !estimates["bytes"].is_number() || time_us <= 0)
    return nullptr;  // the task gives no estimates (or none that are numbers): no roofline
  const double flops = estimates["flops"].get<double>(), bytes = estimates["bytes"].get<double>();
  if (bytes <= 0 || peaks.fp32_flops <= 0 || peaks.dram_bytes_per_s <= 0) return nullptr;
  const double t = time_us * 1e-6;
  const double intensity = flops / bytes;
  const double ridge = peaks.fp32_flops / peaks.dram_bytes_per_s;
  const double roof = std::min(peaks.fp32_flops, intensity * peaks.dram_bytes_per_s);  // attainable FLOP/s
  const double achieved = flops / t;
  Json j{{"flops", flops},
         {"bytes", bytes},
         {"intensity_flop_per_byte", intensity},
         {"achieved_tflops", achieved / 1e12},
         {"achieved_tb_per_s", bytes / t / 1e12},
         {"peak_fp32_tflops", peaks.fp32_flops / 1e12},
         {"peak_dram_tb_per_s", peaks.dram_bytes_per_s / 1e12},
         {"ridge_flop_per_byte", ridge},
         {"bound", intensity < ridge ? "memory" : "compute"},
         {"fraction_of_roof", roof > 0 ? achieved / roof : 0.0}};
  // The time the roof allows: the floor no version goes much under.
  j["floor_us"] = std::max(flops / peaks.fp32_flops, bytes / peaks.dram_bytes_per_s) * 1e6;
  return j;
}

Json kernel_metrics(GpuSession& gpu, const Json& record, const Json& task, const Json& loaded,
                    const CandidateTiming& timing, const ProfOptions& options) {
  Json out = Json::object();
  const double t = timing.loop.device_us.empty() ? timing.loop.event.median : timing.loop.device.median;
  Json est = task.contains("estimates") ? Json(task["estimates"]) : Json(nullptr);
  out["roofline"] = roofline(est, t, device_peaks(gpu.identity().ordinal));
  if (out["roofline"].is_null()) out["roofline_note"] = "the task has no estimates {flops, bytes}";

  std::string ncu = find_on_path("ncu");
  if (ncu.empty())
    for (const char* p : {"/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"})
      if (file_exists(p)) ncu = p;
  if (ncu.empty()) {
    out["ncu"] = Json{{"error", "ncu not found on PATH or under /usr/local/cuda/bin"}};
    return out;
  }
  // A one-shot replay of the forward steps in a child kernel-prof under ncu: ncu owns CUPTI in
  // that process (our tracer sees CUDA_INJECTION64_PATH and stands aside).
  PrivateTempDir tmp("kernel-prof-ncu");
  Json one = record;
  one["task"] = task;
  one["task"]["loaded"] = loaded;
  // The sets' device tensors (the worker keeps them until the timing is released).
  one["replay"]["params"] = Json(timing.params);
  one["replay"]["inputs"] = Json::array();
  for (const auto& set : timing.sets) one["replay"]["inputs"].push_back(Json(set.inputs));
  write_file_atomic(tmp.path() + "/record.json", one.dump());
  std::string metrics;
  for (const auto& m : ncu_metric_names()) metrics += (metrics.empty() ? "" : ",") + m;
  SpawnOptions so;
  // Only the kernels launched inside the replay's candidate range (replay.hpp): the candidate's.
  so.argv = {ncu, "--csv", "--clock-control", "none", "--metrics", metrics, "--target-processes", "application-only",
             "--nvtx", "--nvtx-include", std::string(kCandidateRange) + "/",
             executable_dir() + "/kernel-prof", "--replay-once", tmp.path() + "/record.json", "--gpus",
             std::to_string(gpu.identity().ordinal), "--no-store"};
  so.capture_stderr = true;
  auto r = run_command(so, "", std::chrono::milliseconds(300000), 8 << 20);
  auto kernels = parse_ncu_csv(r.out);
  if (r.exit_status != 0 || kernels.empty()) {
    std::string err = r.err.size() > 600 ? r.err.substr(r.err.size() - 600) : r.err;
    std::string tail = r.out.size() > 600 ? r.out.substr(r.out.size() - 600) : r.out;
    out["ncu"] = Json{{"error", log::cat("ncu exit ", r.exit_status, r.timed_out ? " (timed out)" : "")},
                      {"stderr", err}, {"stdout_tail", tail}};
    return out;
  }
  Json ks = Json::array();
  for (const auto& k : kernels) {
    auto m = [&](const std::string& name) { return k.metrics.count(name) ? Json(k.metrics.at(name)) : Json(nullptr); };
    ks.push_back(Json{{"name", k.name},
                      {"grid", k.grid},
                      {"block", k.block},
                      {"dram_throughput_pct", m(ncu_metric_names()[0])},
                      {"sm_throughput_pct", m(ncu_metric_names()[1])},
                      {"achieved_occupancy_pct", m(ncu_metric_names()[2])},
                      {"gpu_time_duration_ns", m(ncu_metric_names()[3])}});
  }
  out["ncu"] = Json{{"kernels", ks}, {"path", ncu}};
  return out;
}

}  // namespace ca::kernel_prof
