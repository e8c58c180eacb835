// Units of libcommon/measure: statistics and the median's CI, the stop rule, the per-GPU lock;
// and the CUPTI grouping of kernel records into calls.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "libcommon/bundle/compile.hpp"
#include "libcommon/cuda/cupti.hpp"
#include "libcommon/cuda/nvrtc.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/measure/gpu_lock.hpp"
#include "libcommon/measure/gpu_state.hpp"
#include "libcommon/measure/stats.hpp"
#include "libcommon/measure/stop_rule.hpp"
#include "libcommon/measure/timing_loop.hpp"

using namespace ca::measure;

TEST_CASE("summary of 1..10") {
  std::vector<double> v{10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  Summary s = summarize(v);
  CHECK(s.n == 10);
  CHECK(s.median == doctest::Approx(5.5));
  CHECK(s.mean == doctest::Approx(5.5));
  CHECK(s.p10 == doctest::Approx(1.9));  // numpy.percentile(range(1,11), 10)
  CHECK(s.p90 == doctest::Approx(9.1));
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  REQUIRE(s.rel_ci.has_value());
  // n = 10: ranks 2 and 9 (coverage 97.9%); half-width max(5.5-2, 9-5.5) = 3.5.
  CHECK(*s.rel_ci == doctest::Approx(3.5 / 5.5));
}

TEST_CASE("median CI ranks match the binomial table") {
  CHECK(!median_ci_ranks(5).defined());  // 2/32 = 6.25% > 5%
  auto r6 = median_ci_ranks(6);
  CHECK(r6.lower_rank == 1);
  CHECK(r6.upper_rank == 6);
  auto r10 = median_ci_ranks(10);
  CHECK(r10.lower_rank == 2);
  CHECK(r10.upper_rank == 9);
  auto r100 = median_ci_ranks(100);  // the textbook 40th and 61st order statistics
  CHECK(r100.lower_rank == 40);
  CHECK(r100.upper_rank == 61);
}

TEST_CASE("the median's CI covers the true median about 95% of the time") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(0.0, 0.5);  // skewed, like timings; median exp(0) = 1
  int covered = 0, trials = 2000;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> v(31);
    for (auto& x : v) x = dist(rng);
    std::sort(v.begin(), v.end());
    MedianCi ci = median_ci(v);
    covered += (ci.lower <= 1.0 && 1.0 <= ci.upper);
  }
  double rate = double(covered) / trials;
  CHECK(rate >= 0.94);   // exact coverage at n = 31 is 97.1%
  CHECK(rate <= 0.99);
}

TEST_CASE("small samples have no CI") {
  Summary s = summarize({1, 2, 3});
  CHECK(!s.rel_ci.has_value());
  CHECK(s.to_json()["rel_ci"].is_null());
  CHECK(summarize({}).n == 0);
}

TEST_CASE("summary JSON round trip") {
  Summary s = summarize({1, 2, 3, 4, 5, 6, 7, 8});
  Summary t = Summary::from_json(s.to_json());
  CHECK(t.median == s.median);
  CHECK(t.n == s.n);
  CHECK(t.rel_ci == s.rel_ci);
}

TEST_CASE("stop rule: converges on a tight sample, not before min_runs") {
  StopRule rule;
  rule.min_runs = 10;
  rule.rel_ci = 0.01;
  rule.budget_s = 100;
  StopTracker tracker(rule);
  std::vector<double> v;
  std::mt19937 rng(1);
  std::normal_distribution<double> noise(100.0, 0.1);
  StopReason r = StopReason::none;
  while (r == StopReason::none) {
    v.push_back(noise(rng));
    r = tracker.update(v, 0.0);
  }
  CHECK(r == StopReason::converged);
  CHECK(v.size() == 10);
  CHECK(tracker.last_rel_ci() < 0.01);
}

TEST_CASE("stop rule: a noisy sample runs to the budget or the cap") {
  StopRule rule;
  rule.min_runs = 10;
  rule.max_runs = 200;
  rule.rel_ci = 0.001;
  rule.budget_s = 100;
  StopTracker tracker(rule);
  std::vector<double> v;
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(50, 150);
  StopReason r = StopReason::none;
  while (r == StopReason::none) {
    v.push_back(u(rng));
    r = tracker.update(v, 0.0);
  }
  CHECK(r == StopReason::max_runs);
  CHECK(v.size() == 200);

  StopTracker budget(rule);
  std::vector<double> wide;
  for (int i = 0; i < 20; ++i) wide.push_back(u(rng));
  CHECK(budget.update(wide, 101.0) == StopReason::budget);
}

TEST_CASE("stop rule: below min_runs only a hard 4x budget stops") {
  StopRule rule;
  rule.min_runs = 10;
  rule.budget_s = 1;
  StopTracker tracker(rule);
  std::vector<double> v{1, 2};
  CHECK(tracker.update(v, 2.0) == StopReason::none);
  CHECK(tracker.update(v, 4.5) == StopReason::budget);
}

namespace {
struct LockDir {
  std::string dir;
  LockDir() {
    char tmpl[] = "/tmp/ca-lock-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::setenv("CUDA_AGENT_LOCK_DIR", dir.c_str(), 1);
  }
  ~LockDir() {
    std::system(("rm -rf " + dir).c_str());
    ::unsetenv("CUDA_AGENT_LOCK_DIR");
  }
};
}  // namespace

TEST_CASE("host floor: the host's bracket less the launch overhead and the gaps between a call's kernels") {
  const std::vector<double> host{110, 120, 130}, overhead{9, 10, 11};
  auto one = ca::measure::host_floor_us(host, overhead, 1);
  REQUIRE(one.size() == 3);
  CHECK(one[0] == doctest::Approx(100));  // 110 - median 10
  CHECK(one[2] == doctest::Approx(120));
  auto three = ca::measure::host_floor_us(host, overhead, 3);  // two gaps of kHostGapUs
  CHECK(three[0] == doctest::Approx(100 - 2 * ca::measure::kHostGapUs));
  CHECK(ca::measure::host_floor_us({5}, {10}, 1)[0] == 0);  // never negative
  CHECK(ca::measure::host_floor_us(host, {}, 1)[1] == doctest::Approx(120));  // no overhead measured: the bracket

  // An honest GPU time (at least the floor, or under it by the clock's jitter) is kept as it is.
  const std::vector<double> floor{100, 110, 120};
  std::vector<double> honest{105, 112, 125};
  CHECK(ca::measure::hold_to_host_floor(honest, floor, "device").empty());
  CHECK(honest[0] == 105);
  std::vector<double> jitter{99, 108, 119};  // median 108 against 110: within 2% and 1 us
  CHECK(ca::measure::hold_to_host_floor(jitter, floor, "device").empty());
  CHECK(jitter[1] == 108);
  // Records that say a tenth of what the host saw: the floor is the time, and the text says so.
  std::vector<double> forged{10, 11, 12};
  std::string why = ca::measure::hold_to_host_floor(forged, floor, "device");
  CHECK(why.find("host clock") != std::string::npos);
  CHECK(why.find("11 us") != std::string::npos);
  CHECK(forged == floor);
  // Under the slack by a little more than it: held.
  std::vector<double> shaved{100, 107, 120};  // 107 < 110 * 0.98 - 1 = 106.8? no: kept
  CHECK(ca::measure::hold_to_host_floor(shaved, floor, "device").empty());
  std::vector<double> shaved_more{100, 106, 120};
  CHECK_FALSE(ca::measure::hold_to_host_floor(shaved_more, floor, "device").empty());
  // Nothing to hold to: different counts or no floor.
  std::vector<double> other{1, 2};
  CHECK(ca::measure::hold_to_host_floor(other, floor, "event").empty());
  CHECK(other == std::vector<double>{1, 2});
}

TEST_CASE("append_round: a remeasure round's calls join every timer's sample, the floor and the notes") {
  ca::measure::LoopResult a, b;
  a.event_us = {10, 11};
  a.device_us = {9, 10};
  a.host_us = {20, 21};
  a.host_floor_us = {9, 10};
  a.host_overhead_us = {11, 11, 11};
  a.calls = 2;
  a.timed_wall_s = 1;
  b.event_us = {12};
  b.device_us = {11};
  b.host_us = {22};
  b.host_floor_us = {11};
  b.host_overhead_us = {12, 12};
  b.calls = 1;
  b.timed_wall_s = 0.5;
  b.host_bound_note = "held";
  ca::measure::append_round(a, b);
  CHECK(a.event_us == std::vector<double>{10, 11, 12});
  CHECK(a.device_us == std::vector<double>{9, 10, 11});
  CHECK(a.host_us.size() == 3);
  CHECK(a.host_floor_us.size() == 3);
  CHECK(a.host_overhead_us.size() == 5);  // each round's empty-call samples
  CHECK(a.event.median == doctest::Approx(11));
  CHECK(a.device.n == 3);
  CHECK(a.calls == 3);
  CHECK(a.timed_wall_s == doctest::Approx(1.5));
  CHECK(a.host_bound_note == "held");
  ca::measure::append_round(a, b);
  CHECK(a.host_bound_note == "held; held");
  // A round without device time: no device time for the whole (a sample of other calls only).
  ca::measure::LoopResult c;
  c.event_us = {13};
  c.calls = 1;
  ca::measure::append_round(a, c);
  CHECK(a.device_us.empty());
  CHECK(a.device.n == 0);
  CHECK(a.event_us.size() == 5);
}

TEST_CASE("GPU lock: path keyed by UUID, under CUDA_AGENT_LOCK_DIR") {
  LockDir d;
  CHECK(lock_path_for("GPU-1234-abcd") == d.dir + "/gpu-GPU-1234-abcd.lock");
  CHECK(lock_path_for("a/b c") == d.dir + "/gpu-a_b_c.lock");
}

TEST_CASE("GPU lock: excludes another process until released; times out with the holder named") {
  LockDir d;
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    GpuLock lock("GPU-test", 5);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(go[0], &c, 1);  // hold until told
    lock.release();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  GpuLock probe;
  CHECK(!probe.try_acquire("GPU-test"));
  CHECK(probe.try_acquire("GPU-other"));  // another GPU is free
  probe.release();
  bool threw = false;
  try {
    GpuLock blocked("GPU-test", 0.2);
  } catch (const ca::EnvironmentError& e) {
    threw = true;
    CHECK(std::string(e.what()).find(std::to_string(child)) != std::string::npos);
  }
  CHECK(threw);
  // Release after 0.3 s; a waiting lock gets it.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    char g = 1;
    (void)!::write(go[1], &g, 1);
  });
  GpuLock waited("GPU-test", 10);
  CHECK(waited.held());
  CHECK(waited.waited_s() >= 0.2);
  releaser.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
}

TEST_CASE("GPU lock: a killed holder frees the lock") {
  LockDir d;
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t child = ::fork();
  if (child == 0) {
    GpuLock lock("GPU-dead", 5);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  GpuLock probe;
  CHECK(!probe.try_acquire("GPU-dead"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(probe.try_acquire("GPU-dead"));
}

// kernel-check's runs take the lock shared, kernel-prof's timed loops exclusive (issue 17): verifies
// run beside each other, never while a profile is timed, and a waiting profile is not starved.
TEST_CASE("GPU lock: shared holders coexist; an exclusive taker waits for them and goes before new ones") {
  LockDir d;
  using Mode = GpuLock::Mode;
  int ready[2], go[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // a verify in another process
    GpuLock lock("GPU-sh", 5, Mode::shared);
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(go[0], &c, 1);
    lock.release();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  {
    GpuLock other("GPU-sh", 1, Mode::shared);  // a second verify: at once
    CHECK(other.held());
    CHECK(other.waited_s() < 0.5);
  }
  CHECK_THROWS_AS(GpuLock("GPU-sh", 0.2, Mode::exclusive), ca::EnvironmentError);  // a profile waits
  // A profile waiting for the verify holds the gate: a verify arriving meanwhile does not overtake it.
  std::atomic<bool> profile_has_it{false};
  std::thread profile([&] {
    GpuLock lock("GPU-sh", 10, Mode::exclusive);
    profile_has_it = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    profile_has_it = false;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_THROWS_AS(GpuLock("GPU-sh", 0.2, Mode::shared), ca::EnvironmentError);
  char g = 1;
  (void)!::write(go[1], &g, 1);  // the first verify ends: the profile gets the GPU
  GpuLock late("GPU-sh", 10, Mode::shared);  // then this verify, once the profile is done
  CHECK(late.held());
  CHECK(!profile_has_it.load());
  profile.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
}

TEST_CASE("CUPTI records group into calls by correlation id, ordered by start") {
  using ca::cuda::KernelActivity;
  auto k = [](uint32_t corr, uint64_t start, uint64_t end) {
    KernelActivity a;
    a.correlation_id = corr;
    a.start_ns = start;
    a.end_ns = end;
    return a;
  };
  // Two graph replays (correlation 7 then 3) of two kernels each, delivered out of order.
  std::vector<KernelActivity> recs{k(3, 5000, 6000), k(7, 1000, 2000), k(3, 6000, 8000), k(7, 2000, 2500)};
  auto per_call = ca::cuda::device_time_per_call_us(recs);
  REQUIRE(per_call.size() == 2);
  CHECK(per_call[0] == doctest::Approx(1.5));
  CHECK(per_call[1] == doctest::Approx(3.0));
  CHECK(ca::cuda::demangle("_Z9scale_addPKfS0_Pfif") == "scale_add(float const*, float const*, float*, int, float)");
  CHECK(ca::cuda::demangle("copy_kernel") == "copy_kernel");
}

// A kernel record of timed call `call` (its push_call id) over [start, end) ns.
ca::cuda::KernelActivity call_kernel(uint64_t call, uint64_t start, uint64_t end) {
  ca::cuda::KernelActivity a;
  a.external_id = call;
  a.correlation_id = uint32_t(100 + call);
  a.start_ns = start;
  a.end_ns = end;
  return a;
}

TEST_CASE("a call's device time is the union of its kernels' intervals, never an overlap counted twice") {
  // Measured on the H100 (session 26): eager 38_LSTMBidirectional's kernels summed 107,470 us inside
  // 67,982 us of CUDA events around the same call (cuDNN runs both directions at once); a sum made
  // that baseline 1.6x slower than the GPU was busy, and a candidate "faster" by as much.
  using ca::cuda::KernelActivity;
  const auto k = call_kernel;
  std::vector<KernelActivity> recs{
      k(1, 0, 1000), k(1, 1000, 3000),                   // back to back: 3 us, as their sum
      k(2, 10000, 14000), k(2, 11000, 13000),            // one inside the other: 4 us, not 6
      k(3, 20000, 22000), k(3, 21000, 25000), k(3, 30000, 31000),  // overlapping, then a gap: 5 + 1
      k(4, 40000, 41000), k(4, 40000, 41000),            // the same interval twice: 1 us
      k(5, 50000, 50000)};                                // an empty record: 0
  auto per_call = ca::cuda::device_time_per_call_us(recs);
  REQUIRE(per_call.size() == 5);
  CHECK(per_call[0] == doctest::Approx(3.0));
  CHECK(per_call[1] == doctest::Approx(4.0));
  CHECK(per_call[2] == doctest::Approx(6.0));
  CHECK(per_call[3] == doctest::Approx(1.0));
  CHECK(per_call[4] == doctest::Approx(0.0));
  // Delivered out of order (CUPTI gives completion order): the same.
  std::vector<KernelActivity> shuffled(recs.rbegin(), recs.rend());
  CHECK(ca::cuda::device_time_per_call_us(shuffled) == per_call);
}

TEST_CASE("a device time sums every kernel of every call: lost records void it") {
  // Red team R8: a call's time is the sum of its kernels' records; were some lost (a full activity
  // buffer), the sum of the rest would be a time smaller than the call's (16,384 trivial launches
  // first and the work last). The previous loop kept such sums (a note said only when whole calls
  // were missing). A graph replays the same kernels every call, so the counts must all agree.
  using ca::cuda::KernelActivity;
  const auto k = call_kernel;
  // Three calls of two kernels each: complete.
  std::vector<KernelActivity> recs{k(1, 0, 10), k(1, 10, 1000), k(2, 2000, 2010), k(2, 2010, 3000), k(3, 4000, 4010), k(3, 4010, 5000)};
  CHECK(incomplete_call_records(recs, 3) == "");
  // Call 2's long kernel lost: its sum would read 0.01 us.
  std::vector<KernelActivity> lost = recs;
  lost.erase(lost.begin() + 3);
  CHECK(incomplete_call_records(lost, 3).find("between 1 and 2 kernels per timed call") != std::string::npos);
  // A call with no records at all.
  CHECK(incomplete_call_records(recs, 4) == "CUPTI saw kernels of 3 of 4 timed calls");
  CHECK(incomplete_call_records({}, 2) == "CUPTI saw kernels of 0 of 2 timed calls");
}

TEST_CASE("margin decisions: the gain, its range from both CIs, and when it is open") {
  using ca::measure::decide_margin;
  auto d = decide_margin(94.5, 0.01, 100.0, 0.01, 0.05);
  CHECK(d.gain == doctest::Approx(0.055));
  CHECK(d.beats);
  CHECK(d.ambiguous);  // 5% lies within [1 - 94.5*1.01/99, 1 - 94.5*0.99/101]
  CHECK(d.gain_low == doctest::Approx(1 - 94.5 * 1.01 / 99.0));
  CHECK(d.gain_high == doctest::Approx(1 - 94.5 * 0.99 / 101.0));
  auto clear = decide_margin(80, 0.01, 100, 0.01, 0.05);
  CHECK(clear.beats);
  CHECK_FALSE(clear.ambiguous);
  auto slow = decide_margin(99, 0.005, 100, 0.005, 0.05);
  CHECK_FALSE(slow.beats);
  CHECK_FALSE(slow.ambiguous);
  auto point = decide_margin(95, std::nullopt, 100, std::nullopt, 0.05);  // no CI: the interval is the point
  CHECK_FALSE(point.ambiguous);
}

// The flush's kernels are compiled on the device at the first timing; a mistake in their source
// would cost a device session to find. Compiled here for each architecture the flush distinguishes:
// from sm_80 the evict_last read and the demotion are in the code, before it neither is; the
// repair of a changed word (a 16-byte store and a 64-bit count) is in it on every architecture.
TEST_CASE("the L2 flush's kernels compile for sm_75, sm_80 and sm_90, with eviction priorities from sm_80") {
  REQUIRE_MESSAGE(ca::cuda::Nvrtc::available(), "NVRTC (the CUDA toolkit the build uses) is needed");
  for (std::string arch : {"sm_75", "sm_80", "sm_90"}) {
    CAPTURE(arch);
    ca::bundle::CompileOptions opt;
    opt.arch = arch;
    opt.confined = false;  // the toolchain's own source, as trusted_kernel compiles it
    opt.use_cache = false;
    auto r = ca::bundle::compile_bundle({{"read_flush.cu", read_flush_source()}}, {"ca_read_flush", "ca_demote_flush"}, opt);
    REQUIRE_MESSAGE(r.ok, r.first_error);
    CHECK(!r.cubin.empty());
    const bool priorities = arch != "sm_75";
    CHECK((r.ptx.find("createpolicy.fractional.L2::evict_last") != std::string::npos) == priorities);
    CHECK((r.ptx.find("L2::cache_hint") != std::string::npos) == priorities);
    CHECK((r.ptx.find("applypriority.global.L2::evict_normal") != std::string::npos) == priorities);
    // The read puts the pattern back over a changed word (a 16-byte store) and counts it.
    CHECK(r.ptx.find("st.global.v4") != std::string::npos);
    CHECK((r.ptx.find("atom.global.add.u64") != std::string::npos || r.ptx.find("red.global.add.u64") != std::string::npos));
  }
}
