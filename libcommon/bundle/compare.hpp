// Output comparison in the parent: the candidate's outputs against the reference worker's, with
// dtype-aware tolerances (|got - want| <= atol + rtol * |want|, as torch.allclose) and a bound on
// the relative error norm calibrated per task and claimed precision (below), NaN/Inf named.
// Two places the bytes can be, one rule: on the host (safetensors tensors) or on the device (the
// runner's outputs and the worker's references mapped by CUDA IPC, compared by a trusted kernel
// where they are: gigabyte outputs never cross PCIe). Both reduce an output to the same
// OutputStats, and one function turns stats into the verdict.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libcommon/jsonl.hpp"
#include "libcommon/safetensors.hpp"

namespace ca::bundle {

// ---- Which bound judges an output ---------------------------------------------------------------
//
// Three modes (kernel-check --tolerance):
// - "calibrated" (the default): the bound is what the claimed precision achieves on this task. The
//   worker's `reference` request with "calibrate": "<precision>" computes, on the same inputs, the
//   reference in float64 and the reference at that precision, and returns per output the error of
//   that reference against float64 (ref_err_rel_l2) and of the fp32 reference (fp32_err_rel_l2).
//   The candidate, compared with the fp32 reference, must meet
//       ||out - ref|| / ||ref|| <= min(8 * e32 + K * max(0, ep - e32) + max(floor * f, floor_min), 5e-2)
//   with e32 = fp32_err_rel_l2 and ep = ref_err_rel_l2 (for an fp32 claim K = 8 and ep = e32: 8 * e32):
//   fp32's own bound, plus K times what the reference at the claimed precision loses beyond fp32's
//   (claim_term): a claim earns only what the baseline it is timed against actually loses on this
//   task. f (varying_fraction, at most 1) is ||o0 - o1|| / (sqrt(2) ||o1||) of two plain draws at
//   load: the part of the output's norm the inputs move, about 1 for most outputs. Most
//   of the floor is relative to that part, not to the whole norm, which a constant part would
//   dilute: a Linear with a bias of 200 (f = 3e-3) let int8 weights (3.5e-3 off the product) pass
//   at 1.2e-5 and bf16 weights at 4e-6 to 9e-6; a block of 1000s beside computed values let those
//   be 8% off (red team R10's H3). floor_min stays relative to the whole norm (a tenth of the floor,
//   kMinFloorScale, but for fp32's: 3e-6, the tenth of its floor before session 22):
//   honest per-element rounding is relative to each value, whatever part of it the inputs move
//   (below). So a constant part dilutes the floor at most tenfold. The claims' own floors of before
//   session 33 (below) let bf16-truncated weights pass there below f ~ 0.03 and 8-bit formats below
//   f ~ 0.003 (red team R11: int8 weights on columns with a bias of 6000 beside int16 on the rest,
//   f ~ 1e-4, passed at 0.12-0.34 of the bound); every claim now has fp32's floor, and ops-synth's
//   filter still drops a task with f
//   under 0.1 whose params are a quarter of the bytes a call moves (not_diluted, filters.py). The
//   K * error part needs no such scale: the reference's own error is measured on the same output.
//   Until session 33 each claim had its own floor (1e-4 for fp16/bf16, 1e-3 for int8/fp8) and K
//   multiplied max(ep, e32): an unused scratch declared float8_e4m3fn made an fp32 kernel read as fp8
//   and bought a flat ~1e-3 bound on reductions and norms autocast leaves in fp32 (ep = e32 there),
//   200x fp32's, enough for a sampled norm (red team 33), while the bar it is timed against did not
//   move.
//   The candidate must also pass, as a second gate, the published elementwise allclose (atol = rtol = 1e-2 for floats,
//   exact for integers). Integer outputs are compared exactly and have no calibration.
// - "published": atol = rtol = 1e-2 elementwise and the 5e-2 relative-norm bound, for every dtype
//   (as the CUDA Agent paper published; "default", its old name, is read as this).
// - "strict": 1e-4 elementwise and a 1e-3 norm for fp32/fp64 (KernelBench's), 1e-2 for half types.
//
// K and the floor, per claimed precision (calibration_rule), and why:
// - fp32: K = 8, floor = 5e-6, floor_min = 3e-6. (The floor was 3e-5 until session 22: 16-bit
//   fixed-point weights with a scale per row, widened with integer instructions so the record reads
//   fp32, are 1.54e-5 off on a Linear(4096, 2048) and passed it at half the bytes; red team R11, on
//   the H100. With 5e-6 their bound is 6.8e-6. Every honest bundle judged on the device, 5 of level 1
//   and 39 of level 3, needs none of the floor: K times the reference's error covers its error.)
//   Honest fp32 kernels differ from the reference by their own rounding,
//   which is about as large as the reference's error against float64: another summation order,
//   split-K partial sums and tree reductions land within 1-3x that error, and K = 8 leaves room
//   for a draw's noise. The floor covers what the reference's error does not predict: fast-math
//   intrinsics (__expf, __fdividef, rsqrtf: a few ulp, ~1e-6 relative for moderate arguments) and a
//   naive serial accumulation (a sum of 16,384 randn values left to right in fp32 is ~3e-6 off)
//   where the reference's tree summation has ~1e-7. Against it: storing values in fp16 costs
//   ~2.5e-4, bf16-rounded weights ~1e-3, 16-bit fixed-point weights ~1.5e-5, a reduction over half
//   the row ~5e-3, a sampled reduction of 15/16 of it ~1e-3: all fail. Where most of an output is
//   the same on every draw the floor term is at least floor_min (3e-6 for fp32), which honest
//   per-element rounding needs:
//   on the row means of torch.rand (0.5 give or take 0.002, f ~ 5e-3) a serial chain of 16,384
//   additions is 1.7e-6 off (blocked reductions, chains of up to ~1,000 then a tree: 5e-8 to
//   1.2e-7; pairwise, as the reference: 5e-8), and on KernelBench's cumsums of torch.rand over
//   32,768 columns (f ~ 3e-3) a sequential scan per row is 2.4e-6 off (blocked: 5e-8 to 1e-7), in
//   numpy's float32 arithmetic. With the floor scaled by f alone both would fail.
// - Every other claim: fp32's floor, and K on the excess of its reference's error over fp32's.
// - tf32: K = 4. TF32's error is its 10-bit operand rounding, which an honest TF32 kernel repeats
//   (truncating instead of rounding doubles it at most); bf16 operands (8x TF32's unit roundoff) in
//   a record read as tf32 fail.
// - fp16, bf16: K = 4, on the error of torch's autocast reference. A kernel that rounds where
//   autocast rounds passes; one that rounds where autocast keeps fp32 (a softmax or a reduction
//   autocast computes in fp32) does not: it is less accurate than the baseline it is timed against.
// - int8, fp8: no autocast of their own: calibrated by bf16's error, K = 16 (fp8 e4m3's unit
//   roundoff is 16x bf16's). The published elementwise gate still applies.
// An output without a calibration (the worker could not run the task in float64 or at that
// precision, or the reference is stochastic) is judged by the published bound, and says so.
struct CalibrationRule {
  std::string reference_precision;  // the precision whose reference error calibrates the claim
  double k = 8, floor = 5e-6;
  double floor_min = 3e-6;  // the part relative to the whole output: the floor term is max(floor * f, floor_min)
};
// The rule for a claimed precision (fp32, tf32, fp16, bf16, int8, fp8); InputError otherwise.
CalibrationRule calibration_rule(const std::string& precision);
// What a claim of K earns from a measured error of the reference (rel L2, largest absolute, elements
// missed): fp32's K times fp32's, plus K times what the claim's reference's exceeds it; infinite when
// either is (the published bound then).
double claim_term(double fp32_err, double claim_err, double k);
constexpr double kPublishedTolerance = 1e-2;  // atol = rtol, elementwise
constexpr double kPublishedRelL2 = 5e-2;      // ||out - ref|| / ||ref||, and the cap of every calibrated bound
constexpr double kMinFloorScale = 0.1;        // a floor's tenth (fp32's floor_min is the tenth of its floor before session 22)
// The elementwise gate, calibrated: where the reference at the claimed precision (or fp32's) itself
// misses the published elementwise gate against float64 on n elements of an output (cancellations
// in a sum of large terms: KernelBench's Mamba2 tasks, 391 of 134M elements on the H100), a
// candidate may miss it on up to claim_term(n32, np, K) elements of that output (8 x fp32's n, plus
// the claim's K x what its reference misses beyond), and never on more
// than this fraction of the output. The norm bound still holds on every element. With n = 0 (almost
// every task) nothing changes. What a kernel could skip under it is at most this fraction of the
// output's elements, and only where fp32 itself cannot be judged elementwise.
constexpr double kMaxElementwiseMissFraction = 1e-4;
// And a slack, calibrated: an honest kernel that sums in another order than PyTorch is off the fp32
// reference by about what fp32 itself is off float64, elementwise as in norm. On an output of large
// values (KernelBench's 14_Gemm_Divide_Sum_Scaling: sums of 8,192 products, |y| ~ 1e3) that is ~1e-2
// absolute, and an element near zero then misses atol = 1e-2 by chance (a checked timed call of the
// honest bundle failed on the H100, once in three runs). So an element may also miss the published
// gate when |out - ref| <= atol + slack + rtol |ref|, slack = claim_term(a32, ap, K) (the fp32 and the
// claimed precision's references' largest absolute errors against float64 on the call's inputs), on
// at most this fraction of the output (at least one element) besides the allowance above. Not on
// every element: a slack set by an output's largest values would let its small elements go unjudged
// (zeros on the rows of ~1 beside rows of ~1e6), and such a kernel misses on far more than this
// fraction. The norm bound still holds; with e_abs = 0 nothing changes.
constexpr double kMaxSoftMissFraction = 1e-2;

struct Tolerance {
  double atol = kPublishedTolerance, rtol = kPublishedTolerance;
  // Bound on ||got - want|| / ||want|| (L2 over an output, non-finite reference elements left out):
  // allclose alone lets zero or constant outputs pass where the reference is small everywhere
  // (|want| < atol); this fails them wherever the reference is not itself zero.
  double rel_norm = kPublishedRelL2;
  std::string mode = "published";  // which rule set rel_norm: published, strict, calibrated; exact for integers
  std::string precision;           // calibrated: the claimed precision
  double ref_err_rel_l2 = 0, fp32_err_rel_l2 = 0;  // calibrated: the measured errors the bound is from
  double varying_fraction = 1;  // calibrated: the floor's scale (the part of ||ref|| the inputs move)
  // calibrated: elements the reference (claimed precision, or fp32) misses the elementwise gate on,
  // against float64, and how many a candidate may miss: claim_term of the two counts (capped per output at
  // kMaxElementwiseMissFraction of its elements when judged).
  int64_t ref_elementwise_misses = 0, allowed_misses = 0;
  // calibrated: claim_term of the references' largest absolute errors against float64 (see kMaxSoftMissFraction).
  double elementwise_slack = 0;
  std::string fallback;            // calibrated mode, but no calibration for this output: why
  // "published" (or "default"): 1e-2 for every dtype, relative norm 5e-2; "strict": 1e-4 for
  // fp32/fp64 with relative norm 1e-3, 1e-2 for fp16/bf16; 0 for integers in every mode.
  // Overrides >= 0 win (atol, rtol; the norm bound stays).
  static Tolerance for_dtype(const std::string& mode, const std::string& dtype, double atol_override, double rtol_override);
};

// The bounds of one comparison, per output.
class Tolerances {
 public:
  // "published" (or "default") or "strict", the same for every output. "calibrated" without a
  // calibration is the published bound with a fallback note (a caller that has a calibration uses
  // calibrated()).
  static Tolerances by_mode(const std::string& mode, double atol_override = -1, double rtol_override = -1);
  // From the worker's `reference` answer for a candidate that claims `precision`: `calibration` is
  // its "calibration" object ({"outputs.0": {"precision", "ref_err_rel_l2", "fp32_err_rel_l2",
  // ...}}), `calibration_error` its "calibration_error" ("" when none). The bounds are computed
  // here, from the measured errors and calibration_rule(precision) (the worker's own bound_rel_l2
  // is not read). A missing or null error (the worker's JSON has no Infinity) means the precision
  // could not compute the output: the bound is the published 5e-2. InputError on a malformed entry
  // or one for another precision.
  static Tolerances calibrated(const std::string& precision, const ca::Json& calibration,
                               const std::string& calibration_error = "", double atol_override = -1,
                               double rtol_override = -1);
  // A call's calibration with the outputs it could not calibrate taken from `fallback` (the warm
  // call's, drawn before the candidate was loaded: a candidate that makes the worker's float64 run
  // fail gets no looser bound for it). `error` is cleared when a fallback filled the gap. Returns ""
  // or a note naming the outputs so bounded. kernel-check's trials and kernel-prof's checked calls.
  static std::string fill_calibration(ca::Json& calibration, std::string& error, const ca::Json& fallback);

  Tolerance for_output(const std::string& name, const std::string& dtype) const;
  const std::string& mode() const { return mode_; }
  const std::string& precision() const { return precision_; }

 private:
  std::string mode_ = "published", precision_, calibration_error_;
  double atol_ = -1, rtol_ = -1;
  std::map<std::string, Tolerance> calibrated_;  // "outputs.0" -> its bound
};

struct OutputJudgement {
  std::string mode;       // published, strict, calibrated
  double bound_rel_l2 = 0, measured_rel_l2 = 0;
  std::string fallback;   // calibrated mode, judged by the published bound: why
  int64_t misses = 0, allowed_misses = 0;  // elementwise: the candidate's, and the calibrated allowance
  double elementwise_slack = 0;            // elementwise: the slack, and the misses of the published gate
  int64_t soft_misses = 0, soft_allowed = 0;  // within it, of how many allowed
};

struct CompareResult {
  bool ok = true;
  std::string reason;  // first failure: which output, which index, expected vs got
  double max_abs_err = 0, max_rel_err = 0, mismatch_fraction = 0;
  double rel_l2_err = 0;  // the largest ||got - want|| / ||want|| over the outputs
  std::string mode, precision;                      // which bound judged it
  std::map<std::string, OutputJudgement> outputs;   // floating outputs with a nonzero reference
  // {"max_abs_err", ..., "tolerance": {"mode", "precision"?, "bound_rel_l2", "measured_rel_l2",
  // "output"}}: the output closest to its bound (measured / bound largest), and with several,
  // "outputs": {name: {"bound_rel_l2", "measured_rel_l2"}}.
  ca::Json to_json() const;
};

// The comparison on the host. The mode-string form is Tolerances::by_mode(mode, atol, rtol).
CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const Tolerances& tolerances);
CompareResult compare_outputs(const ca::TensorMap& got, const ca::TensorMap& want, const std::string& mode, double atol,
                              double rtol);

// One output on the device: its dtype and shape, and the address of its first byte in the current
// context (an IPC mapping or the process's own buffer).
struct DeviceOutput {
  std::string dtype;
  std::vector<int64_t> shape;
  CUdeviceptr ptr = 0;
};
using DeviceOutputs = std::map<std::string, DeviceOutput>;  // "outputs.0" -> ...

// The same comparison on the device, in the current context, on `stream` (synchronized before it
// returns). Throws cuda::CudaError when the device fails.
CompareResult compare_outputs_device(const DeviceOutputs& got, const DeviceOutputs& want, const Tolerances& tolerances,
                                     CUstream stream);
CompareResult compare_outputs_device(const DeviceOutputs& got, const DeviceOutputs& want, const std::string& mode,
                                     double atol, double rtol, CUstream stream);

}  // namespace ca::bundle
