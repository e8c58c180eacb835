// Units of the worker's numerics (numerics.py) through ca::worker::WorkerClient on CPU torch: the reference's
// calibration per claimed precision (and the half-reduction shortcut failing the bound built from
// it), input variants (finite, different from the plain draw, index tensors shuffled, milder ones
// where the reference would stop being finite), and stochastic references flagged at load.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "libcommon/bundle/compare.hpp"
#include "libcommon/errors.hpp"
#include "libcommon/paths.hpp"
#include "libcommon/safetensors.hpp"
#include "libcommon/worker/requests.hpp"
#include "libcommon/worker/worker_client.hpp"

using namespace ca;
using namespace ca::worker;

namespace {

std::string source(const std::string& dir, const std::string& name) {
  const char* src = std::getenv("CA_SRC");
  return read_file(std::string(src ? src : ".") + "/tests/worker/" + dir + "/" + name + ".py");
}

WorkerClient& shared() {
  static WorkerClient client([] {
    WorkerOptions o;
    o.request_timeout = std::chrono::seconds(120);
    return o;
  }());
  return client;
}

std::string str(const Json& a) { return a.dump().substr(0, 1200); }

Json load(const std::string& dir, const std::string& name) {
  Json a = shared().request({{"op", "load"}, {"task_id", name}, {"code", source(dir, name)}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  return a;
}

// The seed's inputs into a file (optionally a variant) and their answer.
Json draw(const std::string& task, uint64_t seed, const std::string& path, const std::string& variant = "") {
  Json req{{"op", "inputs"}, {"task_id", task}, {"seed", seed}, {"out", path}};
  if (!variant.empty()) req["variant"] = variant;
  Json a = shared().request(req);
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  return a;
}

std::vector<float> floats(const Tensor& t) {
  REQUIRE(t.dtype == "F32");
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data.data(), v.size() * 4);
  return v;
}

Tensor f32(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor x = Tensor::zeros("F32", shape);
  std::memcpy(x.data.data(), v.data(), v.size() * 4);
  return x;
}

}  // namespace

TEST_CASE("numerics: calibrate fp32 on a mean over 16,384 columns; half the row fails the bound, a blocked sum passes") {
  auto& c = shared();
  load("numerics_fixtures", "row_mean");
  auto in = c.temp_path("in"), out = c.temp_path("out");
  draw("row_mean", 11, in);
  Json a = c.request({{"op", "reference"}, {"task_id", "row_mean"}, {"inputs", in}, {"out", out},
                      {"calibrate", "fp32"}, {"calibrate_k", 8}, {"calibrate_floor", 3e-5}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["stochastic"] == false);
  REQUIRE(a.contains("calibration"));
  const Json& cal = a["calibration"]["outputs.0"];
  CHECK(cal["precision"] == "fp32");
  CHECK(cal["reference_precision"] == "fp32");
  const double err = cal["ref_err_rel_l2"].get<double>();
  MESSAGE("fp32 error of the mean against float64: ", err, ", bound ", cal["bound_rel_l2"].get<double>());
  CHECK(err > 0);
  CHECK(err < 1e-6);  // ~1e-7
  CHECK(cal["fp32_err_rel_l2"].get<double>() == doctest::Approx(err));
  CHECK(cal["ref_err_max_abs_rel"].get<double>() < 1e-5);
  // The largest error in the output's own units: the relative one times the RMS of row means of torch.rand (~0.5).
  CHECK(cal["fp32_err_max_abs"].get<double>() > 0);
  CHECK(cal["fp32_err_max_abs"].get<double>() ==
        doctest::Approx(cal["fp32_err_max_abs_rel"].get<double>() * 0.5).epsilon(0.02));
  CHECK(cal["ref_err_max_abs"] == cal["fp32_err_max_abs"]);
  // The worker's bound is the rule's (compare.hpp), computed from the same numbers.
  // Row means of torch.rand are 0.5 give or take 0.002: the part the inputs move is small.
  const double varying = cal["varying_fraction"].get<double>();
  MESSAGE("varying fraction of the row means: ", varying);
  CHECK(varying > 1e-3);
  CHECK(varying < 2e-2);
  CHECK(cal["bound_rel_l2"].get<double>() == doctest::Approx(8 * err + 3e-5 * std::max(varying, 0.1)));
  auto tol = bundle::Tolerances::calibrated("fp32", a["calibration"]);
  CHECK(tol.for_output("outputs.0", "F32").rel_norm == doctest::Approx(cal["bound_rel_l2"].get<double>()));

  // Candidates computed here from the same inputs: the shortcut and the honest serial fp32 sum.
  auto x = floats(read_safetensors(in).tensors.at("inputs.0"));
  TensorMap want = read_safetensors(out).tensors;
  const int rows = 32, cols = 16384;
  REQUIRE(x.size() == size_t(rows) * cols);
  std::vector<float> half(rows), serial(rows), blocked(rows);
  for (int r = 0; r < rows; ++r) {
    float h = 0, s = 0;
    std::vector<float> chains(cols / 256, 0.0f);  // chains of 256 additions, then a pairwise tree
    for (int k = 0; k < cols; ++k) {
      s += x[size_t(r) * cols + k];
      chains[size_t(k / 256)] += x[size_t(r) * cols + k];
      if (k < cols / 2) h += x[size_t(r) * cols + k];
    }
    for (size_t w = chains.size(); w > 1; w /= 2)
      for (size_t i = 0; i < w / 2; ++i) chains[i] = chains[2 * i] + chains[2 * i + 1];
    half[r] = h / (cols / 2);
    serial[r] = s / cols;
    blocked[r] = chains[0] / cols;
  }
  auto half_cal = bundle::compare_outputs({{"outputs.0", f32(half, {rows})}}, want, tol);
  CHECK_FALSE(half_cal.ok);
  CHECK(half_cal.reason.find("calibrated bound") != std::string::npos);
  CHECK(bundle::compare_outputs({{"outputs.0", f32(half, {rows})}}, want, "published", -1, -1).ok);  // the old hole
  // A blocked reduction passes, and so does one serial chain of 16,384 additions (~2e-6 off): row
  // means differ by ~0.002, but a tenth of the floor stays relative to the whole output.
  auto honest = bundle::compare_outputs({{"outputs.0", f32(blocked, {rows})}}, want, tol);
  CHECK_MESSAGE(honest.ok, honest.reason);
  auto chain = bundle::compare_outputs({{"outputs.0", f32(serial, {rows})}}, want, tol);
  CHECK_MESSAGE(chain.ok, chain.reason);
}

TEST_CASE("numerics: the elements the fp32 reference itself misses against float64 are counted; an exact kernel passes by them") {
  auto& c = shared();
  load("numerics_fixtures", "cancel_sum");
  auto in = c.temp_path("in"), out = c.temp_path("out");
  draw("cancel_sum", 3, in);
  Json a = c.request({{"op", "reference"}, {"task_id", "cancel_sum"}, {"inputs", in}, {"out", out}, {"calibrate", "fp32"}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  const Json& cal = a["calibration"]["outputs.0"];
  const int64_t misses = cal["fp32_elementwise_misses"].get<int64_t>();
  MESSAGE("fp32 reference: ", misses, " of 1048576 elements off float64 by more than 1e-2 + 1e-2 |x|");
  CHECK(misses > 0);
  CHECK(misses * 8 < 104);  // inside the 1e-4 cap, so the whole allowance applies
  CHECK(cal["ref_elementwise_misses"] == misses);  // fp32 is the claim's own reference
  // The exact answer (y, what float64 computes) against the fp32 reference: the published gate fails
  // it; the calibration's allowance (8 x the reference's misses) lets it pass.
  TensorMap exact{{"outputs.0", read_safetensors(in).tensors.at("inputs.1")}};
  TensorMap want = read_safetensors(out).tensors;
  auto published = bundle::compare_outputs(exact, want, "published", -1, -1);
  CHECK_FALSE(published.ok);
  MESSAGE("the exact answer against the fp32 reference: ", published.reason);
  auto calibrated = bundle::compare_outputs(exact, want, bundle::Tolerances::calibrated("fp32", a["calibration"]));
  CHECK_MESSAGE(calibrated.ok, calibrated.reason);
  CHECK(calibrated.to_json()["tolerance"]["elementwise_allowance"]["outputs.0"]["allowed"] == 8 * misses);
  // And the slack: 8 x the reference's largest absolute error (x * 66000's lost bits); the exact answer is
  // within it everywhere, so none of its misses is past the widened gate.
  MESSAGE("fp32 reference's largest absolute error: ", cal["fp32_err_max_abs"].get<double>());
  CHECK(cal["fp32_err_max_abs"].get<double>() > 1e-2);
  const Json slack = calibrated.to_json()["tolerance"]["elementwise_slack"]["outputs.0"];
  CHECK(slack["slack"].get<double>() == doctest::Approx(8 * cal["fp32_err_max_abs"].get<double>()));
  CHECK(slack["misses"].get<int64_t>() > 0);
  CHECK(slack["allowed"] == 8 * misses + 10485);
  // The fp32 reference itself as a candidate passes, with no allowance used.
  CHECK(bundle::compare_outputs(want, want, bundle::Tolerances::calibrated("fp32", a["calibration"])).ok);
}

TEST_CASE("numerics: calibrate per precision on a Linear; defaults without k and floor; bad values refused") {
  auto& c = shared();
  load("numerics_fixtures", "linear_tanh");
  auto in = c.temp_path("in"), out = c.temp_path("out");
  draw("linear_tanh", 3, in);
  for (const char* prec : {"fp32", "tf32", "bf16", "int8"}) {
    Json a = c.request({{"op", "reference"}, {"task_id", "linear_tanh"}, {"inputs", in}, {"out", out}, {"calibrate", prec}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
    REQUIRE_MESSAGE(a["calibration"].contains("outputs.0"), str(a));
    const Json& e = a["calibration"]["outputs.0"];
    CHECK(e["precision"] == prec);
    CHECK(e["fp32_err_rel_l2"].get<double>() < 1e-5);
    auto rule = bundle::calibration_rule(prec);
    CHECK(e["reference_precision"] == rule.reference_precision);
    CHECK(e["k"].get<double>() == doctest::Approx(rule.k));  // numerics.py's defaults are compare.hpp's
    CHECK(e["floor"].get<double>() == doctest::Approx(rule.floor));
    // The floor's scale, from the load's two draws: a Linear + tanh's output is mostly input-dependent.
    CHECK(e["varying_fraction"].get<double>() > 0.5);
    CHECK(e["varying_fraction"].get<double>() <= 1);
    if (std::string(prec) == "bf16" || std::string(prec) == "int8") {
      // CPU autocast in bf16: the Linear runs in bf16, ~1e-3 off float64.
      CHECK(e["ref_err_rel_l2"].get<double>() > 1e-4);
      CHECK(e["bound_rel_l2"].get<double>() > e["ref_err_rel_l2"].get<double>());
    }
    CHECK(e["bound_rel_l2"].get<double>() <= 5e-2);
  }
  for (Json bad : {Json("fp64"), Json(32), Json(nullptr)}) {
    Json a = c.request({{"op", "reference"}, {"task_id", "linear_tanh"}, {"inputs", in}, {"out", out}, {"calibrate", bad}});
    if (bad.is_null()) {
      CHECK(a.value("ok", false));  // null: no calibration asked
      CHECK_FALSE(a.contains("calibration"));
      continue;
    }
    CHECK_FALSE(a.value("ok", true));
    CHECK(a["error"] == "bad_request");
  }
  Json neg = c.request({{"op", "reference"}, {"task_id", "linear_tanh"}, {"inputs", in}, {"out", out}, {"calibrate", "fp32"},
                        {"calibrate_k", -1}});
  CHECK(neg["error"] == "bad_request");
}

TEST_CASE("numerics: a forward that changes its input in place is calibrated from the inputs as drawn") {
  // Were the float64 run given what the reference run left (x * 3), its error would read ~2 and the
  // bound would open to the published 5e-2.
  auto& c = shared();
  load("numerics_fixtures", "inplace_scale");
  auto in = c.temp_path("in"), out = c.temp_path("out");
  draw("inplace_scale", 5, in);
  Json a = c.request({{"op", "reference"}, {"task_id", "inplace_scale"}, {"inputs", in}, {"out", out}, {"calibrate", "fp32"}});
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["calibration"]["outputs.0"]["ref_err_rel_l2"].get<double>() < 1e-5);
  CHECK(a["calibration"]["outputs.0"]["bound_rel_l2"].get<double>() < 1e-4);
}

TEST_CASE("numerics: variants change floating inputs, shuffle index tensors, stay finite, and are reproducible") {
  auto& c = shared();
  load("numerics_fixtures", "log_gather");
  auto plain = c.temp_path("in");
  draw("log_gather", 21, plain);
  auto p = read_safetensors(plain).tensors;
  for (const char* v : {"shift_scale", "outliers", "seed_stream"}) {
    auto path = c.temp_path("in");
    Json a = draw("log_gather", 21, path, v);
    INFO(v, ": ", str(a["variant"]));
    REQUIRE(a.contains("variant"));
    CHECK(a["variant"]["asked"] == v);
    // log(x + 1e-3) of positive values: every variant is accepted (a shift keeps positive values positive).
    CHECK(a["variant"]["applied"] == v);
    auto t = read_safetensors(path).tensors;
    auto x0 = floats(p.at("inputs.0")), x1 = floats(t.at("inputs.0"));
    REQUIRE(x0.size() == x1.size());
    size_t changed = 0;
    for (size_t i = 0; i < x0.size(); ++i) {
      CHECK(std::isfinite(x1[i]));
      changed += x0[i] != x1[i];
    }
    CHECK(changed > 0);
    if (std::string(v) == "outliers") {
      // A few per row (the last dimension: 512 -> 2 per row), pushed out by 10 spreads.
      CHECK(changed <= 64 * 2);
      float big = 0;
      for (float y : x1) big = std::max(big, y);
      CHECK(big > 2.5f);  // torch.rand is < 1; its spread ~0.29
    } else {
      CHECK(changed > x0.size() / 2);
    }
    if (std::string(v) == "seed_stream") {
      // The task's own index tensor of the later draw: another draw of the distribution.
      CHECK(t.at("inputs.1").dtype == p.at("inputs.1").dtype);
    } else {
      // The index tensor shuffled (R11: a kernel that read one row of indices alike on every row
      // passed): the same values, in other places, and the record says so.
      const Tensor &i0 = p.at("inputs.1"), &i1 = t.at("inputs.1");
      REQUIRE(i1.dtype == i0.dtype);
      REQUIRE(i1.dtype == "I64");
      std::vector<int64_t> before(16), after(16);
      std::memcpy(before.data(), i0.data.data(), 16 * 8);
      std::memcpy(after.data(), i1.data.data(), 16 * 8);
      CHECK(before != after);
      std::sort(before.begin(), before.end());
      std::sort(after.begin(), after.end());
      CHECK(before == after);
      bool said = false;
      for (const auto& q : a["variant"]["params"]) said |= q.value("input", -1) == 1 && q.value("shuffled", false);
      CHECK(said);
    }
    // The same seed, the same variant: the same values.
    auto again = c.temp_path("in");
    draw("log_gather", 21, again, v);
    CHECK(read_safetensors(again).tensors.at("inputs.0").data == t.at("inputs.0").data);
    // The reference on the variant is finite.
    auto out = c.temp_path("out");
    Json r = c.request({{"op", "reference"}, {"task_id", "log_gather"}, {"inputs", path}, {"out", out}});
    REQUIRE(r.value("ok", false));
    for (float y : floats(read_safetensors(out).tensors.at("outputs.0"))) CHECK(std::isfinite(y));
  }
  // "plain" is no variant; an unknown one is a bad request.
  Json plain_again = c.request({{"op", "inputs"}, {"task_id", "log_gather"}, {"seed", 21}, {"out", c.temp_path("in")}, {"variant", "plain"}});
  CHECK(plain_again.value("ok", false));
  CHECK_FALSE(plain_again.contains("variant"));
  Json bad = c.request({{"op", "inputs"}, {"task_id", "log_gather"}, {"seed", 21}, {"out", c.temp_path("in")}, {"variant", "adversarial"}});
  CHECK(bad["error"] == "bad_request");
  // The typed request spells it.
  Json typed = worker::request::inputs("log_gather", 21, "k", "outliers");
  CHECK(typed["variant"] == "outliers");
  CHECK_FALSE(worker::request::inputs("log_gather", 21, "k").contains("variant"));
}

TEST_CASE("numerics: a variant that makes the reference non-finite falls back to a milder one, and says so") {
  auto& c = shared();
  load("numerics_fixtures", "sqrt_one_minus");
  int fell_back = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    for (const char* v : {"shift_scale", "outliers"}) {
      auto path = c.temp_path("in");
      Json a = draw("sqrt_one_minus", seed, path, v);
      INFO(v, " seed ", seed, ": ", str(a["variant"]));
      const std::string applied = a["variant"]["applied"];
      // sqrt(1 - x): an outlier past 1 is NaN, always (x + 10 spreads, x + 3 spreads of torch.rand in
      // four places per row); a shift past 1 often (a positive shift, a scale over 1).
      if (std::string(v) == "outliers") CHECK(applied == "seed_stream");
      if (applied != v) {
        ++fell_back;
        CHECK(a["variant"]["tried"].size() >= 1);
        CHECK(a["variant"]["tried"][0]["variant"] == v);
        CHECK(a["variant"]["tried"][0]["rejected"].get<std::string>().find("not finite") != std::string::npos);
      } else {
        CHECK(a["variant"]["tried"].empty());
      }
      auto out = c.temp_path("out");
      Json r = c.request({{"op", "reference"}, {"task_id", "sqrt_one_minus"}, {"inputs", path}, {"out", out}});
      REQUIRE(r.value("ok", false));
      for (float y : floats(read_safetensors(out).tensors.at("outputs.0"))) REQUIRE(std::isfinite(y));
    }
  }
  CHECK(fell_back >= 4);
}

TEST_CASE("numerics: a stochastic reference is flagged at load; a deterministic one is not") {
  auto& c = shared();
  Json drop = c.request({{"op", "load"}, {"task_id", "drop"}, {"code", source("fixtures", "stochastic_dropout")}});
  REQUIRE_MESSAGE(drop.value("ok", false), str(drop));
  CHECK(drop["stochastic"] == true);
  CHECK(drop["stochastic_evidence"]["same_rng_bit_equal"] == true);
  CHECK(drop["stochastic_evidence"]["rel_diff_other_rng"].get<double>() > 0.1);
  Json rnd = c.request({{"op", "load"}, {"task_id", "rnd"}, {"code", source("fixtures", "stochastic_rand")}});
  REQUIRE(rnd.value("ok", false));
  CHECK(rnd["stochastic"] == true);
  for (const char* name : {"linear_relu", "softmax", "conv_bn"}) {
    Json a = c.request({{"op", "load"}, {"task_id", name}, {"code", source("fixtures", name)}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
    CHECK_MESSAGE(a["stochastic"] == false, name);
  }
  // The reference answer repeats it; a calibration of a stochastic reference is refused with a reason
  // (the judge then uses the published bound, if it judges at all).
  auto in = c.temp_path("in"), out = c.temp_path("out");
  draw("drop", 1, in);
  Json r = c.request({{"op", "reference"}, {"task_id", "drop"}, {"inputs", in}, {"out", out}, {"calibrate", "fp32"}});
  REQUIRE(r.value("ok", false));
  CHECK(r["stochastic"] == true);
  CHECK(r["calibration"].empty());
  CHECK(r["calibration_error"].get<std::string>().find("stochastic") != std::string::npos);
  auto tol = bundle::Tolerances::calibrated("fp32", r["calibration"], r["calibration_error"]);
  CHECK(tol.for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  // The typed request carries the calibration fields.
  Json typed = worker::request::reference("t", "in", "ref", std::nullopt, worker::request::Calibrate{"bf16", 4, 1e-4});
  CHECK(typed["calibrate"] == "bf16");
  CHECK(typed["calibrate_k"].get<double>() == 4);
  CHECK_FALSE(worker::request::reference("t", "in", "ref").contains("calibrate"));
}

// The largest |mean| over channels of an NCHW output: a BatchNorm on batch statistics gives ~0.
static double max_channel_mean(const std::vector<float>& y, int n, int c, int hw) {
  double worst = 0;
  for (int ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int b = 0; b < n; ++b)
      for (int i = 0; i < hw; ++i) s += y[(static_cast<size_t>(b) * c + ch) * hw + i];
    worst = std::max(worst, std::fabs(s / (n * hw)));
  }
  return worst;
}

TEST_CASE("numerics: the reference runs in the mode its task states (train by default, as KernelBench)") {
  auto& c = shared();
  const Json bn{{"task_id", "bn"}, {"code", source("fixtures", "conv_bn")}};
  // The typed request: train unless the record says eval; a mode that is not one names the field.
  CHECK(worker::request::load("bn", bn)["mode"] == "train");
  Json bn_eval = bn;
  bn_eval["reference"] = {{"mode", "eval"}};
  CHECK(worker::request::load("bn", bn_eval)["mode"] == "eval");
  Json bn_train = bn;
  bn_train["reference"] = {{"mode", "train"}};
  CHECK(worker::request::task_key(bn, "bn") == worker::request::task_key(bn_train, "bn"));  // keys of before
  CHECK(worker::request::task_key(bn, "bn") != worker::request::task_key(bn_eval, "bn"));
  for (const Json& bad : {Json{{"mode", "inference"}}, Json{{"mode", 1}}, Json("eval")}) {
    Json t = bn;
    t["reference"] = bad;
    try {
      worker::request::load("bn", t);
      FAIL("a bad reference was taken: " << bad.dump());
    } catch (const FieldError& e) {
      CHECK(e.field == (bad.is_object() ? "reference.mode" : "reference"));
    }
  }
  // BatchNorm in train mode normalizes with the batch's statistics (each channel's mean ~0); in eval
  // mode with its running ones (the conv's bias shows through). The answer says which ran.
  auto in = c.temp_path("in"), out_train = c.temp_path("out_train"), out_eval = c.temp_path("out_eval");
  Json a = c.request(worker::request::load("bn_train", bn));
  REQUIRE_MESSAGE(a.value("ok", false), str(a));
  CHECK(a["mode"] == "train");
  Json b = c.request(worker::request::load("bn_eval", bn_eval));
  REQUIRE_MESSAGE(b.value("ok", false), str(b));
  CHECK(b["mode"] == "eval");
  draw("bn_train", 3, in);
  REQUIRE(c.request({{"op", "reference"}, {"task_id", "bn_train"}, {"inputs", in}, {"out", out_train}}).value("ok", false));
  REQUIRE(c.request({{"op", "reference"}, {"task_id", "bn_eval"}, {"inputs", in}, {"out", out_eval}}).value("ok", false));
  auto yt = floats(read_safetensors(out_train).tensors.at("outputs.0"));
  auto ye = floats(read_safetensors(out_eval).tensors.at("outputs.0"));
  REQUIRE(yt.size() == 4u * 8 * 16 * 16);
  CHECK(max_channel_mean(yt, 4, 8, 256) < 1e-4);
  CHECK(max_channel_mean(ye, 4, 8, 256) > 1e-2);
  // A live dropout is stochastic in train mode only.
  Json drop_eval{{"code", source("fixtures", "stochastic_dropout")}, {"reference", {{"mode", "eval"}}}};
  Json d = c.request(worker::request::load("drop_eval", drop_eval));
  REQUIRE_MESSAGE(d.value("ok", false), str(d));
  CHECK(d["mode"] == "eval");
  CHECK(d["stochastic"] == false);
  // The raw protocol: a bad mode is a bad request naming the field; the older "eval": true is eval.
  Json bad = c.request({{"op", "load"}, {"task_id", "x"}, {"code", bn["code"]}, {"mode", "inference"}});
  CHECK(bad["error"] == "bad_request");
  CHECK(bad.value("detail", "").find("'mode'") != std::string::npos);
  Json clash = c.request({{"op", "load"}, {"task_id", "x"}, {"code", bn["code"]}, {"mode", "train"}, {"eval", true}});
  CHECK(clash["error"] == "bad_request");
  Json legacy = c.request({{"op", "load"}, {"task_id", "x"}, {"code", bn["code"]}, {"eval", true}});
  REQUIRE_MESSAGE(legacy.value("ok", false), str(legacy));
  CHECK(legacy["mode"] == "eval");
  // A Model that calls eval() itself runs in eval, and the answer says so rather than the default.
  Json self_eval = c.request({{"op", "load"}, {"task_id", "self_eval"},
                              {"code", source("fixtures", "stochastic_dropout") + "\n_M = Model\n"
                                       "class Model(_M):\n    def __init__(self):\n        super().__init__()\n        self.eval()\n"}});
  REQUIRE_MESSAGE(self_eval.value("ok", false), str(self_eval));
  CHECK(self_eval["mode"] == "eval");
  CHECK(self_eval["stochastic"] == false);
  for (const char* t : {"bn_train", "bn_eval", "drop_eval", "x", "self_eval"}) c.request(worker::request::unload(t));
}

TEST_CASE("numerics: insensitive and ill-conditioned references are measured at load, with their evidence") {
  auto& c = shared();
  // A big bias plus 1e-7 * x: the seed-0 outputs pass as the reference's for seed 1 and for a
  // shift_scale variant under the published bound (a constant answer would pass every check).
  Json ins = c.request({{"op", "load"}, {"task_id", "ins"}, {"code", source("fixtures", "insensitive_bias")}});
  REQUIRE_MESSAGE(ins.value("ok", false), str(ins));
  CHECK(ins["insensitive"] == true);
  CHECK(ins["ill_conditioned"] == false);
  const Json& checks = ins["insensitive_evidence"]["checks"];
  REQUIRE(checks.size() == 2);
  CHECK(checks[0]["against"] == "seed 1");
  CHECK(checks[0]["bit_equal"] == false);  // not bit-equal: the filter's input_dependent passes it
  CHECK(checks[1]["against"] == "variant shift_scale");
  for (const auto& ch : checks) {
    CHECK(ch["within"] == true);
    CHECK(ch["rel_l2"].get<double>() < 1e-6);
    CHECK(ch["elements_over"] == 0);
  }
  CHECK(ins["insensitive_evidence"]["bound"]["rel_l2"].get<double>() == doctest::Approx(5e-2));
  // (x + 1e8) - 1e8: fp32 rounds x to a multiple of 8, far from float64; sensitive to its input.
  Json ill = c.request({{"op", "load"}, {"task_id", "ill"}, {"code", source("fixtures", "ill_conditioned")}});
  REQUIRE_MESSAGE(ill.value("ok", false), str(ill));
  CHECK(ill["ill_conditioned"] == true);
  CHECK(ill["insensitive"] == false);
  CHECK(ill["ill_conditioned_evidence"]["fp32_err_rel_l2"].get<double>() > 0.05);
  CHECK(ill["ill_conditioned_evidence"]["cap_rel_l2"].get<double>() == doctest::Approx(5e-2));
  CHECK(ill["ill_conditioned_evidence"]["outputs"]["outputs.0"]["fp32_err_rel_l2"].get<double>() > 0.05);
  // Usable references: both flags false, the evidence saying how far other inputs move the outputs.
  for (const char* name : {"linear_relu", "softmax", "conv_bn", "two_outputs"}) {
    Json a = c.request({{"op", "load"}, {"task_id", name}, {"code", source("fixtures", name)}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
    CHECK_MESSAGE(a["insensitive"] == false, name, " ", str(a["insensitive_evidence"]));
    CHECK_MESSAGE(a["ill_conditioned"] == false, name, " ", str(a["ill_conditioned_evidence"]));
    CHECK(a["ill_conditioned_evidence"]["fp32_err_rel_l2"].get<double>() < 1e-5);
    CHECK(a["insensitive_evidence"]["checks"][0]["rel_l2"].get<double>() > 0.05);
  }
  // An output independent of the input is insensitive (bit-equal); a stochastic reference has no
  // float64 run (ill_conditioned null, with why).
  Json indep = c.request({{"op", "load"}, {"task_id", "indep"}, {"code", source("fixtures", "input_independent")}});
  REQUIRE(indep.value("ok", false));
  CHECK(indep["insensitive"] == true);
  CHECK(indep["insensitive_evidence"]["checks"][0]["bit_equal"] == true);
  Json drop = c.request({{"op", "load"}, {"task_id", "drop2"}, {"code", source("fixtures", "stochastic_dropout")}});
  REQUIRE(drop.value("ok", false));
  CHECK(drop["ill_conditioned"].is_null());
  CHECK(drop["ill_conditioned_evidence"]["error"].get<std::string>().find("stochastic") != std::string::npos);
  CHECK(drop["insensitive"] == false);
  // A task record's reference section carries both flags and their evidence.
  Json section = worker::request::reference_section(ins, "train");
  CHECK(section["insensitive"] == true);
  CHECK(section["ill_conditioned"] == false);
  CHECK(section["insensitive_evidence"]["checks"].size() == 2);
  CHECK(worker::request::reference_section(drop, "train")["ill_conditioned"].is_null());
}

TEST_CASE("numerics: the load's insensitive comparison is kernel-check's published compare (compare.cpp), verdict for verdict") {
  // The seed-0 outputs judged as a candidate's against the reference on seed 1, by compare_outputs
  // under the published bound, agree with the load's evidence (within, rel_l2, elements over): the
  // worker's rule is the judge's, so "a constant answer would pass" is what the judge would say.
  auto& c = shared();
  for (const char* name : {"insensitive_bias", "linear_relu", "softmax", "ill_conditioned"}) {
    CAPTURE(name);
    Json a = c.request({{"op", "load"}, {"task_id", std::string("pc_") + name}, {"code", source("fixtures", name)}});
    REQUIRE_MESSAGE(a.value("ok", false), str(a));
    const Json& seed1 = a["insensitive_evidence"]["checks"][0];
    REQUIRE(seed1["against"] == "seed 1");
    TensorMap outs[2];
    for (int s = 0; s < 2; ++s) {
      auto in = c.temp_path("in"), out = c.temp_path("out");
      draw(std::string("pc_") + name, static_cast<uint64_t>(s), in);
      Json r = c.request({{"op", "reference"}, {"task_id", std::string("pc_") + name}, {"inputs", in}, {"out", out}});
      REQUIRE_MESSAGE(r.value("ok", false), str(r));
      outs[s] = read_safetensors(out).tensors;
    }
    auto cmp = bundle::compare_outputs(outs[0], outs[1], "published", -1, -1);
    CHECK(cmp.ok == seed1["within"].get<bool>());
    CHECK(cmp.rel_l2_err == doctest::Approx(seed1["rel_l2"].get<double>()).epsilon(1e-6));
    int64_t n = 0;
    for (const auto& [k, t] : outs[1]) n += t.numel();
    CHECK(static_cast<int64_t>(std::llround(cmp.mismatch_fraction * static_cast<double>(n))) == seed1["elements_over"].get<int64_t>());
  }
}
