// kernel-prof-bench: figures for kernel-prof's method on copy kernels of about 10 us, 100 us and
// 1 ms: spread (max/min) of 10 repeated measurements, and agreement with ncu's gpu__time_duration.
//   kernel-prof-bench [--repeats 10] [--ncu]       (prints a table on stdout)
//   kernel-prof-bench --once N                     (ncu's target: N-float copy, once per set)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "libcommon/cuda/cupti.hpp"
#include "libcommon/cuda/driver.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/log.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/measure/timing_loop.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/process.hpp"
#include "tools/kernel-prof/bench_kernels.hpp"
#include "tools/kernel-prof/roofline.hpp"

using namespace ca;

int main(int argc, char** argv) {
  log::set_tool("kernel-prof-bench");
  int repeats = 10;
  bool with_ncu = false;
  std::size_t once = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--ncu")) with_ncu = true;
    else if (!std::strcmp(argv[i], "--once") && i + 1 < argc) once = std::stoull(argv[++i]);
    else {
      std::fprintf(stderr, "usage: kernel-prof-bench [--repeats N] [--ncu] | --once N_FLOATS\n");
      return 1;
    }
  }
  try {
    if (once == 0) cuda::CuptiTracer::instance();
    auto& drv = cuda::Driver::get();
    drv.primary_context(0);
    measure::GpuIdentity id = measure::identify_gpu(0);
    CUstream stream = nullptr;
    drv.check(drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    measure::L2Flusher flusher(id.l2_bytes);
    if (once) {
      kernel_prof::CopyKernelTarget t(once, 1, id.arch);
      for (int k = 0; k < 5; ++k) {  // ncu times each launch; five give it a median too
        flusher.flush(stream);
        t.enqueue(0, stream);
      }
      drv.check(drv.cuStreamSynchronize(stream), "once");
      return 0;
    }
    std::printf("# %s %s, driver %s, CUPTI %s\n", id.name.c_str(), id.uuid.c_str(), id.driver.c_str(),
                cuda::CuptiTracer::instance().available() ? "on" : cuda::CuptiTracer::instance().why().c_str());
    // Flush methods: read (kernel-prof's: clean lines left in L2; read-demote on sm_80 and later,
    // the worker's a plain read), memset (the
    // one before session 30: dirty lines the timed call writes back), none (a 1 MiB memset only:
    // the previous call's data may still be in L2).
    using Method = measure::L2Flusher::Method;
    measure::L2Flusher memset_flusher(id.l2_bytes, 2.0, Method::memset);
    measure::L2Flusher tiny(0, 0.0, Method::memset);
    std::printf("%-10s %-7s %10s %10s %10s %9s %6s %10s %8s\n", "n_floats", "flush", "median_us", "min_med",
                "max_med", "spread_%", "calls", "events_us", "wall_s");
    std::string ncu_lines;
    for (std::size_t n : {std::size_t(5) << 20, std::size_t(54) << 20, std::size_t(540) << 20}) {
      kernel_prof::CopyKernelTarget t(n, 2, id.arch);
      for (const char* mode : {"read", "memset", "none"}) {
        measure::LoopOptions o;
        o.stop.min_runs = 20;
        o.stop.budget_s = 2;
        const std::string m = mode;
        measure::L2Flusher& fl = m == "read" ? flusher : m == "memset" ? memset_flusher : tiny;
        std::vector<double> medians, events;
        int64_t calls = 0;
        auto t0 = std::chrono::steady_clock::now();
        const int reps = m == "read" ? repeats : 3;
        for (int r = 0; r < reps; ++r) {
          auto res = measure::time_target(t, stream, fl, o);
          medians.push_back(res.device_us.empty() ? res.event.median : res.device.median);
          events.push_back(res.event.median);
          calls += res.calls;
        }
        double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        auto s = measure::summarize(medians);
        std::printf("%-10zu %-7s %10.2f %10.2f %10.2f %9.3f %6lld %10.2f %8.2f\n", n, mode, s.median, s.min, s.max,
                    (s.max / s.min - 1) * 100, (long long)(calls / reps), measure::summarize(events).median, wall);
      }
      if (with_ncu) {
        for (const char* cache : {"all", "none"}) {
          SpawnOptions so;
          std::string ncu = find_on_path("ncu");
          so.argv = {ncu.empty() ? "ncu" : ncu, "--csv", "--clock-control", "none", "--cache-control", cache, "--metrics",
                     "gpu__time_duration.sum", executable_dir() + "/kernel-prof-bench", "--once", std::to_string(n)};
          so.capture_stderr = true;
          auto r = run_command(so, "", std::chrono::milliseconds(120000));
          std::vector<double> ts;
          for (auto& k : kernel_prof::parse_ncu_csv(r.out))
            if (k.metrics.count("gpu__time_duration.sum")) ts.push_back(k.metrics["gpu__time_duration.sum"] / 1e3);
          char line[200];
          if (!ts.empty())
            std::snprintf(line, sizeof line, "ncu n_floats=%zu cache-control=%s: gpu__time_duration median %.2f us (%zu launches)\n",
                          n, cache, measure::summarize(ts).median, ts.size());
          else
            std::snprintf(line, sizeof line, "ncu n_floats=%zu cache-control=%s: nothing (exit %d)\n", n, cache, r.exit_status);
          ncu_lines += line;
        }
      }
    }
    std::printf("%s", ncu_lines.c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "kernel-prof-bench: %s\n", e.what());
    return e.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel-prof-bench: %s\n", e.what());
    return 4;
  }
}
