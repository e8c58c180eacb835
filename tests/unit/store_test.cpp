// Units of the run store: migrations, typed puts, baselines, merge idempotence, summary.
#include <doctest/doctest.h>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/store.hpp"

using namespace ca;

static int64_t count_rows(Store& s, const std::string& table) {
  int64_t n = -1;
  s.query("SELECT COUNT(*) AS n FROM " + table, [&](const Json& r) { n = r["n"].get<int64_t>(); });
  return n;
}

TEST_CASE("store: schema, records, baselines, merge and summary") {
  PrivateTempDir dir("store");
  CommonOptions opt;
  opt.tool = "unit";
  opt.argv = {"unit", "--x"};
  std::string a_path = dir.path() + "/a.db", b_path = dir.path() + "/b.db", m_path = dir.path() + "/m.db";
  {
    Store a(a_path);
    CHECK(a.schema_version() == Store::kSchemaVersion);
    a.begin_run(opt, "H200");
    a.import_record(Json::parse(R"({"task_id":"t1","code":"x"})"));
    a.import_record(Json::parse(
        R"({"task_id":"t1","candidate_id":"c1","check":{"status":"passed","correct":true},)"
        R"("prof":{"time_us":{"median":10.0},"speedup_vs_eager":2.0,"speedup_vs_compile":1.5},"reward":{"value":3,"scheme":"milestone"}})"));
    a.import_record(Json::parse(R"({"task_id":"t1","candidate_id":"c2","check":{"status":"incorrect","correct":false}})"));
    CHECK_THROWS_AS(a.import_record(Json::parse(R"({"x":1})")), FieldError);
    BaselineKey key{"t1", "H200", "580", "2.11", "eager/device"};
    CHECK_FALSE(a.get_baseline(key).has_value());
    a.put_baseline(key, Json{{"time_us", {{"median", 20.0}}}});
    REQUIRE(a.get_baseline(key).has_value());
    CHECK((*a.get_baseline(key))["time_us"]["median"] == 20.0);
    a.end_run(0);
    auto latest = a.latest("checks", "c1");
    REQUIRE(latest.has_value());
    CHECK((*latest)["status"] == "passed");
    CHECK_FALSE(a.latest("checks", "t1").has_value());  // checks are keyed by candidate
    a.put_filter_result("t1", false, "deterministic", Json{{"kept", false}, {"reason", "deterministic"}});
    auto verdict = a.latest("filter_results", "t1");  // filter results by task
    REQUIRE(verdict.has_value());
    CHECK((*verdict)["reason"] == "deterministic");
    CHECK_THROWS_AS(a.latest("tasks", "t1"), InternalError);
  }
  {
    Store b(b_path);
    b.begin_run(opt);
    b.import_record(Json::parse(R"({"task_id":"t2","code":"y"})"));
    b.end_run(0);
  }
  {
    Store m(m_path);
    m.merge_from(a_path);
    m.merge_from(b_path);
    auto second = m.merge_from(a_path);
    CHECK(second["tasks"] == 0);
    CHECK(second["checks"] == 0);
    CHECK(count_rows(m, "tasks") == 2);
    CHECK(count_rows(m, "checks") == 2);
    CHECK(count_rows(m, "runs") == 2);
    Json summary = m.summary();
    REQUIRE(summary.size() == 2);
    const Json& run = summary[0]["checks"] == 2 ? summary[0] : summary[1];
    CHECK(run["pass_rate"].get<double>() == doctest::Approx(0.5));
    CHECK(run["geomean_speedup_vs_compile"].get<double>() == doctest::Approx(1.5));
    CHECK(run["reward_mean"].get<double>() == doctest::Approx(3.0));
  }
}
