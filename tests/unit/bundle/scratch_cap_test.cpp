// Units of the scratch cap that follows the task (issue 33; rules.yaml scratch_cap): the cap is the
// larger of scratch_peak_factor x the reference's peak memory and the io floor, plus the slack; the
// judge's io (IoSpec::from_load, the worker's own load answer) never takes a task record's claim.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "libcommon/bundle/bind.hpp"
#include "libcommon/bundle/rules.hpp"
#include "libcommon/bundle/tensor_spec.hpp"
#include "libcommon/errors.hpp"

namespace {

using ca::bundle::IoSpec;
using ca::bundle::Rules;

constexpr int64_t kSlack = 16 << 20;
// A task of one 1 MiB input and one 1 MiB output: a 24 MiB io floor (4 x 2 MiB + 16 MiB).
const char* kSpecs = R"("inputs":[{"name":"x","shape":[262144],"dtype":"F32"}],"outputs":[{"shape":[262144],"dtype":"F32"}])";
constexpr int64_t kFloor = 4 * (2 << 20) + kSlack;

ca::Json json(const std::string& fields) { return ca::Json::parse("{" + std::string(kSpecs) + fields + "}"); }

// A bound plan holding `bytes` of scratch (what check_bound reads of it).
ca::bundle::BoundPlan with_scratch(int64_t bytes) {
  ca::bundle::BoundPlan b;
  ca::bundle::BoundBuffer s;
  s.ref = "scratch.act";
  s.space = ca::bundle::Space::scratch;
  s.dtype = "U8";
  s.shape = {bytes};
  s.bytes = bytes;
  b.buffers.push_back(s);
  return b;
}

}  // namespace

TEST_CASE("scratch cap: the shipped rules follow the reference's peak, with the io ratio as floor") {
  const Rules r = Rules::load("");
  CHECK(r.scratch_cap == "reference_peak");
  CHECK(r.scratch_peak_factor == 2.0);
  CHECK(r.max_scratch_ratio == 4.0);
  CHECK(r.max_scratch_slack_bytes == kSlack);
  CHECK_THROWS_AS(Rules::parse("scratch_cap: largest\n", "x.yaml"), ca::UsageError);
  CHECK_THROWS_AS(Rules::parse("scratch_peak_factor: -1\n", "x.yaml"), ca::UsageError);
  CHECK(Rules::parse("scratch_cap: io_ratio\nscratch_peak_factor: 1.5\n", "x.yaml").scratch_peak_factor == 1.5);
}

TEST_CASE("scratch cap: the larger of factor x peak and the floor, and who sized it") {
  const Rules r = Rules::load("");
  // No peak known: the floor, and the reason says why.
  auto cap = r.scratch_cap_for(IoSpec::from_json(json("")));
  CHECK(cap.bytes == kFloor);
  CHECK(cap.from == "io_ratio");
  CHECK(cap.rule == "max_scratch_ratio");
  CHECK(cap.how.find("states no reference.peak_bytes") != std::string::npos);
  CHECK(cap.to_json() == ca::Json::parse(R"({"bytes": 25165824, "from": "io_ratio"})"));
  // The worker's peak (VGG16's conv1_2: 257 MB live) over the floor: 2 x peak + slack.
  const int64_t vgg = 256901120;
  cap = r.scratch_cap_for(IoSpec::from_load(json(",\"peak_bytes\":" + std::to_string(vgg))));
  CHECK(cap.bytes == 2 * vgg + kSlack);
  CHECK(cap.from == "reference_peak");
  CHECK(cap.rule == "scratch_peak_factor");
  CHECK(cap.to_json()["peak_bytes"] == vgg);
  CHECK_FALSE(r.check_bound(with_scratch(2 * vgg), IoSpec::from_load(json(",\"peak_bytes\":" + std::to_string(vgg)))));
  auto v = r.check_bound(with_scratch(2 * vgg + kSlack + 1), IoSpec::from_load(json(",\"peak_bytes\":" + std::to_string(vgg))));
  REQUIRE(v);
  CHECK(v->rule == "scratch_peak_factor");
  CHECK(v->reason.find("measured by the judge's worker") != std::string::npos);
  // A small peak: the floor still stands.
  cap = r.scratch_cap_for(IoSpec::from_load(json(",\"peak_bytes\":4096")));
  CHECK(cap.bytes == kFloor);
  CHECK(cap.from == "io_ratio");
  CHECK(cap.peak->bytes == 4096);
  // scratch_cap: io_ratio ignores the peak.
  const Rules io_only = Rules::parse("scratch_cap: io_ratio\n", "x.yaml");
  cap = io_only.scratch_cap_for(IoSpec::from_load(json(",\"peak_bytes\":" + std::to_string(vgg))));
  CHECK(cap.bytes == kFloor);
  CHECK(cap.how.find("scratch_cap is io_ratio") != std::string::npos);
  // A peak of petabytes times the factor does not wrap.
  cap = r.scratch_cap_for(IoSpec::from_load(json(",\"peak_bytes\":9000000000000000000")));
  CHECK(cap.bytes == INT64_MAX);
  // Not a byte count: nothing known.
  for (const char* bad : {"-5", "1.5e9", "\"1000000000\"", "null", "true"}) {
    CAPTURE(bad);
    CHECK_FALSE(IoSpec::from_load(json(std::string(",\"peak_bytes\":") + bad)).reference_peak);
    CHECK_FALSE(IoSpec::from_json(json(std::string(",\"reference\":{\"peak_bytes\":") + bad + "}")).reference_peak);
  }
}

TEST_CASE("scratch cap: a task record's claim sizes it only where no worker measured (compile-only)") {
  const Rules r = Rules::load("");
  const int64_t huge = int64_t(1) << 40;  // a record claiming a terabyte of activations
  const ca::Json record = json(",\"reference\":{\"mode\":\"train\",\"peak_bytes\":" + std::to_string(huge) + "}");
  // Compile-only binds the record: its word, and the check says so.
  auto cap = r.scratch_cap_for(IoSpec::from_json(record));
  CHECK(cap.from == "task_record");
  CHECK(cap.bytes == 2 * huge + kSlack);
  CHECK(cap.how.find("as the task record states it") != std::string::npos);
  // The judge binds its worker's load answer (IoSpec::from_load): the answer has the worker's own
  // peak_bytes, and a `reference` section in it (were the answer ever to carry one) is never read.
  ca::Json answer = json(",\"peak_bytes\":1048576");
  answer["reference"] = record["reference"];
  cap = r.scratch_cap_for(IoSpec::from_load(answer));
  CHECK(cap.from == "io_ratio");
  CHECK(cap.bytes == kFloor);
  CHECK(cap.peak->from == "worker");
  CHECK(cap.peak->bytes == 1048576);
  auto v = r.check_bound(with_scratch(int64_t(1) << 30), IoSpec::from_load(answer));
  REQUIRE(v);
  CHECK(v->rule == "max_scratch_ratio");
  // A worker that measured nothing (an older worker, a counter that failed): the floor, not the claim.
  ca::Json unmeasured = json("");
  unmeasured["reference"] = record["reference"];
  cap = r.scratch_cap_for(IoSpec::from_load(unmeasured));
  CHECK(cap.from == "io_ratio");
  CHECK_FALSE(cap.peak);
  // And a task record's top-level peak_bytes (the load answer's spelling) is not the worker's word.
  CHECK_FALSE(IoSpec::from_json(json(",\"peak_bytes\":1099511627776")).reference_peak);
}

TEST_CASE("scratch cap: left to the judge (scratch_cap_by_judge) before its worker measured") {
  Rules r = Rules::load("");
  r.scratch_cap_by_judge = true;
  // Any scratch passes the check before the judge's (the record's shapes, no peak: the floor would refuse).
  CHECK_FALSE(r.check_bound(with_scratch(int64_t(1) << 30), IoSpec::from_json(json(""))));
  // The step counts still apply.
  ca::bundle::BoundPlan many = with_scratch(0);
  many.forward.resize(r.max_forward_steps + 1);
  auto v = r.check_bound(many, IoSpec::from_json(json("")));
  REQUIRE(v);
  CHECK(v->rule == "max_forward_steps");
}
