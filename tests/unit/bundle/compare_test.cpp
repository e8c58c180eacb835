// Units of the calibrated tolerance (libcommon/bundle/compare): bounds built from a worker's
// calibration, the half-reduction and bf16-weight shortcuts failing where the published bound lets
// them pass, honest reorderings passing, hostile calibrations unable to loosen the bound.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "libcommon/bundle/compare.hpp"
#include "libcommon/errors.hpp"

using namespace ca::bundle;

namespace {

ca::Tensor f32(const std::vector<float>& v) {
  ca::Tensor x = ca::Tensor::zeros("F32", {static_cast<int64_t>(v.size())});
  std::memcpy(x.data.data(), v.data(), v.size() * 4);
  return x;
}

ca::Json fp32_calibration(double ref_err, const std::string& precision = "fp32") {
  return ca::Json{{"outputs.0", {{"precision", precision}, {"ref_err_rel_l2", ref_err}, {"fp32_err_rel_l2", ref_err}}}};
}

// torch.mean(x, 1) over `rows` x `cols` uniform [0, 1) values: the reference (double accumulation,
// rounded to fp32), an honest fp32 kernel that sums left to right in float, and the shortcut that
// averages the first half of each row; and a blocked fp32 reduction (chains of 256 additions, then a
// pairwise tree over the chains), as a GPU kernel sums.
struct RowMeans {
  std::vector<float> reference, honest_serial, half_row, blocked;
};
RowMeans row_means(int rows, int cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  RowMeans m;
  for (int r = 0; r < rows; ++r) {
    double exact = 0;
    float serial = 0, half = 0;
    std::vector<float> chains((cols + 255) / 256, 0.0f);
    for (int c = 0; c < cols; ++c) {
      float x = u(gen);
      exact += x;
      serial += x;
      chains[static_cast<size_t>(c / 256)] += x;
      if (c < cols / 2) half += x;
    }
    while (chains.size() > 1) {
      std::vector<float> next;
      for (size_t i = 0; i < chains.size(); i += 2) next.push_back(i + 1 < chains.size() ? chains[i] + chains[i + 1] : chains[i]);
      chains.swap(next);
    }
    m.blocked.push_back(chains[0] / static_cast<float>(cols));
    m.reference.push_back(static_cast<float>(exact / cols));
    m.honest_serial.push_back(serial / static_cast<float>(cols));
    m.half_row.push_back(half / static_cast<float>(cols / 2));
  }
  return m;
}

}  // namespace

TEST_CASE("calibrated: the rule per precision, capped by the published bound") {
  CHECK(calibration_rule("fp32").k == 8);
  CHECK(calibration_rule("fp32").floor == doctest::Approx(5e-6));
  CHECK(calibration_rule("fp32").floor_min == doctest::Approx(3e-6));
  // The floor is fp32's for every claim (a claim earns only what its reference loses: below).
  for (const char* p : {"tf32", "fp16", "bf16", "int8", "fp8"}) {
    CHECK(calibration_rule(p).floor == doctest::Approx(5e-6));
    CHECK(calibration_rule(p).floor_min == doctest::Approx(3e-6));
  }
  CHECK(calibration_rule("tf32").reference_precision == "tf32");
  CHECK(calibration_rule("int8").reference_precision == "bf16");
  CHECK(calibration_rule("fp8").k == 16);
  CHECK_THROWS_AS(calibration_rule("fp64"), ca::InputError);
  // K * max(ref, fp32) + floor.
  auto tol = Tolerances::calibrated("fp32", fp32_calibration(1e-7));
  CHECK(tol.for_output("outputs.0", "F32").rel_norm == doctest::Approx(8 * 1e-7 + 5e-6));
  CHECK(tol.for_output("outputs.0", "F32").atol == doctest::Approx(1e-2));  // the elementwise gate stays published
  // A claimed precision never gets a bound below fp32's own: 8 x fp32's error + K x what the claim's
  // reference loses beyond it (nothing here) + fp32's floor.
  ca::Json c{{"outputs.0", {{"precision", "bf16"}, {"ref_err_rel_l2", 1e-9}, {"fp32_err_rel_l2", 1e-4}}}};
  CHECK(Tolerances::calibrated("bf16", c).for_output("outputs.0", "F32").rel_norm == doctest::Approx(8 * 1e-4 + 5e-6));
  ca::Json c2{{"outputs.0", {{"precision", "bf16"}, {"ref_err_rel_l2", 2e-3}, {"fp32_err_rel_l2", 1e-7}}}};
  CHECK(Tolerances::calibrated("bf16", c2).for_output("outputs.0", "F32").rel_norm ==
        doctest::Approx(8 * 1e-7 + 4 * (2e-3 - 1e-7) + 5e-6));
  CHECK(claim_term(1e-7, 2e-3, 16) == doctest::Approx(8 * 1e-7 + 16 * (2e-3 - 1e-7)));
  CHECK(claim_term(1e-7, 1e-9, 16) == doctest::Approx(8 * 1e-7));
  CHECK(claim_term(INFINITY, 1e-3, 4) == INFINITY);
  CHECK(claim_term(1e-7, INFINITY, 4) == INFINITY);
  // Hostile or broken calibrations cannot loosen the bound past the published one: a huge error, an
  // infinite one (null in JSON), a missing one.
  CHECK(Tolerances::calibrated("fp32", fp32_calibration(10)).for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  ca::Json inf{{"outputs.0", {{"precision", "fp32"}, {"ref_err_rel_l2", nullptr}, {"fp32_err_rel_l2", 1e-7}}}};
  CHECK(Tolerances::calibrated("fp32", inf).for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  ca::Json missing{{"outputs.0", {{"precision", "fp32"}}}};
  CHECK(Tolerances::calibrated("fp32", missing).for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  // Malformed: another precision's calibration, a negative or non-numeric error.
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", fp32_calibration(1e-7, "bf16")), ca::InputError);
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", fp32_calibration(-1)), ca::InputError);
  ca::Json text{{"outputs.0", {{"precision", "fp32"}, {"ref_err_rel_l2", "0"}}}};
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", text), ca::InputError);
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", ca::Json::array()), ca::InputError);
  CHECK_THROWS_AS(Tolerances::by_mode("loose"), ca::InputError);
}

TEST_CASE("calibrated: half a reduction fails where the published bound lets it pass; the honest serial sum passes") {
  // The exploit of issue 31: torch.mean(x, 1) over 16,384 torch.rand columns from the first half of
  // each row. fp32's own error on this task is ~1e-7 (the worker measures it; test_calibrate checks).
  RowMeans m = row_means(32, 16384, 7);
  ca::TensorMap want{{"outputs.0", f32(m.reference)}};
  auto tol = Tolerances::calibrated("fp32", fp32_calibration(6e-8));

  auto half_published = compare_outputs({{"outputs.0", f32(m.half_row)}}, want, "published", -1, -1);
  CHECK(half_published.ok);  // the hole: within atol = rtol = 1e-2 and the 5e-2 norm
  auto half = compare_outputs({{"outputs.0", f32(m.half_row)}}, want, tol);
  CHECK_FALSE(half.ok);
  CHECK(half.rel_l2_err > 1e-3);
  CHECK(half.reason.find("calibrated bound") != std::string::npos);
  CHECK(half.reason.find("for fp32") != std::string::npos);

  auto honest = compare_outputs({{"outputs.0", f32(m.honest_serial)}}, want, tol);
  CHECK(honest.ok);
  CHECK(honest.rel_l2_err > 0);  // a different summation order, really
  CHECK(honest.rel_l2_err < 1e-5);

  // The record says which bound judged it.
  ca::Json j = honest.to_json();
  CHECK(j["tolerance"]["mode"] == "calibrated");
  CHECK(j["tolerance"]["precision"] == "fp32");
  CHECK(j["tolerance"]["output"] == "outputs.0");
  CHECK(j["tolerance"]["bound_rel_l2"].get<double>() == doctest::Approx(8 * 6e-8 + 5e-6));
  CHECK(j["tolerance"]["measured_rel_l2"].get<double>() == doctest::Approx(honest.rel_l2_err));
  CHECK(half_published.to_json()["tolerance"]["mode"] == "published");
  CHECK(half_published.to_json()["tolerance"]["bound_rel_l2"].get<double>() == doctest::Approx(5e-2));
}

TEST_CASE("calibrated: a large constant part cannot dilute the floor (R10's H3)") {
  // (1) A block of constants: half the output 1000s (a parameter the task copies), half 0.1 * g(x).
  // ||ref|| is the block's; the floor 3e-5 of it is 0.03 per element of g's half: a kernel 0.008 off
  // on every computed element (8% of it, within atol) passed. The load measures the varying fraction
  // on two draws (0.1 * ||g0 - g1|| / (sqrt(2) * 1000 * ...), ~1e-4) and the floor is scaled by it.
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const size_t half = 2048;
  std::vector<float> ref(2 * half), rough(2 * half), honest(2 * half);
  for (size_t i = 0; i < half; ++i) {
    const float g = n(gen);
    ref[i] = rough[i] = honest[i] = 1000.0f + static_cast<float>(i % 3);
    ref[half + i] = 0.1f * g;
    rough[half + i] = 0.1f * g + 0.008f;
    honest[half + i] = ref[half + i] * (1.0f + 3.0f * 6e-8f);  // a few ulp, as fast-math is
  }
  ca::TensorMap want{{"outputs.0", f32(ref)}};
  ca::Json undiluted = fp32_calibration(3e-8);  // fp32's own error on g's half, over ||ref||: tiny
  ca::Json measured = undiluted;
  measured["outputs.0"]["varying_fraction"] = 1e-4;
  auto r = compare_outputs({{"outputs.0", f32(rough)}}, want, Tolerances::calibrated("fp32", measured));
  CHECK_FALSE(r.ok);
  CHECK(r.reason.find("x 0.0001 (the part of the output's norm the inputs move), 3e-06)") != std::string::npos);
  CHECK(compare_outputs({{"outputs.0", f32(honest)}}, want, Tolerances::calibrated("fp32", measured)).ok);
  // floor_min stays relative to the whole norm: 3e-6 for fp32.
  CHECK(Tolerances::calibrated("fp32", measured).for_output("outputs.0", "F32").rel_norm ==
        doctest::Approx(8 * 3e-8 + 3e-6));
  ca::Json mostly_varying = undiluted;
  mostly_varying["outputs.0"]["varying_fraction"] = 0.6;
  CHECK(Tolerances::calibrated("fp32", mostly_varying).for_output("outputs.0", "F32").rel_norm ==
        doctest::Approx(8 * 3e-8 + 3e-6));  // max(5e-6 x 0.6, 3e-6)

  // (2) R10's form: a bias of 200 on every element of a product p of rms ~0.6; a kernel whose
  // product is 3.5e-3 off (int8 weights) is 1.2e-5 off over ||ref||. fp32's own error is half an
  // ulp of 200 over 200 (~3e-8); the varying fraction ~0.6 / 200 = 3e-3.
  std::vector<float> bref(4096), bint8(4096);
  for (size_t i = 0; i < bref.size(); ++i) {
    const float p = 0.6f * n(gen);
    bref[i] = 200.0f + p;
    bint8[i] = 200.0f + p * (1.0f + 3.5e-3f * n(gen));
  }
  ca::Json biased = fp32_calibration(3e-8);
  // Unscaled (f = 1), it passed the old floor 3e-5; the fp32 floor 5e-6 (R11) fails it even so.
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(bint8)}}, {{"outputs.0", f32(bref)}}, Tolerances::calibrated("fp32", biased)).ok);
  biased["outputs.0"]["varying_fraction"] = 3e-3;
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(bint8)}}, {{"outputs.0", f32(bref)}}, Tolerances::calibrated("fp32", biased)).ok);

  // (3) Why a tenth stays: the row means of torch.rand (0.5 give or take 0.002, f ~ 5e-3). Honest
  // rounding is relative to each value: a serial chain of 16,384 fp32 additions is ~2e-6 off, over
  // a floor scaled by f alone (1.4e-7), within a tenth of it. A blocked reduction (chains of 256,
  // then a tree) is within K * the reference's error either way; half the row is not.
  RowMeans m = row_means(32, 16384, 7);
  ca::Json rows = fp32_calibration(6e-8);
  rows["outputs.0"]["varying_fraction"] = 5e-3;
  ca::TensorMap mean_want{{"outputs.0", f32(m.reference)}};
  auto serial = compare_outputs({{"outputs.0", f32(m.honest_serial)}}, mean_want, Tolerances::calibrated("fp32", rows));
  CHECK_MESSAGE(serial.ok, serial.reason);
  CHECK(serial.rel_l2_err > 8 * 6e-8 + 3e-5 * 5e-3);  // what f alone would have refused
  auto blocked = compare_outputs({{"outputs.0", f32(m.blocked)}}, mean_want, Tolerances::calibrated("fp32", rows));
  CHECK_MESSAGE(blocked.ok, blocked.reason);
  CHECK(blocked.rel_l2_err < 8 * 6e-8);
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(m.half_row)}}, mean_want, Tolerances::calibrated("fp32", rows)).ok);

  // Absent: the whole norm (1). Out of [0, 1] or not a number: refused, never a looser bound.
  CHECK(Tolerances::calibrated("fp32", undiluted).for_output("outputs.0", "F32").varying_fraction == 1);
  for (ca::Json bad : {ca::Json(1.5), ca::Json(-0.1), ca::Json("0.5"), ca::Json(nullptr)}) {
    ca::Json c = undiluted;
    c["outputs.0"]["varying_fraction"] = bad;
    CHECK_THROWS_AS(Tolerances::calibrated("fp32", c), ca::InputError);
  }
}

TEST_CASE("calibrated: bf16-rounded values in an fp32 record fail; fp16 storage fails; fast-math-sized errors pass") {
  std::mt19937 gen(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> ref(4096), bf16(4096), fp16ish(4096), fast(4096);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = n(gen);
    uint32_t u;
    std::memcpy(&u, &ref[i], 4);
    u = (u + 0x8000u) & 0xffff0000u;  // round to bf16
    std::memcpy(&bf16[i], &u, 4);
    fp16ish[i] = ref[i] * (1.0f + std::ldexp(static_cast<float>(i % 7) - 3.0f, -13));  // ~fp16 rounding
    fast[i] = ref[i] * (1.0f + std::ldexp(static_cast<float>(i % 5) - 2.0f, -22));     // a few ulp
  }
  ca::TensorMap want{{"outputs.0", f32(ref)}};
  auto tol = Tolerances::calibrated("fp32", fp32_calibration(3e-8));
  CHECK(compare_outputs({{"outputs.0", f32(bf16)}}, want, "published", -1, -1).ok);
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(bf16)}}, want, tol).ok);
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(fp16ish)}}, want, tol).ok);
  CHECK(compare_outputs({{"outputs.0", f32(fast)}}, want, tol).ok);
  // The same bf16 values claimed as bf16 on a task where bf16 autocast is that inaccurate pass.
  ca::Json bf{{"outputs.0", {{"precision", "bf16"}, {"ref_err_rel_l2", 2e-3}, {"fp32_err_rel_l2", 3e-8}}}};
  CHECK(compare_outputs({{"outputs.0", f32(bf16)}}, want, Tolerances::calibrated("bf16", bf)).ok);
  // ... and fail where bf16 autocast computes in fp32 (a reduction autocast leaves alone): claiming
  // bf16 buys no looser bound than the baseline it is timed against has.
  ca::Json bf_exact{{"outputs.0", {{"precision", "bf16"}, {"ref_err_rel_l2", 3e-8}, {"fp32_err_rel_l2", 3e-8}}}};
  CHECK_FALSE(compare_outputs({{"outputs.0", f32(bf16)}}, want, Tolerances::calibrated("bf16", bf_exact)).ok);
}

TEST_CASE("calibrated: a claim where the reference loses nothing earns nothing (red team 33: an unused fp8 scratch)") {
  // x / ||x|| (a norm autocast computes in fp32): the fp8/bf16 reference is as exact as fp32's. A
  // kernel that samples the norm is ~2e-4 off. Before session 33 an unused scratch declared
  // float8_e4m3fn read the record as fp8 and bought 16 x 1e-7 + 1e-3: it passed. Now the claim adds
  // K x (ep - e32) = 0 to fp32's bound: it fails, as the same kernel read as fp32 does.
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> ref(8192), sampled(8192);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = n(gen);
    sampled[i] = ref[i] * (1.0f + 2e-4f);  // the norm 2e-4 off: every element scaled by it
  }
  ca::TensorMap want{{"outputs.0", f32(ref)}};
  for (const char* p : {"fp32", "tf32", "fp16", "bf16", "int8", "fp8"}) {
    ca::Json same{{"outputs.0", {{"precision", p}, {"ref_err_rel_l2", 1e-7}, {"fp32_err_rel_l2", 1e-7}}}};
    auto r = compare_outputs({{"outputs.0", f32(sampled)}}, want, Tolerances::calibrated(p, same));
    CHECK_MESSAGE(!r.ok, p);
    CHECK(r.reason.find("calibrated bound") != std::string::npos);
    CHECK(Tolerances::calibrated(p, same).for_output("outputs.0", "F32").rel_norm == doctest::Approx(8e-7 + 5e-6));
  }
  // Where the claim's reference does lose (a GEMM autocast runs in bf16: 2e-3), the claim earns it.
  ca::Json lossy{{"outputs.0", {{"precision", "fp8"}, {"ref_err_rel_l2", 2e-3}, {"fp32_err_rel_l2", 1e-7}}}};
  auto ok = compare_outputs({{"outputs.0", f32(sampled)}}, want, Tolerances::calibrated("fp8", lossy));
  CHECK(ok.ok);
  // The reason names how the bound was made.
  ca::Json same_bf{{"outputs.0", {{"precision", "bf16"}, {"ref_err_rel_l2", 1e-7}, {"fp32_err_rel_l2", 1e-7}}}};
  auto r = compare_outputs({{"outputs.0", f32(sampled)}}, want, Tolerances::calibrated("bf16", same_bf));
  CHECK(r.reason.find("8 x fp32's error against float64") != std::string::npos);
  CHECK(r.reason.find("4 x what the bf16 reference's") != std::string::npos);
}

TEST_CASE("calibrated: the elementwise gate, integers, fallbacks, several outputs") {
  std::vector<float> ref(10000, 1.0f), spike = ref;
  spike[17] = 1.5f;  // rel L2 5e-3 would fail the norm anyway; the elementwise gate names the index
  ca::TensorMap want{{"outputs.0", f32(ref)}};
  auto tol = Tolerances::calibrated("fp32", ca::Json{{"outputs.0", {{"precision", "fp32"}, {"ref_err_rel_l2", 1.0}}}});
  auto r = compare_outputs({{"outputs.0", f32(spike)}}, want, tol);  // norm bound capped at 5e-2: passes it
  CHECK_FALSE(r.ok);
  CHECK(r.reason.find("outputs.0[17]") != std::string::npos);

  // Integers: exact, no calibration needed or read.
  ca::Tensor iw = ca::Tensor::zeros("I64", {3}), ig = ca::Tensor::zeros("I64", {3});
  int64_t one = 1;
  std::memcpy(ig.data.data(), &one, 8);
  auto ints = compare_outputs({{"outputs.0", ig}}, {{"outputs.0", iw}}, Tolerances::calibrated("fp32", ca::Json::object()));
  CHECK_FALSE(ints.ok);

  // No calibration for an output (the worker could not run float64, or the reference is stochastic):
  // the published bound, and the record says why.
  auto fb = Tolerances::calibrated("fp32", ca::Json::object(), "calibrate: forward in float64: RuntimeError: no double kernel");
  CHECK(fb.for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  CHECK(fb.for_output("outputs.0", "F32").mode == "published");
  std::vector<float> off(ref.size(), 1.001f);
  auto res = compare_outputs({{"outputs.0", f32(off)}}, want, fb);
  CHECK(res.ok);
  CHECK(res.to_json()["tolerance"]["fallback"].get<std::string>().find("no double kernel") != std::string::npos);

  // Two outputs: each its own bound; the record names the one closest to it.
  ca::TensorMap want2{{"outputs.0", f32(ref)}, {"outputs.1", f32(ref)}};
  ca::Json cal2{{"outputs.0", {{"precision", "fp32"}, {"ref_err_rel_l2", 1e-7}, {"fp32_err_rel_l2", 1e-7}}},
                {"outputs.1", {{"precision", "fp32"}, {"ref_err_rel_l2", 1e-3}, {"fp32_err_rel_l2", 1e-3}}}};
  std::vector<float> slightly(ref.size(), 1.0f + 1e-4f);
  auto two = compare_outputs({{"outputs.0", f32(slightly)}, {"outputs.1", f32(slightly)}}, want2,
                             Tolerances::calibrated("fp32", cal2));
  CHECK_FALSE(two.ok);  // outputs.0's bound is ~5e-6
  CHECK(two.reason.rfind("outputs.0:", 0) == 0);
  ca::Json tj = two.to_json()["tolerance"];
  CHECK(tj["output"] == "outputs.0");
  CHECK(tj["outputs"]["outputs.1"]["bound_rel_l2"].get<double>() == doctest::Approx(8e-3 + 5e-6));
}

TEST_CASE("published and strict modes are unchanged; records of before calibration read as published") {
  ca::TensorMap want{{"outputs.0", f32({1, 2, 3, 100})}};
  ca::TensorMap got{{"outputs.0", f32({1.005f, 2, 3, 100.5f})}};
  CHECK(compare_outputs(got, want, "published", -1, -1).ok);
  CHECK(compare_outputs(got, want, "default", -1, -1).ok);
  CHECK_FALSE(compare_outputs(got, want, "strict", -1, -1).ok);
  CHECK(Tolerances::by_mode("published").for_output("outputs.0", "F32").rel_norm == doctest::Approx(5e-2));
  CHECK(Tolerances::by_mode("strict").for_output("outputs.0", "F32").rel_norm == doctest::Approx(1e-3));
  // A calibration without its entries (the reference is stochastic): published, with the reason.
  CHECK(Tolerances::calibrated("fp32", ca::Json(), "the reference is stochastic").for_output("outputs.0", "F32").fallback ==
        "the reference is stochastic");
  // An entry's precision of another type (a record's check.calibration, read by kernel-prof) is bad
  // input naming the output, never the JSON library's type error (an internal error, exit 4).
  CHECK_THROWS_WITH_AS(Tolerances::calibrated("fp32", ca::Json::parse(R"({"outputs.0": {"precision": 7}})")),
                       doctest::Contains("calibration of outputs.0 is for precision 7"), ca::InputError);
}

TEST_CASE("fill_calibration: an output a call could not calibrate takes the warm call's bound, never the published one") {
  const ca::Json warm = ca::Json::parse(R"j({"outputs.0": {"precision": "fp32", "ref_err_rel_l2": 1e-7, "fp32_err_rel_l2": 1e-7},
                                              "outputs.1": {"precision": "fp32", "ref_err_rel_l2": 2e-7, "fp32_err_rel_l2": 2e-7}})j");
  // This call calibrated outputs.0 only (its float64 run failed for outputs.1).
  ca::Json call = ca::Json::parse(R"j({"outputs.0": {"precision": "fp32", "ref_err_rel_l2": 3e-7, "fp32_err_rel_l2": 3e-7}})j");
  std::string error = "out of memory";
  std::string note = Tolerances::fill_calibration(call, error, warm);
  CHECK(note.find("outputs.1 bounded by the warm call's") != std::string::npos);
  CHECK(note.find("out of memory") != std::string::npos);
  CHECK(error.empty());
  CHECK(call["outputs.0"]["ref_err_rel_l2"].get<double>() == doctest::Approx(3e-7));  // its own kept
  CHECK(call["outputs.1"]["ref_err_rel_l2"].get<double>() == doctest::Approx(2e-7));
  // The bound from the merged calibration is the calibrated one, far under the published 5e-2.
  Tolerances t = Tolerances::calibrated("fp32", call, error);
  CHECK(t.for_output("outputs.1", "F32").rel_norm < 1e-3);
  // Nothing missing: nothing changes, no note; no fallback: nothing filled.
  ca::Json full = warm;
  std::string none;
  CHECK(Tolerances::fill_calibration(full, none, warm).empty());
  ca::Json empty = ca::Json::object();
  std::string err2 = "x";
  CHECK(Tolerances::fill_calibration(empty, err2, nullptr).empty());
  CHECK(err2 == "x");
}

TEST_CASE("calibrated: the elementwise gate allows K x the elements the reference itself misses, at most 1e-4 of the output") {
  // Mamba2 (KernelBench level 3, 48/49): sums of terms ~1e12 that cancel to values ~20; the fp32
  // reference itself misses atol = rtol = 1e-2 against float64 on ~3e-6 of the elements, and an
  // honest kernel (as accurate, rounded otherwise) misses it against the fp32 reference there.
  const size_t n = 200000;
  std::vector<float> ref(n), got(n);
  std::mt19937 gen(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) ref[i] = got[i] = 100.0f * g(gen);
  for (size_t i = 0; i < 12; ++i) got[i * 9001] += 30.0f;  // 12 elements off by far more than 1e-2 + 1e-2 |ref|
  ca::TensorMap want{{"outputs.0", f32(ref)}}, cand{{"outputs.0", f32(got)}};
  auto with_misses = [](int64_t ref_misses, int64_t fp32_misses) {
    ca::Json c = fp32_calibration(1e-3);  // a norm bound the 12 elements stay within
    c["outputs.0"]["ref_elementwise_misses"] = ref_misses;
    c["outputs.0"]["fp32_elementwise_misses"] = fp32_misses;
    return Tolerances::calibrated("fp32", c);
  };
  // No misses of the reference's own (every task but a few): no allowance, as before.
  auto none = compare_outputs(cand, want, with_misses(0, 0));
  CHECK_FALSE(none.ok);
  CHECK(none.reason.find("outputs.0[0]: expected") != std::string::npos);
  CHECK(none.to_json()["tolerance"].contains("elementwise_allowance") == false);
  auto without = compare_outputs(cand, want, Tolerances::calibrated("fp32", fp32_calibration(1e-3)));
  CHECK_FALSE(without.ok);  // an older worker's calibration (no counts) allows nothing
  // The reference misses 2 (fp32's count, the larger): 8 x 2 = 16 allowed, 12 missed: passes, and says so.
  auto ok = compare_outputs(cand, want, with_misses(1, 2));
  CHECK(ok.ok);
  ca::Json j = ok.to_json();
  CHECK(j["tolerance"]["elementwise_allowance"]["outputs.0"]["misses"] == 12);
  CHECK(j["tolerance"]["elementwise_allowance"]["outputs.0"]["allowed"] == 16);
  CHECK(ok.mismatch_fraction == doctest::Approx(12.0 / n));
  // The reference misses 1: 8 allowed, 12 missed: fails, naming the allowance.
  auto over = compare_outputs(cand, want, with_misses(1, 0));
  CHECK_FALSE(over.ok);
  CHECK(over.reason.find("12 of 200000 elements of outputs.0 miss it, more than the 8 allowed") != std::string::npos);
  // Never more than 1e-4 of the output (20 of 200,000 here), however many the reference misses:
  // a task whose fp32 reference misses many elements gives a kernel no license to skip them.
  auto capped = compare_outputs(cand, want, with_misses(1000000, 0));
  CHECK(capped.ok);
  CHECK(capped.to_json()["tolerance"]["elementwise_allowance"]["outputs.0"]["allowed"] == 20);
  for (size_t i = 0; i < 9; ++i) got[i * 9001 + 4] -= 30.0f;  // 21 elements now
  auto past_cap = compare_outputs({{"outputs.0", f32(got)}}, want, with_misses(1000000, 0));
  CHECK_FALSE(past_cap.ok);
  CHECK(past_cap.reason.find("more than the 20 allowed") != std::string::npos);
  // The norm bound still holds on every element: within the count, but far off in norm, fails.
  std::vector<float> zeroed = ref;
  for (size_t i = 0; i < 10; ++i) zeroed[i * 9001] = 0.0f;
  ca::Json c = fp32_calibration(1e-7);
  c["outputs.0"]["fp32_elementwise_misses"] = 5;
  auto norm = compare_outputs({{"outputs.0", f32(zeroed)}}, want, Tolerances::calibrated("fp32", c));
  CHECK_FALSE(norm.ok);
  CHECK(norm.reason.find("calibrated bound") != std::string::npos);
  // A count near int64's limit (a hostile record) is still capped, not overflowed.
  CHECK(compare_outputs(cand, want, with_misses(INT64_MAX, 0)).to_json()["tolerance"]["elementwise_allowance"]["outputs.0"]["allowed"] == 20);
  // Malformed counts are bad input.
  ca::Json bad = fp32_calibration(1e-7);
  bad["outputs.0"]["ref_elementwise_misses"] = -1;
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", bad), ca::InputError);
  bad["outputs.0"]["ref_elementwise_misses"] = 1.5;
  CHECK_THROWS_AS(Tolerances::calibrated("fp32", bad), ca::InputError);
}

TEST_CASE("calibrated elementwise slack: misses of atol within K x the reference's largest error, on at most 1% of an output") {
  // Outputs of ~1e3 (sums of thousands of products, as KernelBench's 14_Gemm_Divide_Sum_Scaling): the
  // fp32 reference is ~1e-2 off float64 at worst, and a kernel that sums in another order is off the
  // reference by as much; where an element is near zero, atol = 1e-2 alone fails it.
  const size_t n = 4096;
  std::vector<float> ref(n), got(n);
  std::mt19937 gen(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) ref[i] = got[i] = 1000.0f * g(gen);
  ref[17] = 0.25f;
  got[17] = 0.25f + 0.03f;  // 0.03 off where |ref| is 0.25: misses 1e-2 + 1e-2 x 0.25
  ca::TensorMap want{{"outputs.0", f32(ref)}}, cand{{"outputs.0", f32(got)}};
  auto with_max_abs = [](const ca::Json& ref_abs, const ca::Json& fp32_abs) {
    ca::Json c = fp32_calibration(1e-6);
    c["outputs.0"]["ref_err_max_abs"] = ref_abs;
    c["outputs.0"]["fp32_err_max_abs"] = fp32_abs;
    return Tolerances::calibrated("fp32", c);
  };
  // No slack (an older worker's calibration, or a reference exact to float64): fails at index 17.
  auto old = compare_outputs(cand, want, Tolerances::calibrated("fp32", fp32_calibration(1e-6)));
  CHECK_FALSE(old.ok);
  CHECK(old.reason.find("outputs.0[17]: expected 0.25") != std::string::npos);
  CHECK(old.to_json()["tolerance"].contains("elementwise_slack") == false);
  // fp32's largest error 5e-3 (the larger of the two): slack 8 x 5e-3 = 0.04; 0.03 passes, and the record
  // says so: 1 miss of the published gate, 40 allowed (1% of 4,096). atol itself stays the published one.
  auto tols = with_max_abs(1e-3, 5e-3);
  CHECK(tols.for_output("outputs.0", "F32").atol == doctest::Approx(1e-2));
  CHECK(tols.for_output("outputs.0", "F32").elementwise_slack == doctest::Approx(0.04));
  auto ok = compare_outputs(cand, want, tols);
  CHECK_MESSAGE(ok.ok, ok.reason);
  ca::Json slack = ok.to_json()["tolerance"]["elementwise_slack"]["outputs.0"];
  CHECK(slack["slack"].get<double>() == doctest::Approx(0.04));
  CHECK(slack["misses"] == 1);
  CHECK(slack["allowed"] == 40);
  // Slack 8 x 2e-3 = 0.016: 0.03 is past it, and the reason names both parts.
  auto tight = compare_outputs(cand, want, with_max_abs(2e-3, 1e-3));
  CHECK_FALSE(tight.ok);
  CHECK(tight.reason.find("outputs.0[17]: expected 0.25") != std::string::npos);
  CHECK(tight.reason.find("atol 0.01 + 0.016 (8 x the reference's largest error against float64)") != std::string::npos);
  // Within the slack, but on more than 1% of the output: 60 elements near zero, each 0.03 off.
  std::vector<float> many_ref = ref, many = got;
  for (size_t i = 0; i < 60; ++i) {
    many_ref[100 + i] = 0.5f;
    many[100 + i] = 0.53f;
  }
  auto spread = compare_outputs({{"outputs.0", f32(many)}}, {{"outputs.0", f32(many_ref)}}, tols);
  CHECK_FALSE(spread.ok);
  CHECK(spread.reason.find("61 of 4096 elements of outputs.0 miss it, more than the 40 allowed within atol") !=
        std::string::npos);
  // A small output (16 elements: 1% is none of them) still gets one element within the slack, not two.
  std::vector<float> small_ref(16), small_got(16);
  for (size_t i = 0; i < 16; ++i) small_ref[i] = small_got[i] = 1000.0f * g(gen);
  small_ref[3] = 0.25f;
  small_got[3] = 0.28f;
  auto one = compare_outputs({{"outputs.0", f32(small_got)}}, {{"outputs.0", f32(small_ref)}}, tols);
  CHECK_MESSAGE(one.ok, one.reason);
  CHECK(one.to_json()["tolerance"]["elementwise_slack"]["outputs.0"]["allowed"] == 1);
  small_ref[9] = -0.5f;
  small_got[9] = -0.53f;
  auto two = compare_outputs({{"outputs.0", f32(small_got)}}, {{"outputs.0", f32(small_ref)}}, tols);
  CHECK_FALSE(two.ok);
  CHECK(two.reason.find("2 of 16 elements of outputs.0 miss it, more than the 1 allowed") != std::string::npos);
  // The slack is set by the largest values; it never lets the small ones go unjudged: rows of ~1e6
  // (fp32 is ~0.06 off there: slack 0.48) beside rows of ~0.3, the small ones left zero (half the
  // work). The norm does not see them (3e-7 against the bound 1.3e-5), and each is within atol +
  // slack; they miss atol on half the output, more than the 1%: incorrect.
  std::vector<float> mixed(n), skipped(n);
  for (size_t i = 0; i < n; ++i) {
    mixed[i] = i % 2 ? 1.0e6f + 1000.0f * g(gen) : 0.3f + 0.01f * g(gen);
    skipped[i] = i % 2 ? mixed[i] : 0.0f;
  }
  auto diluted = compare_outputs({{"outputs.0", f32(skipped)}}, {{"outputs.0", f32(mixed)}}, with_max_abs(0.0, 0.06));
  CHECK_FALSE(diluted.ok);
  CHECK(diluted.rel_l2_err < 1.3e-5);
  CHECK(diluted.reason.find("more than the 40 allowed within atol 0.01 + 0.48") != std::string::npos);
  // The norm bound still holds: within the slack everywhere, but off in norm, fails.
  std::vector<float> shifted = ref;
  for (size_t i = 0; i < n; ++i) shifted[i] += 0.03f;
  auto norm = compare_outputs({{"outputs.0", f32(shifted)}}, want, tols);
  CHECK_FALSE(norm.ok);  // 0.03 / ~1000 = 3e-5 against 8 x 1e-6 + 5e-6
  CHECK(norm.reason.find("calibrated bound") != std::string::npos);
  // Integers stay exact.
  CHECK(tols.for_output("outputs.0", "I32").atol == 0);
  CHECK(tols.for_output("outputs.0", "I32").elementwise_slack == 0);
  // Null (the precision could not compute the output) is no slack; malformed values are bad input.
  CHECK(with_max_abs(nullptr, nullptr).for_output("outputs.0", "F32").elementwise_slack == 0);
  CHECK_THROWS_AS(with_max_abs(-1.0, 0.0), ca::InputError);
  CHECK_THROWS_AS(with_max_abs("0.1", 0.0), ca::InputError);
}
