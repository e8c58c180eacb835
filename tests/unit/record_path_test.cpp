// The one record path (libcommon/record_path.hpp): input order under -j, the shard filter, a bad
// record and --strict, a bad line mid-stream, --resume, counts, store rows and the run's end.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "libcommon/cli.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/record_path.hpp"
#include "libcommon/store.hpp"

using namespace ca;

namespace {

CommonOptions unit_options() {
  CommonOptions o;
  o.tool = "unit";
  o.argv = {"unit"};
  return o;
}

// Records {"candidate_id": "cN", "n": N} for N in [0, n), then a line that is not JSON when
// `bad_line_at` >= 0 (before record bad_line_at).
RecordSource numbered(int n, int bad_line_at = -1) {
  auto i = std::make_shared<int>(0);
  return [=](Json& record, std::string& where) {
    if (*i == bad_line_at) throw InputError("line " + std::to_string(*i + 1) + ": not JSON");
    if (*i == n) return false;
    record = Json{{"candidate_id", "c" + std::to_string(*i)}, {"n", *i}};
    where = "line " + std::to_string(*i + 1);
    ++*i;
    return true;
  };
}

// Sleeps a little, longer for some records, so lanes finish out of order.
void jitter(int n) { std::this_thread::sleep_for(std::chrono::milliseconds((n * 7) % 5)); }

std::vector<int> ns(const std::vector<Json>& out) {
  std::vector<int> v;
  for (const auto& r : out) v.push_back(r["n"].get<int>());
  return v;
}

}  // namespace

TEST_CASE("record path: -j 4 writes every record in input order, each worked once, counted") {
  CommonOptions o = unit_options();
  RecordPathOptions po;
  po.lanes = 4;
  RecordPath path(o, po);
  std::atomic<int> worked{0};
  RecordJob<RecordItem> job;
  job.work = [&](int lane, RecordItem& item) {
    CHECK(lane >= 0);
    CHECK(lane < 4);
    jitter(item.record["n"].get<int>());
    ++worked;
    item.record["sq"] = item.record["n"].get<int>() * item.record["n"].get<int>();
    return item.record["n"].get<int>() % 3 == 0 ? Outcome::failed : Outcome::done;
  };
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(numbered(60), job, [&](const Json& r) { out.push_back(r); }, true);
  REQUIRE(out.size() == 60);
  for (int i = 0; i < 60; ++i) {
    CHECK(out[static_cast<std::size_t>(i)]["n"] == i);
    CHECK(out[static_cast<std::size_t>(i)]["sq"] == i * i);
  }
  CHECK(worked == 60);
  CHECK(c.read == 60);
  CHECK(c.failed == 20);
  CHECK(c.done == 40);
  CHECK(c.bad == 0);
  CHECK(path.totals().read == 60);
}

TEST_CASE("record path: the shard filter splits the records between shards, counted, same under -j 1 and -j 3") {
  for (int lanes : {1, 3}) {
    std::set<int> seen;
    int64_t other = 0;
    for (int index = 0; index < 3; ++index) {
      CommonOptions o = unit_options();
      o.shard = Shard::parse(std::to_string(index) + "/3");
      RecordPathOptions po;
      po.lanes = lanes;
      RecordPath path(o, po);
      RecordJob<RecordItem> job;
      job.work = [](int, RecordItem&) { return Outcome::done; };
      std::vector<Json> out;
      Counts c = path.run<RecordItem>(numbered(50), job, [&](const Json& r) { out.push_back(r); }, true);
      CHECK(c.read == 50);
      CHECK(c.other_shard == 50 - static_cast<int64_t>(out.size()));
      CHECK(c.done == static_cast<int64_t>(out.size()));
      other += c.other_shard;
      for (const auto& r : out) {
        CHECK(o.shard.contains(record_key(r)));
        CHECK(seen.insert(r["n"].get<int>()).second);  // in one shard only
      }
    }
    CHECK(seen.size() == 50);
    CHECK(other == 2 * 50);
  }
  // Without the filter (a service's request), every record is this run's.
  CommonOptions o = unit_options();
  o.shard = Shard::parse("1/3");
  RecordPath path(o);
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem&) { return Outcome::done; };
  CHECK(path.run<RecordItem>(numbered(10), job, [](const Json&) {}).done == 10);
}

TEST_CASE("record path: a bad record is written in its place with an error section, the run goes on") {
  CommonOptions o = unit_options();
  RecordPathOptions po;
  po.lanes = 4;
  RecordPath path(o, po);
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem& item) {
    jitter(item.record["n"].get<int>());
    if (item.record["n"] == 5) throw FieldError("code", "missing");
    return Outcome::done;
  };
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(numbered(12), job, [&](const Json& r) { out.push_back(r); });
  REQUIRE(out.size() == 12);
  CHECK(ns(out)[5] == 5);
  CHECK(out[5]["error"] == Json{{"tool", "unit"}, {"field", "code"}, {"reason", "missing"}, {"where", "line 6"}});
  CHECK_FALSE(out[4].contains("error"));
  CHECK(c.bad == 1);
  CHECK(c.done == 11);
}

TEST_CASE("record path: a mistyped id is a bad record, never worked") {
  CommonOptions o = unit_options();
  RecordPath path(o);
  bool worked = false;
  RecordJob<RecordItem> job;
  job.work = [&](int, RecordItem&) {
    worked = true;
    return Outcome::done;
  };
  std::vector<Json> in{Json{{"task_id", 7}}};
  std::size_t i = 0;
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(
      [&](Json& r, std::string& where) {
        if (i == in.size()) return false;
        r = in[i++];
        where = "line 1";
        return true;
      },
      job, [&](const Json& r) { out.push_back(r); });
  CHECK_FALSE(worked);
  CHECK(c.bad == 1);
  REQUIRE(out.size() == 1);
  CHECK(out[0]["error"]["field"] == "task_id");
}

TEST_CASE("record path: --strict under -j 4 ends at the bad record, naming line and field, after all before it") {
  CommonOptions o = unit_options();
  o.strict = true;
  RecordPathOptions po;
  po.lanes = 4;
  RecordPath path(o, po);
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem& item) {
    jitter(item.record["n"].get<int>());
    if (item.record["n"] == 9) throw FieldError("bundle", "missing");
    return Outcome::done;
  };
  std::vector<Json> out;
  try {
    path.run<RecordItem>(numbered(40), job, [&](const Json& r) { out.push_back(r); });
    FAIL("--strict must end the run");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("line 10: bundle: missing") != std::string::npos);
    CHECK(e.exit_code == kExitBadInput);
  }
  CHECK(ns(out) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(path.totals().done == 9);
}

TEST_CASE("record path: a bad line under -j 4 ends the input after every record before it is written") {
  CommonOptions o = unit_options();
  RecordPathOptions po;
  po.lanes = 4;
  RecordPath path(o, po);
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem& item) {
    jitter(item.record["n"].get<int>());
    return Outcome::done;
  };
  std::vector<Json> out;
  CHECK_THROWS_AS(path.run<RecordItem>(numbered(40, 17), job, [&](const Json& r) { out.push_back(r); }), InputError);
  REQUIRE(out.size() == 17);
  for (int i = 0; i < 17; ++i) CHECK(out[static_cast<std::size_t>(i)]["n"] == i);
  CHECK(path.totals().done == 17);
}

TEST_CASE("record path: a stream with a bad line exits 2, its records before it written, the run row closed") {
  PrivateTempDir dir("record_path");
  CommonOptions o = unit_options();
  o.input = dir.path() + "/in.jsonl";
  o.output = dir.path() + "/out.jsonl";
  {
    std::ofstream in(o.input);
    for (int i = 0; i < 6; ++i) in << R"({"candidate_id":"c)" << i << R"(","task_id":"t","n":)" << i << "}\n";
    in << "{not json\n" << R"({"candidate_id":"late","n":99})" << "\n";
  }
  Store store(dir.path() + "/s.db");
  store.begin_run(o);
  RecordPathOptions po;
  po.lanes = 3;
  po.store = &store;
  po.section = "check";
  RecordPath path(o, po);
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem& item) {
    item.record["check"] = Json{{"status", "passed"}, {"n", item.record["n"]}};
    return Outcome::done;
  };
  const int status = path.stream(job);
  CHECK(status == kExitBadInput);
  CHECK(path.end(status) == kExitBadInput);
  std::ifstream out(o.output);
  int lines = 0;
  for (std::string line; std::getline(out, line);) ++lines;
  CHECK(lines == 6);
  int64_t rows = -1, ended = -1;
  store.query("SELECT COUNT(*) AS n FROM checks", [&](const Json& r) { rows = r["n"].get<int64_t>(); });
  store.query("SELECT exit_status AS s FROM runs", [&](const Json& r) { ended = r["s"].get<int64_t>(); });
  CHECK(rows == 6);
  CHECK(ended == kExitBadInput);
  REQUIRE(store.latest("checks", "c5").has_value());
  CHECK((*store.latest("checks", "c5"))["n"] == 5);
}

TEST_CASE("record path: --resume's admit skips done keys: not worked, written, counted skipped, no store row") {
  CommonOptions o = unit_options();
  o.resume = true;
  RecordPathOptions po;
  po.lanes = 2;
  RecordPath path(o, po);
  const std::set<std::string> done_before{"c1", "c4", "c5"};
  std::atomic<int> worked{0};
  RecordJob<RecordItem> job;
  job.admit = [&](RecordItem& item) {
    if (done_before.count(item.record["candidate_id"].get<std::string>())) {
      item.record["check"] = "reused";
      item.resumed = true;
    }
  };
  job.work = [&](int, RecordItem& item) {
    CHECK_FALSE(done_before.count(item.record["candidate_id"].get<std::string>()));
    ++worked;
    return Outcome::done;
  };
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(numbered(8), job, [&](const Json& r) { out.push_back(r); });
  CHECK(ns(out) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(out[4]["check"] == "reused");
  CHECK(worked == 5);
  CHECK(c.skipped == 3);
  CHECK(c.done == 5);
}

TEST_CASE("record path: emit sees good records in order, may drop one from the output; the counts keep it") {
  CommonOptions o = unit_options();
  RecordPathOptions po;
  po.lanes = 3;
  RecordPath path(o, po);
  std::vector<int> emitted;
  RecordJob<RecordItem> job;
  job.work = [](int, RecordItem& item) {
    if (item.record["n"] == 2) throw FieldError("x", "bad");
    return item.record["n"].get<int>() % 2 ? Outcome::failed : Outcome::done;
  };
  job.emit = [&](RecordItem& item) {
    emitted.push_back(item.record["n"].get<int>());
    item.write = item.outcome == Outcome::done;
  };
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(numbered(7), job, [&](const Json& r) { out.push_back(r); });
  CHECK(emitted == std::vector<int>{0, 1, 3, 4, 5, 6});  // not the bad record
  CHECK(ns(out) == std::vector<int>{0, 2, 4, 6});        // the bad one is written, the failed ones dropped
  CHECK(c.failed == 3);
  CHECK(c.done == 3);
  CHECK(c.bad == 1);
  CHECK(path.end(kExitOk) == kExitOk);
}

TEST_CASE("record path: copies make each good record N items in order, each admitted; a bad one stays one") {
  CommonOptions o = unit_options();
  RecordPathOptions po;
  po.lanes = 3;
  po.copies = 3;
  RecordPath path(o, po);
  int64_t admitted = 0;
  RecordJob<RecordItem> job;
  job.admit = [&](RecordItem& item) {
    if (item.record["n"] == 1) throw FieldError("code", "missing");
    item.record["seq"] = admitted++;  // the reader's, in input order
  };
  job.work = [](int, RecordItem& item) {
    jitter(static_cast<int>(item.record["seq"].get<int64_t>()));
    return Outcome::done;
  };
  std::vector<Json> out;
  Counts c = path.run<RecordItem>(numbered(3), job, [&](const Json& r) { out.push_back(r); });
  CHECK(ns(out) == std::vector<int>{0, 0, 0, 1, 2, 2, 2});
  for (std::size_t i : {0u, 1u, 2u, 4u, 5u, 6u}) CHECK(out[i]["seq"] == static_cast<int64_t>(i < 3 ? i : i - 1));
  CHECK(out[3]["error"]["field"] == "code");
  CHECK(c.read == 3);
  CHECK(c.done == 6);
  CHECK(c.bad == 1);
}

TEST_CASE("record path: a tool whose records end with it leaves a bad record out; --strict still ends the run") {
  for (bool strict : {false, true}) {
    CommonOptions o = unit_options();
    o.strict = strict;
    RecordPathOptions po;
    po.bad_left_out = "not imported";
    RecordPath path(o, po);
    RecordJob<RecordItem> job;
    job.work = [](int, RecordItem& item) {
      if (item.record["n"] == 2) throw FieldError("task_id", "missing");
      return Outcome::done;
    };
    std::vector<Json> out;
    auto sink = [&](const Json& r) { out.push_back(r); };
    if (strict) {
      CHECK_THROWS_WITH_AS(path.run<RecordItem>(numbered(5), job, sink), "line 3: task_id: missing", InputError);
      CHECK(ns(out) == std::vector<int>{0, 1});
    } else {
      Counts c = path.run<RecordItem>(numbered(5), job, sink);
      CHECK(ns(out) == std::vector<int>{0, 1, 3, 4});
      CHECK(c.bad == 1);
      for (const auto& r : out) CHECK_FALSE(r.contains("error"));
    }
  }
}
