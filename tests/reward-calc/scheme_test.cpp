// Units of reward-calc's schemes: every branch of every scheme, the margin boundary, bad fields.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "tools/reward-calc/scheme.hpp"

using namespace ca;
using namespace ca::reward_calc;

namespace {

Json passed(Json prof) {
  Json r = {{"candidate_id", "c"}, {"task_id", "t"}, {"check", {{"correct", true}, {"status", "passed"}}}};
  if (!prof.is_null()) r["prof"] = prof;
  return r;
}

Json timed(double t, double eager, double compile) {
  return passed({{"time_us", t}, {"baselines", {{"eager", {{"time_us", eager}}}, {"compile", {{"time_us", compile}}}}}});
}

double value(const Json& rec, const Config& c = Config{}) { return score(rec, c)["value"].get<double>(); }

std::string field_of_error(const Json& rec, const Config& c = Config{}) {
  try {
    score(rec, c);
  } catch (const FieldError& e) {
    return e.field;
  }
  return "";
}

}  // namespace

TEST_CASE("milestone: the eight cases of the bar") {
  Config c;
  Json failed = {{"check", {{"correct", false}, {"status", "incorrect"}, {"reason", "output 0 differs"}}}};
  CHECK(value(failed) == -1);
  CHECK(score(failed, c)["reason"].get<std::string>().find("output 0 differs") != std::string::npos);
  CHECK(value(timed(98, 100, 90)) == 1);    // 2% faster than eager
  CHECK(value(timed(95, 100, 90)) == 1);    // exactly 5% faster than eager: not more than 5%
  CHECK(value(timed(94, 100, 90)) == 2);    // 6% faster than eager only
  CHECK(value(timed(94, 100, 100)) == 3);   // 6% faster than both
  CHECK(value(timed(110, 100, 120)) == 1);  // faster than compile, slower than eager
  Config unprof;
  unprof.allow_unprofiled = true;
  CHECK(value(passed(nullptr), unprof) == 1);
  Json violation = {{"check", {{"correct", false}, {"status", "policy_violation"}, {"reason", "clock64 at k.cu:3"}}}};
  CHECK(value(violation) == -1);
  Verdict v;
  score(violation, c, &v);
  CHECK(v == Verdict::scored_violation);
}

TEST_CASE("milestone: decimal boundaries that round above 5% in doubles are still exactly 5%") {
  // Each pair is exactly 5% in decimal; several give (t0-t)/t0 = 0.05000000000000002 in doubles.
  for (auto [t0, t] : std::vector<std::pair<double, double>>{{100, 95}, {1.1, 1.045}, {0.3, 0.285}, {12.3, 11.685},
                                                              {3.3, 3.135}, {7, 6.65}, {20, 19}}) {
    CAPTURE(t0);
    CHECK(value(timed(t, t0, t0)) == 1);
    CHECK(value(timed(t * 0.999, t0, t0)) == 3);  // 0.1% more than the margin counts
  }
}

TEST_CASE("milestone: the margin and its value are configurable and recorded") {
  Config c;
  c.margin = 0.10;
  CHECK(value(timed(91, 100, 100), c) == 1);
  CHECK(value(timed(89, 100, 100), c) == 3);
  c.margin = 0;
  CHECK(value(timed(99.9, 100, 101), c) == 3);
  CHECK(value(timed(100, 100, 101), c) == 1);  // equal to eager is not faster
  Json r = score(timed(94, 100, 90), Config{});
  CHECK(r["margin"].get<double>() == 0.05);
  CHECK(r["faster_than_eager"] == true);
  CHECK(r["faster_than_compile"] == false);
  CHECK(r["compile_baseline"] == "compile");
  CHECK(r["speedup_vs_eager"].get<double>() == doctest::Approx(100.0 / 94));
  CHECK(r["gain_vs_compile"].get<double>() == doctest::Approx((90.0 - 94) / 90));
}

TEST_CASE("times as kernel-prof summaries: {median, ...}") {
  Json r = passed({{"time_us", {{"median", 94}, {"p10", 93}, {"p90", 95}}},
                     {"baselines", {{"eager", {{"time_us", {{"median", 100}}}}}, {"compile", {{"time_us", 100}}}}}});
  CHECK(value(r) == 3);
}

TEST_CASE("failures: every failing status, correct=false, and failure_value") {
  for (const char* s : {"compile_error", "plan_error", "runtime_error", "timeout", "incorrect"}) {
    Json r = {{"check", {{"compiled", true}, {"status", s}}}};  // correct absent (compile-only) still fails
    CHECK(value(r) == -1);
  }
  Config c;
  c.failure_value = -2;
  c.violation_penalty = -5;
  CHECK(value(Json{{"check", {{"correct", false}}}}, c) == -2);
  CHECK(value(Json{{"check", {{"correct", false}, {"status", "policy_violation"}}}}, c) == -5);
  Json wrong_when_timed = passed({{"correct", false}, {"reason", "call 3 differs"}, {"time_us", 5}});
  CHECK(value(wrong_when_timed) == -1);
  CHECK(value(passed({{"status", "failed"}, {"time_us", 5}})) == -1);
}

TEST_CASE("every scheme scores a failure with failure_value and a violation with the penalty") {
  for (Scheme s : {Scheme::milestone, Scheme::speedup, Scheme::log_speedup}) {
    Config c;
    c.scheme = s;
    c.violation_penalty = -3;
    CHECK(value(Json{{"check", {{"correct", false}, {"status", "incorrect"}}}}, c) == -1);
    CHECK(value(Json{{"check", {{"correct", false}, {"status", "policy_violation"}}}}, c) == -3);
  }
}

TEST_CASE("speedup: t_compile / t, or t_eager / t") {
  Config c;
  c.scheme = Scheme::speedup;
  CHECK(value(timed(50, 100, 80), c) == doctest::Approx(1.6));
  c.speedup_baseline = SpeedupBaseline::eager;
  CHECK(value(timed(50, 100, 80), c) == doctest::Approx(2.0));
  // Only the chosen baseline is needed.
  Json no_compile = passed({{"time_us", 50}, {"baselines", {{"eager", {{"time_us", 100}}}}}});
  CHECK(value(no_compile, c) == doctest::Approx(2.0));
  c.speedup_baseline = SpeedupBaseline::compile;
  CHECK(field_of_error(no_compile, c) == "prof.baselines.compile.time_us");
  c.allow_unprofiled = true;
  CHECK(value(passed(nullptr), c) == 1.0);
}

TEST_CASE("log-speedup: ln(t_base/t) clipped to [-clip, clip]") {
  Config c;
  c.scheme = Scheme::log_speedup;
  CHECK(value(timed(50, 100, 80), c) == doctest::Approx(std::log(1.6)));
  CHECK(value(timed(10, 100, 80), c) == 1.0);     // ln 8 clipped to 1
  CHECK(value(timed(1000, 100, 80), c) == -1.0);  // ln 0.08 clipped to -1
  c.log_clip = 3;
  CHECK(value(timed(10, 100, 80), c) == doctest::Approx(std::log(8.0)));
  c.allow_unprofiled = true;
  CHECK(value(passed(nullptr), c) == 0.0);
  Json r = score(timed(10, 100, 80), c);
  CHECK(r["log_clip"].get<double>() == 3);
  CHECK(r["speedup_baseline"] == "compile");
}

TEST_CASE("baselines: precision-matched by default (plain when no matched one was timed), plain as an option") {
  Json r = passed({{"time_us", 94},
                     {"baselines", {{"eager", {{"time_us", 100}}}, {"compile", {{"time_us", 100}}},
                                    {"compile_precision_matched", {{"time_us", 90}}}}}});
  Config c;
  CHECK(c.compile_baseline == CompileBaseline::precision_matched);
  CHECK(value(r, c) == 2);
  Json s = score(r, c);
  CHECK(s["compile_baseline"] == "compile_precision_matched");
  // The plain fp32 comparison is shown beside the matched one.
  CHECK(s["plain"]["value"] == 3);
  CHECK(s["plain"]["speedup_vs_compile"].get<double>() == doctest::Approx(100.0 / 94));
  CHECK(score(timed(94, 100, 100), c)["compile_baseline"] == "compile");
  CHECK_FALSE(score(timed(94, 100, 100), c).contains("plain"));
  c.compile_baseline = CompileBaseline::plain;
  CHECK(value(r, c) == 3);
  // Eager is matched too: a TF32 kernel 6% faster than fp32 eager but not than TF32 eager scores 1.
  Json tf32 = passed({{"time_us", 94},
                        {"baselines", {{"eager", {{"time_us", 100}}}, {"compile", {{"time_us", 100}}},
                                       {"eager_precision_matched", {{"time_us", 96}}}, {"compile_precision_matched", {{"time_us", 95}}}}}});
  Config d;
  CHECK(value(tf32, d) == 1);
  CHECK(score(tf32, d)["eager_baseline"] == "eager_precision_matched");
  CHECK(score(tf32, d)["plain"]["value"] == 3);
}

TEST_CASE("a lower precision never lowers the bar: a matched baseline slower than the plain one is not the bar") {
  // Red team R8: autocast's casts can make PyTorch at fp16 slower than at fp32 (a small GEMM between
  // fp32-only ops: the input cast, then the cast back). A kernel read as fp16 (one live half
  // instruction in a launched kernel) was compared with that slower baseline: reward 3 where the
  // same kernel read as fp32 (the honest control, against the plain ones) earned 2.
  const Json plain = {{"eager", {{"time_us", 100}}}, {"compile", {{"time_us", 90}}}};
  Json control = passed({{"time_us", 88}, {"precision", "fp32"}, {"baselines", plain}});
  Json lowered = passed({{"time_us", 88}, {"precision", "fp16"}, {"matched_precision", "fp16"},
                           {"baselines", {{"eager", {{"time_us", 100}}}, {"compile", {{"time_us", 90}}},
                                          {"eager_precision_matched", {{"time_us", 140}}},
                                          {"compile_precision_matched", {{"time_us", 96}}}}}});
  Config c;
  CHECK(value(control, c) == 2);
  CHECK(value(lowered, c) == 2);  // was 3: 8.3% faster than compile_precision_matched
  Json s = score(lowered, c);
  CHECK(s["compile_baseline"] == "compile");
  CHECK_FALSE(s.contains("eager_baseline"));
  CHECK(s["compile_time_us"].get<double>() == 90);
  CHECK(s["matched_slower"] == Json::array({"eager", "compile"}));
  CHECK_FALSE(s.contains("plain"));  // the plain ones decided
  // Mode by mode: a faster matched compile is still the bar beside a slower matched eager.
  lowered["prof"]["baselines"]["compile_precision_matched"]["time_us"] = 85;
  s = score(lowered, c);
  CHECK(s["value"] == 2);
  CHECK(s["compile_baseline"] == "compile_precision_matched");
  CHECK(s["matched_slower"] == Json::array({"eager"}));
  // The speedup schemes read the same bar.
  Config sp;
  sp.scheme = Scheme::speedup;
  lowered["prof"]["baselines"]["compile_precision_matched"]["time_us"] = 96;
  CHECK(value(lowered, sp) == doctest::Approx(90.0 / 88));
  // Both must have a time: a matched one without its plain one is not known to be the bar.
  Json alone = passed({{"time_us", 88}, {"baselines", {{"eager", {{"time_us", 100}}}, {"compile_precision_matched", {{"time_us", 96}}}}}});
  CHECK_THROWS_AS(score(alone, c), FieldError);
  Json failed_plain = lowered;
  failed_plain["prof"]["baselines"]["compile"] = {{"error", "compile_failed"}};
  CHECK(score(failed_plain, c)["comparable"] == false);
  // --compile-baseline plain is unchanged.
  c.compile_baseline = CompileBaseline::plain;
  CHECK(value(lowered, c) == 2);
}

TEST_CASE("one metric per speedup: kernel sums never against event times") {
  Json mixed = passed({{"time_us", {{"median", 50.0}}},
                         {"method", {{"metric", "device"}}},
                         {"baselines", {{"eager", {{"time_us", {{"median", 100.0}}}, {"metric", "wall"}}},
                                        {"compile", {{"time_us", {{"median", 100.0}}}, {"metric", "device"}}}}}});
  Json s = score(mixed, Config{});
  CHECK(s["value"] == 1);
  CHECK(s["comparable"] == false);
  CHECK(s["reason"].get<std::string>().find("wall time") != std::string::npos);
  // A baseline without kernel times: its error, no speedup.
  Json no_device = passed({{"time_us", {{"median", 50.0}}},
                             {"method", {{"metric", "device"}}},
                             {"baselines", {{"eager", {{"error", "no_device_time"}, {"detail", "profiler off"}}},
                                            {"compile", {{"time_us", {{"median", 100.0}}}, {"metric", "device"}}}}}});
  CHECK(score(no_device, Config{})["comparable"] == false);
  CHECK(score(no_device, Config{})["reason"].get<std::string>().find("no_device_time") != std::string::npos);
  // The candidate without device time (kernel-prof says why): no speedup.
  Json no_cand = passed({{"time_us", nullptr}, {"no_speedup", "the candidate has no device time (CUPTI off)"}});
  CHECK(score(no_cand, Config{})["value"] == 1);
  CHECK(score(no_cand, Config{})["comparable"] == false);
  // The same metric on both sides compares.
  Json same = passed({{"time_us", {{"median", 50.0}}},
                        {"method", {{"metric", "device"}}},
                        {"baselines", {{"eager", {{"time_us", {{"median", 100.0}}}, {"metric", "device"}}},
                                       {"compile", {{"time_us", {{"median", 100.0}}}, {"metric", "device"}}}}}});
  CHECK(score(same, Config{})["value"] == 3);
}

TEST_CASE("noise: a margin inside the measured intervals is marked") {
  // 5.5% faster than both, but each median is known only to 1%: the 5% line is inside the interval.
  Json close = passed({{"time_us", {{"median", 94.5}, {"rel_ci", 0.01}}},
                         {"remeasured", 2},
                         {"baselines", {{"eager", {{"time_us", {{"median", 100.0}, {"rel_ci", 0.01}}}}},
                                        {"compile", {{"time_us", {{"median", 100.0}, {"rel_ci", 0.01}}}}}}}});
  Json s = score(close, Config{});
  CHECK(s["value"] == 3);
  CHECK(s["within_noise"] == true);
  CHECK(s["remeasured"] == 2);
  // 20% faster with 1% intervals: decided.
  Json clear = passed({{"time_us", {{"median", 80.0}, {"rel_ci", 0.01}}},
                         {"baselines", {{"eager", {{"time_us", {{"median", 100.0}, {"rel_ci", 0.01}}}}},
                                        {"compile", {{"time_us", {{"median", 100.0}, {"rel_ci", 0.01}}}}}}}});
  CHECK_FALSE(score(clear, Config{}).contains("within_noise"));
}

TEST_CASE("bad records: the field named") {
  Config c;
  CHECK(field_of_error(Json{{"candidate_id", "c"}}) == "check");
  CHECK(field_of_error(Json{{"check", "passed"}}) == "check");
  CHECK(field_of_error(Json{{"check", {{"status", "no_device"}}}}) == "check.correct");
  CHECK(field_of_error(Json{{"check", {{"correct", "yes"}}}}) == "check.correct");
  CHECK(field_of_error(Json{{"check", {{"correct", true}, {"status", "timeoutish"}}}}) == "check.status");
  CHECK(field_of_error(passed(nullptr)) == "prof");  // passed, unprofiled, not allowed
  Json r = timed(94, 100, 100);
  r["prof"]["time_us"] = "fast";
  CHECK(field_of_error(r) == "prof.time_us");
  r["prof"]["time_us"] = -3;
  CHECK(field_of_error(r) == "prof.time_us");
  r["prof"]["time_us"] = Json{{"p10", 3}};
  CHECK(field_of_error(r) == "prof.time_us");
  r["prof"]["time_us"] = Json{{"median", "x"}};
  CHECK(field_of_error(r) == "prof.time_us.median");
  r = timed(94, 100, 100);
  r["prof"]["baselines"].erase("eager");
  CHECK(field_of_error(r) == "prof.baselines.eager.time_us");
  r = timed(94, 100, 100);
  r["prof"]["baselines"]["compile"]["time_us"] = 0;
  CHECK(field_of_error(r) == "prof.baselines.compile.time_us");
}

TEST_CASE("a profile the node could not make (node_error) is no verdict: neither a reward nor -1") {
  // kernel-prof's node_error: the GPU could not hold the timing. Whatever else the section holds (a
  // stale time and baselines, or a correct flag), it is a bad record for every scheme, never scored.
  Json r = passed({{"status", "node_error"}, {"correct", nullptr}, {"node_error", true}, {"reason", "GPU memory (setup)"}});
  for (Scheme s : {Scheme::milestone, Scheme::speedup, Scheme::log_speedup}) {
    Config c;
    c.scheme = s;
    CHECK(field_of_error(r, c) == "prof.status");
  }
  Json stale = timed(50, 100, 100);  // 2x faster, but node_error: not scored
  stale["prof"]["status"] = "node_error";
  CHECK(field_of_error(stale) == "prof.status");
  Config lenient;
  lenient.allow_unprofiled = true;  // --allow-unprofiled is for a missing prof, not one that failed
  CHECK(field_of_error(r, lenient) == "prof.status");
}

TEST_CASE("settings from YAML, with checks") {
  PrivateTempDir dir("reward-unit");
  auto write = [&](const std::string& text) {
    std::string path = dir.path() + "/r.yaml";
    std::ofstream(path) << text;
    return path;
  };
  Config c;
  c.load_yaml(write("scheme: log-speedup\nmargin: 0.1\ncompile_baseline: precision-matched\nlog_clip: 2\n"
                    "speedup_baseline: eager\nviolation_penalty: -2\nfailure_value: -1.5\nallow_unprofiled: true\n"));
  CHECK(c.scheme == Scheme::log_speedup);
  CHECK(c.margin == 0.1);
  CHECK(c.compile_baseline == CompileBaseline::precision_matched);
  CHECK(c.speedup_baseline == SpeedupBaseline::eager);
  CHECK(c.log_clip == 2);
  CHECK(c.violation_penalty == -2);
  CHECK(c.failure_value == -1.5);
  CHECK(c.allow_unprofiled);
  CHECK_THROWS_AS(Config{}.load_yaml(write("sheme: milestone\n")), UsageError);
  CHECK_THROWS_AS(Config{}.load_yaml(write("scheme: fastest\n")), UsageError);
  CHECK_THROWS_AS(Config{}.load_yaml(write("margin: lots\n")), UsageError);
  Config bad;
  bad.margin = 1.5;
  CHECK_THROWS_AS(bad.validate(), UsageError);
  bad = Config{};
  bad.log_clip = 0;
  CHECK_THROWS_AS(bad.validate(), UsageError);
  CHECK_THROWS_AS(parse_scheme("best"), UsageError);
}
