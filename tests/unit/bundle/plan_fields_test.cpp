// Units for the plan fields that were read loosely (the documented-limits audit of issue 33): flags
// that are not true or false, gemm alpha and beta as expressions, a float where a size goes, two
// spellings of one field, scratch written as a list, a YAML key given twice, a scalar argument its
// parameter cannot hold, a conv shape naming a dimension it lacks. Each used to pass silently.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "libcommon/bundle/plan.hpp"
#include "libcommon/bundle/rules.hpp"
#include "libcommon/bundle/signature.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/jsonl.hpp"

using namespace ca::bundle;

namespace {

// __global__ void k(float* out, unsigned int u, bool flag, int n)
Signatures sigs() { return {{"k", *demangle_kernel("_Z1kPfjbi")}}; }

IoSpec io_16() {
  return IoSpec::from_json(ca::Json::parse(
      R"j({"inputs":[{"shape":[4,8],"dtype":"F32"}],"params":[{"name":"w","shape":[8,8],"dtype":"F32"}],"outputs":[{"shape":[4,8],"dtype":"F32"}]})j"));
}

std::string launch(const std::string& args, const std::string& extra = "") {
  return "forward:\n  - launch: k\n    grid: [1]\n    block: [32]\n" + extra + "    args: [" + args + "]\n";
}

std::string gemm(const std::string& extra) {
  return "forward:\n  - gemm: {a: inputs.0, b: params.w, trans_b: true, out: outputs.0" + extra + "}\n";
}

// The binder's message for `plan`, or "" when it binds.
std::string bind_error(const std::string& plan, const Signatures& s = sigs()) {
  try {
    bind_plan(Plan::parse_text(plan), s, io_16());
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& plan) {
  try {
    Plan::parse_text(plan);
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("plan flags: true or false as YAML spells them, anything else refused naming the field") {
  for (const char* yes : {"true", "True", "yes", "on", "1"}) {
    const Plan p = Plan::parse_text(launch("outputs.0, 1, 1, 4", std::string("    cooperative: ") + yes + "\n"));
    CHECK_MESSAGE(p.forward[0].launch.cooperative, yes);
  }
  for (const char* no : {"false", "no", "off", "0"})
    CHECK_FALSE(Plan::parse_text(launch("outputs.0, 1, 1, 4", std::string("    cooperative: ") + no + "\n")).forward[0].launch.cooperative);
  for (const char* bad : {"ture", "[1]", "2", "{a: 1}"}) {
    const std::string m = parse_error(launch("outputs.0, 1, 1, 4", std::string("    cooperative: ") + bad + "\n"));
    CHECK_MESSAGE(m.find("forward step 1 (line 2) 'launch k' cooperative: expected true or false") != std::string::npos, m);
  }
  CHECK(parse_error(gemm(", trans_a: nope")).find("gemm trans_a: expected true or false") != std::string::npos);
  CHECK(parse_error("forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, transposed: maybe}\n")
            .find("conv transposed: expected true or false") != std::string::npos);
}

TEST_CASE("gemm alpha and beta are expressions, evaluated at bind; a non-finite one is refused") {
  BoundPlan b = bind_plan(Plan::parse_text(gemm(", alpha: 1.0 / sqrt(inputs.0.shape[1] * 2), beta: 0.5 * 0")), {}, io_16());
  CHECK(b.forward[0].gemm.alpha == doctest::Approx(0.25));
  CHECK(b.forward[0].gemm.beta == 0.0);
  b = bind_plan(Plan::parse_text(gemm("")), {}, io_16());
  CHECK(b.forward[0].gemm.alpha == 1.0);  // the defaults
  CHECK(b.forward[0].gemm.beta == 0.0);
  b = bind_plan(Plan::parse_text(gemm(", alpha: 1.0 / 2")), {}, io_16());
  CHECK(b.forward[0].gemm.alpha == 0.5);  // was 1.0: the number's leading digits, the rest ignored
  CHECK(bind_error(gemm(", alpha: 1e300"), {}).find("'gemm outputs.0' alpha = 1e+300 ('1e300'): not a finite float") != std::string::npos);
  CHECK(bind_error(gemm(", beta: Q"), {}).find("unbound name 'Q'") != std::string::npos);
  CHECK(parse_error("outputs: 2 outputs\n" + gemm("")).find("plan outputs: expected a number") != std::string::npos);
  CHECK(parse_error("outputs: 2.5\n" + gemm("")).find("plan outputs: \"2.5\" is not a count of outputs") != std::string::npos);
  CHECK(parse_error("outputs: 1e300\n" + gemm("")).find("is not a count of outputs") != std::string::npos);
  CHECK(*Plan::parse_text("outputs: 1\n" + gemm("")).outputs_declared == 1);
}

TEST_CASE("sizes are integers: shared and gemm m, n, k, batch") {
  CHECK(bind_error(launch("outputs.0, 1, 1, 4", "    shared: 2.5\n")).find("shared (dynamic shared memory bytes) must be an integer") !=
        std::string::npos);
  for (const char* f : {"m", "n", "k", "batch"}) {
    const std::string m = bind_error(gemm(std::string(", ") + f + ": 1.5"), {});
    CHECK_MESSAGE(m.find(std::string("gemm ") + f + " '1.5' is not an integer") != std::string::npos, m);
  }
}

TEST_CASE("one field, one spelling: shared/smem/shared_bytes, activation/epilogue") {
  CHECK(parse_error(launch("outputs.0, 1, 1, 4", "    shared: 16\n    smem: 99999\n")).find("'shared' and 'smem' are one field") !=
        std::string::npos);
  CHECK(parse_error(launch("outputs.0, 1, 1, 4", "    smem: 16\n    shared_bytes: 8\n")).find("'smem' and 'shared_bytes'") !=
        std::string::npos);
  CHECK(Plan::parse_text(launch("outputs.0, 1, 1, 4", "    smem: 16\n")).forward[0].launch.shared.text() == "16");  // an old name alone
  CHECK(parse_error(gemm(", activation: relu, epilogue: none")).find("'activation' and 'epilogue' are one field") != std::string::npos);
}

TEST_CASE("scratch and buffers are maps; a YAML key given twice is refused with its line") {
  CHECK(parse_error("scratch:\n  - t: {dtype: float32, shape: [4]}\n" + launch("outputs.0, 1, 1, 4"))
            .find("plan: scratch must be a map of NAME: {dtype, shape} (got a list)") != std::string::npos);
  CHECK(parse_error("buffers: 3\n" + launch("outputs.0, 1, 1, 4")).find("plan: buffers must be a map") != std::string::npos);
  const std::string twice = parse_error("dims: {N: 4}\n" + launch("outputs.0, 1, 1, 4", "    grid: [2]\n"));
  CHECK_MESSAGE(twice.find("key 'grid' appears twice in one map (line 6)") != std::string::npos, twice);
  CHECK(parse_error("dims: {N: 4, N: 5}\n" + launch("outputs.0, 1, 1, N")).find("key 'N' appears twice") != std::string::npos);
}

TEST_CASE("a scalar argument must fit its parameter: int, unsigned, bool, float") {
  CHECK(bind_error(launch("outputs.0, 4294967295, 1, 2147483647")).empty());  // unsigned max, int max
  CHECK(bind_error(launch("outputs.0, -1, 0, -2147483648")).empty());         // -1 to unsigned is all ones, as C converts it
  BoundPlan b = bind_plan(Plan::parse_text(launch("outputs.0, -1, 1, 7")), sigs(), io_16());
  uint32_t u = 0;
  std::memcpy(&u, b.forward[0].launch.args[1].scalar.data(), 4);
  CHECK(u == 0xFFFFFFFFu);
  std::string m = bind_error(launch("outputs.0, 1, 1, 2147483648"));
  CHECK_MESSAGE(m.find("argument 4 ('2147483648') = 2147483648: does not fit the kernel's int (-2147483648 to 2147483647)") !=
                    std::string::npos,
                m);
  m = bind_error(launch("outputs.0, 4294967296, 1, 4"));
  CHECK_MESSAGE(m.find("does not fit the kernel's unsigned int") != std::string::npos, m);
  m = bind_error(launch("outputs.0, 1, 2, 4"));
  CHECK_MESSAGE(m.find("argument 3 ('2') = 2: does not fit the kernel's bool (0 to 1)") != std::string::npos, m);
  // __global__ void f(float* out, float s)
  const Signatures fs = {{"f", *demangle_kernel("_Z1fPff")}};
  const std::string f = "forward:\n  - launch: f\n    grid: [1]\n    block: [32]\n    args: [outputs.0, ";
  CHECK(bind_error(f + "3.0e38]\n", fs).empty());
  CHECK(bind_error(f + "1e39]\n", fs).find("not a finite float") != std::string::npos);
}

TEST_CASE("conv shape: a t or r without its d or h is a missing size, not ignored") {
  const std::string base = "forward:\n  - conv: {x: inputs.0, w: params.w, out: outputs.0, shape: {n: 1, c: 1, k: 1, w: 8, s: 1";
  CHECK(bind_error(base + ", r: 1}}\n", {}).find("h is missing") != std::string::npos);
  CHECK(bind_error(base + ", h: 4, r: 1, t: 1}}\n", {}).find("d is missing") != std::string::npos);
}

TEST_CASE("the binder's own step bound names the rules' lower one") {
  const std::string m = bind_error("forward:\n  - repeat: 100001\n    steps:\n" + std::string("      - launch: k\n        grid: [1]\n        block: [1]\n"
                                                                                  "        args: [outputs.0, 1, 1, 4]\n"));
  CHECK_MESSAGE(m.find("repeat count 100001 is more than 100000 steps per call (the binder's own bound; the rules allow fewer: "
                       "max_forward_steps, max_init_steps)") != std::string::npos,
                m);
}

TEST_CASE("rules: allowed_steps names step kinds the plan language has") {
  CHECK(Rules::parse("allowed_steps: [launch, conv]\n", "r.yaml").allowed_steps == std::vector<std::string>{"launch", "conv"});
  CHECK_THROWS_WITH_AS(Rules::parse("allowed_steps: [launch, gem]\n", "r.yaml"),
                       doctest::Contains("allowed_steps: 'gem' is not a step kind (launch, gemm, conv)"), ca::UsageError);
}

TEST_CASE("a YAML plan's steps name their line; a JSON plan's do not") {
  const std::string yaml = "dims: {N: 4}\nforward:\n  - repeat: 2\n    steps:\n      - launch: k\n        grid: [1]\n        block: [1]\n"
                           "        args: [outputs.0, 1, 1, N]\n  -\n    launch: k\n    grid: [1]\n    block: [1]\n    args: [outputs.0, 1, 1, N]\n";
  const Plan p = Plan::parse_text(yaml);
  REQUIRE(p.forward.size() == 2);
  CHECK(p.forward[0].label() == "forward step 1.1 (line 5) 'launch k'");
  CHECK(p.forward[1].label() == "forward step 2 (line 10) 'launch k'");  // a map under a bare '-': its first key's line
  CHECK(p.loops[0].path == "forward step 1 (line 3)");
  const Plan j = Plan::parse(ca::Json::parse(R"({"forward": [{"launch": "k", "grid": [1], "block": [1], "args": ["outputs.0", 1, 1, 4]}]})"));
  CHECK(j.forward[0].label() == "forward step 1 'launch k'");
  // A field's error inside a repeat names the step's path and line.
  const std::string m = parse_error("forward:\n  - repeat: 2\n    steps:\n      - {launch: k, grid: [1], blocks: [1]}\n");
  CHECK_MESSAGE(m.find("forward step 1.1 (line 4): unknown key 'blocks'") != std::string::npos, m);
}
