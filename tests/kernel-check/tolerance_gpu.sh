#!/usr/bin/env bash
# On the device: the calibrated tolerance and the input variants (issue 31). torch.mean(x, 1) over
# 16,384 torch.rand columns: the honest bundle passes; the mean of the first half of each row (half
# the bytes) and the analytic shortcut (every mean 0.5, torch.rand's expectation) fail, though the
# published atol = rtol = 1e-2 lets the half-row one pass; every check draws each variant once and
# names it; a task whose reference is a dropout gets task_stochastic, and reward-calc gives it no -1;
# check.reference says the mode the worker ran (train) and the rule; the same dropout task stated
# in eval mode (issue 33) runs with dropout off, is not stochastic, and the honest bundle passes it;
# an insensitive task's honest and constant-output bundles both get task_insensitive (never passed),
# an ill-conditioned one's task_ill_conditioned, and a record's claim of either changes nothing;
# the scratch cap follows the reference's peak memory as the judge's own worker measures it (last).
set -u
KC="$CA_BIN/kernel-check"
HERE=$(cd "$(dirname "$0")" && pwd)
MK="python3 $HERE/make_candidate.py"
M="$HERE/bundles/row_mean"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
fails=0
HALF=(--plan-replace "COLS, COLS]" "COLS, COLS / 2]")
CONST=(--replace k.cu "if (lane == 0) out[row] = s / (float)cols_read;" "if (lane == 0) out[row] = 0.5f;")
DROPOUT_CODE='"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.drop = nn.Dropout(p=0.1)\n\n    def forward(self, x):\n        return torch.mean(self.drop(x), 1)\n\ndef get_inputs():\n    return [torch.rand(256, 16384)]\n\ndef get_init_inputs():\n    return []\n"'
{
  $MK "$M"
  $MK "$M" "${HALF[@]}"
  $MK "$M" "${CONST[@]}"
  $MK "$M" --task-set task_id '"test-row-mean-dropout"' --task-set code "$DROPOUT_CODE"
  $MK "$M" --task-set task_id '"test-row-mean-dropout-eval"' --task-set code "$DROPOUT_CODE" --task-set reference '{"mode": "eval"}'
} > "$T/in.jsonl"
run() {  # name, options...; records from $T/in.jsonl into $T/<name>.jsonl
  local name=$1
  shift
  "$CA_BIN/kernel-check" --no-store "$@" < "$T/in.jsonl" > "$T/$name.jsonl" 2> "$T/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || { echo "FAIL kernel-check $* exit $rc"; tail -20 "$T/$name.err"; fails=$((fails + 1)); }
}
run calibrated
run published --tolerance published --trials 9  # two draws of each variant
run allowed --allow-stochastic

python3 - "$T" <<'PY' || fails=$((fails + 1))
import json, sys
T = sys.argv[1]
def load(name):
    return [json.loads(l)["check"] for l in open("%s/%s.jsonl" % (T, name))]
cal, pub, allowed = load("calibrated"), load("published"), load("allowed")
bad = 0
def expect(cond, what, c):
    global bad
    print(("ok   " if cond else "FAIL ") + what + ": " + c["status"] + " | " + c["reason"][:300])
    bad += not cond

honest, half, const, drop, drop_eval = cal
expect(honest["status"] == "passed", "honest row mean passes the calibrated bound", honest)
expect(honest["tolerance"] == "calibrated" and honest["precision"] == "fp32", "the record says calibrated, fp32", honest)
cal0 = honest["calibration"]["outputs.0"]
expect(cal0["ref_err_rel_l2"] < 1e-6 and cal0["bound_rel_l2"] < 1e-4,
       "fp32's error on the mean ~1e-7, bound ~3e-5 (%g, %g)" % (cal0["ref_err_rel_l2"], cal0["bound_rel_l2"]), honest)
variants = [t["variant"] for t in honest["trials"]]
expect(all(v in variants for v in ("plain", "shift_scale", "outliers", "seed_stream")),
       "each variant drawn once: %s" % variants, honest)
expect(all(t["tolerance"]["mode"] == "calibrated" and t["tolerance"]["measured_rel_l2"] <= t["tolerance"]["bound_rel_l2"]
           for t in honest["trials"]), "every trial judged by its calibrated bound", honest)
expect(half["status"] == "incorrect" and "calibrated bound" in half["reason"], "half a reduction fails", half)
expect(const["status"] == "incorrect", "every mean 0.5 fails", const)
expect(drop["status"] == "task_stochastic" and drop["correct"] is None and drop.get("task_stochastic") is True,
       "a dropout reference: task_stochastic, correct null", drop)
def ref(c):  # check.reference without the insensitive/ill-conditioned measurements (asserted below)
    return {k: v for k, v in (c.get("reference") or {}).items() if k in ("mode", "stochastic", "from", "rule")}
expect(ref(honest) == {"mode": "train", "stochastic": False, "from": "worker"},
       "check.reference: train, not stochastic, measured by the worker: %s" % honest.get("reference"), honest)
# The row mean is usable: seed 1's means are within the published bound of seed 0's, but the
# shift_scale variant's are not (a constant 0.5 fails there, as p_const shows below).
r = honest.get("reference") or {}
checks = (r.get("insensitive_evidence") or {}).get("checks") or [{}, {}]
expect(r.get("insensitive") is False and r.get("ill_conditioned") is False and checks[0].get("within") is True
       and checks[-1].get("within") is False,
       "the row mean: not insensitive (seed 1 within, the variant not), not ill-conditioned: %s" % json.dumps(r)[:400], honest)
expect(ref(drop) == {"mode": "train", "stochastic": True, "from": "worker", "rule": "task_stochastic"},
       "check.reference of the dropout task: train, stochastic, rule task_stochastic: %s" % drop.get("reference"), drop)
expect(drop_eval["status"] == "passed" and ref(drop_eval) == {"mode": "eval", "stochastic": False, "from": "worker"},
       "the dropout task in eval mode: dropout off, not stochastic, the honest bundle passes: %s" % drop_eval.get("reference"),
       drop_eval)

p_honest, p_half, p_const, p_drop, p_drop_eval = pub
expect(p_honest["status"] == "passed" and p_honest["tolerance"] == "published", "--tolerance published: honest passes", p_honest)
expect(p_half["status"] == "passed" and p_half["trials"][-1]["tolerance"]["mode"] == "published",
       "--tolerance published keeps the published bound (half a row passes it)", p_half)
# The analytic shortcut meets torch.rand's expectation, not a shifted draw's: a variant fails it
# even under the published bound.
expect(p_const["status"] == "incorrect" and "variant" in p_const["reason"], "every mean 0.5 fails on a variant", p_const)

a_drop = allowed[3]
expect(a_drop["status"] != "task_stochastic" and a_drop.get("task_stochastic") is True,
       "--allow-stochastic judges it (and still flags the task)", a_drop)
expect(a_drop.get("reference", {}).get("rule") == "allow_stochastic", "its check.reference.rule: allow_stochastic", a_drop)
sys.exit(1 if bad else 0)
PY
# A precision claim earns only what its reference loses on the task (red team 33): an unused scratch
# declared float8_e4m3fn makes the record read as fp8; torch.mean stays in fp32 under autocast, so the
# claim adds nothing to fp32's bound. The honest bundle with it passes; the mean scaled by 1 + 5e-5
# (under the fp8 floor of before, 1e-4, over fp32's ~4e-6) fails, as it does read as fp32.
FP8=(--plan-replace "forward:" "scratch:
  tag: {dtype: float8_e4m3fn, shape: [1]}
forward:")
SCALED=(--replace k.cu "if (lane == 0) out[row] = s / (float)cols_read;" "if (lane == 0) out[row] = s / (float)cols_read * 1.00005f;")
{
  $MK "$M" "${FP8[@]}"
  $MK "$M" "${FP8[@]}" "${SCALED[@]}"
  $MK "$M" "${SCALED[@]}"
} > "$T/claim_in.jsonl"
"$CA_BIN/kernel-check" --no-store < "$T/claim_in.jsonl" > "$T/claim.jsonl" 2> "$T/claim.err" \
  || { echo "FAIL kernel-check (claims) exit $?"; tail -20 "$T/claim.err"; fails=$((fails + 1)); }
python3 - "$T/claim.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
honest8, scaled8, scaled32 = [json.loads(l)["check"] for l in open(sys.argv[1])]
bad = 0
def expect(cond, what, c):
    global bad
    print(("ok   " if cond else "FAIL ") + what + ": " + c["status"] + " " + str(c.get("precision")) + " | " + c["reason"][:300])
    bad += not cond
expect(honest8["status"] == "passed" and honest8["precision"] == "fp8", "honest row mean with an unused fp8 scratch: fp8, passes", honest8)
bounds = [t["tolerance"]["bound_rel_l2"] for t in honest8.get("trials", []) if "bound_rel_l2" in t.get("tolerance", {})]
expect(bounds and max(bounds) < 2e-5, "its bounds are fp32's (~4e-6), not fp8's floor (1e-4): %s" % bounds, honest8)
expect(scaled8["status"] == "incorrect" and scaled8["precision"] == "fp8" and "calibrated bound" in scaled8["reason"],
       "the mean 5e-5 off with the fp8 claim fails", scaled8)
expect(scaled32["status"] == "incorrect" and scaled32["precision"] == "fp32", "the mean 5e-5 off read as fp32 fails", scaled32)
sys.exit(1 if bad else 0)
PY

# reward-calc: task_stochastic is not the candidate's failure: no -1 (an error section instead).
sed -n 4p "$T/calibrated.jsonl" | "$CA_BIN/reward-calc" --no-store > "$T/reward.jsonl" 2> "$T/reward.err"
python3 - "$T/reward.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
r = json.loads(open(sys.argv[1]).readline())
v = (r.get("reward") or {}).get("value")
ok = v != -1 and v != -1.0
print(("ok   " if ok else "FAIL ") + "reward-calc on task_stochastic: reward %r, error %r" % (v, r.get("error")))
sys.exit(0 if ok else 1)
PY

# References no verdict can use (issue 31), measured by the judge's own worker at load. A big bias plus
# 1e-7 * x (18_SqueezeNet's kind): the honest kernel and the constant answer (computed once at init
# from the params, copied in forward: it would pass every check) both get task_insensitive, never
# passed, and reward-calc pays neither (no reward, no -1). A cancellation, (x * 16 + 1e8) - 1e8
# (24_EfficientNetB2's kind): the honest fp32 kernel gets task_ill_conditioned. A sensitive task
# (the row mean) whose record claims both flags is judged as ever: the honest bundle passes, the
# constant 0.5 fails, the claims kept in check.reference.task_record_said.
CLAIM=(--task-set reference '{"mode": "train", "insensitive": true, "ill_conditioned": true, "stochastic": true}')
{
  $MK "$HERE/bundles/big_bias"
  $MK "$HERE/bundles/big_bias_const"
  $MK "$HERE/bundles/ill_conditioned"
  $MK "$M" "${CLAIM[@]}"
  $MK "$M" "${CONST[@]}" "${CLAIM[@]}"
} > "$T/unusable_in.jsonl"
for tol in calibrated published; do
  "$CA_BIN/kernel-check" --no-store --tolerance "$tol" < "$T/unusable_in.jsonl" > "$T/unusable_$tol.jsonl" 2> "$T/unusable_$tol.err" || true
done
python3 - "$T" <<'PY' || { fails=$((fails + 1)); tail -5 "$T/unusable_calibrated.err"; }
import json, sys
T = sys.argv[1]
bad = 0
def expect(cond, what, c):
    global bad
    print(("ok   " if cond else "FAIL ") + what + ": " + c["status"] + " | " + c["reason"][:300])
    bad += not cond
for tol in ("calibrated", "published"):
    honest, const, ill, claimed, claimed_const = [json.loads(l)["check"] for l in open("%s/unusable_%s.jsonl" % (T, tol))]
    for name, c in (("honest", honest), ("constant-output", const)):
        r = c.get("reference") or {}
        expect(c["status"] == "task_insensitive" and c["correct"] is None and c.get("task_insensitive") is True
               and r.get("insensitive") is True and r.get("from") == "worker"
               and all(x.get("within") for x in (r.get("insensitive_evidence") or {}).get("checks", [{}])),
               "--tolerance %s: big bias, %s bundle: task_insensitive, correct null, with the evidence" % (tol, name), c)
    r = ill.get("reference") or {}
    expect(ill["status"] == "task_ill_conditioned" and ill["correct"] is None and ill.get("task_ill_conditioned") is True
           and r.get("ill_conditioned") is True and (r.get("ill_conditioned_evidence") or {}).get("fp32_err_rel_l2", 0) > 0.05,
           "--tolerance %s: cancellation: task_ill_conditioned (fp32 %s from float64)"
           % (tol, (r.get("ill_conditioned_evidence") or {}).get("fp32_err_rel_l2")), ill)
    r = claimed.get("reference") or {}
    expect(claimed["status"] == "passed" and r.get("insensitive") is False and r.get("ill_conditioned") is False
           and r.get("stochastic") is False
           and r.get("task_record_said") == {"stochastic": True, "insensitive": True, "ill_conditioned": True},
           "--tolerance %s: a sensitive task whose record claims every flag is judged: honest passes, claims kept aside" % tol,
           claimed)
    expect(claimed_const["status"] == "incorrect",
           "--tolerance %s: ... and its constant 0.5 fails (a claim is no way out)" % tol, claimed_const)
sys.exit(1 if bad else 0)
PY
"$CA_BIN/reward-calc" --no-store < "$T/unusable_calibrated.jsonl" > "$T/unusable_reward.jsonl" 2> /dev/null
python3 - "$T/unusable_reward.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
values = [(r.get("reward") or {}).get("value") for r in recs]
ok = values[:3] == [None, None, None] and all("error" in r for r in recs[:3]) and values[4] == -1
print(("ok   " if ok else "FAIL ") + "reward-calc: no reward and no -1 for task_insensitive (honest, constant) and "
      "task_ill_conditioned; the claimed task's constant -1: %s" % values)
sys.exit(0 if ok else 1)
PY

# The scratch cap follows the task (issue 33). (1) The worker's peak on CUDA (the caching allocator's
# count) is within 10% of the device-independent counter's (CPU torch, the same net and inputs) for
# a conv net whose activations dwarf its inputs. (2) On the judge's path the cap is 2x the peak its
# own worker measured: a task whose forward holds a 256 MiB temporary (peak ~264 MiB) against 12 MiB
# of inputs and outputs lets a plan keep 300 MiB of scratch (over the 64 MiB io floor) and refuses
# 600 MiB naming scratch_peak_factor; a record claiming a terabyte of peak raises nothing, and a
# record with shapes but no peak is not held to the io floor before the worker measures.
PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}" "${CUDA_AGENT_PYTHON:-python3}" - <<'PY' || fails=$((fails + 1))
import torch
import torch.nn as nn
from cuda_agent_worker.peak import measure_peak


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 64, 3, padding=1)
        self.bn = nn.BatchNorm2d(64)
        self.c2 = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        a = torch.relu(self.c1(x))
        return self.c2(a + self.bn(a))


torch.manual_seed(0)
net, x = ConvNet(), torch.randn(8, 3, 128, 128)
with torch.no_grad():
    counted, _ = measure_peak(lambda: net(x), "cpu")
    net_gpu, x_gpu = net.to("cuda"), x.to("cuda")
    net_gpu(x_gpu)  # the one-time allocations (cuDNN's handle and workspace) before measuring
    measured, _ = measure_peak(lambda: net_gpu(x_gpu), "cuda")
# The caching allocator also sees what cuDNN takes per call as workspace (torch allocates it there,
# every call; on the H200 the second conv's was 64 MiB, 67% over the counter's 96 MiB of live
# activations), which the storage counter does not. So the CUDA peak is the counter's, not less, plus
# at most a workspace of the size of the activations: the GPU judge's cap (its worker's CUDA peak) is
# then at least compile-only's (the counter's) and never off by more than that.
ok = 0.95 * counted <= measured <= 2.0 * counted
print(("ok   " if ok else "FAIL ") + "CUDA peak %d vs the counter's %d (%.1f%% over: cuDNN's workspace)" % (
    measured, counted, 100.0 * (measured - counted) / counted))
raise SystemExit(0 if ok else 1)
PY
PEAK_CODE='"import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, a, b):\n        wide = torch.cat([a] * 64)\n        out = a * 2.0 + b\n        del wide\n        return out\n\nN = 1 << 20\n\ndef get_inputs():\n    return [torch.randn(N), torch.randn(N)]\n\ndef get_init_inputs():\n    return []\n"'
codeonly() { python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); r["task"]={k: r["task"][k] for k in ("task_id", "code")}; print(json.dumps(r))'; }
{
  $MK "$CA_SRC/datasets/skill/bundles/scale_add" --task-set task_id '"test-peak-temporary"' --task-set code "$PEAK_CODE" \
    --plan-replace "forward:" "scratch:
  big: {dtype: float32, shape: [75, N]}
forward:" | codeonly
  $MK "$CA_SRC/datasets/skill/bundles/scale_add" --task-set task_id '"test-peak-temporary"' --task-set code "$PEAK_CODE" \
    --plan-replace "forward:" "scratch:
  big: {dtype: float32, shape: [150, N]}
forward:" | codeonly
  $MK "$CA_SRC/datasets/skill/bundles/scale_add" --task-set task_id '"test-peak-temporary-claim"' --task-set code "$PEAK_CODE" \
    --task-set reference '{"mode": "train", "peak_bytes": 1099511627776}' --plan-replace "forward:" "scratch:
  big: {dtype: float32, shape: [150, N]}
forward:"
  $MK "$CA_SRC/datasets/skill/bundles/scale_add" --task-set task_id '"test-peak-temporary-shapes"' --task-set code "$PEAK_CODE" \
    --plan-replace "forward:" "scratch:
  big: {dtype: float32, shape: [75, N]}
forward:"
} > "$T/peak_in.jsonl"
"$CA_BIN/kernel-check" --no-store < "$T/peak_in.jsonl" > "$T/peak.jsonl" 2> "$T/peak.err" || true
python3 - "$T/peak.jsonl" <<'PY' || { fails=$((fails + 1)); tail -5 "$T/peak.err"; }
import json, sys
fits, over, claim, shapes = [json.loads(l)["check"] for l in open(sys.argv[1])]
bad = 0
def expect(cond, what, c):
    global bad
    print(("ok   " if cond else "FAIL ") + what + ": " + c["status"] + " | " + c["reason"][:300] + " | " + json.dumps(c.get("scratch_cap")))
    bad += not cond
peak = 64 * 4 * (1 << 20) + 2 * 4 * (1 << 20)  # the 256 MiB temporary, a * 2.0 and the output
cap = fits.get("scratch_cap") or {}
expect(cap.get("from") == "reference_peak" and abs(cap.get("peak_bytes", 0) - peak) <= 0.10 * peak,
       "the judge's cap follows its worker's peak (~%d)" % peak, fits)
expect(fits["status"] == "passed", "300 MiB of scratch under 2x the peak (over the 64 MiB floor) passes", fits)
expect(over["status"] == "policy_violation" and over.get("violation", {}).get("rule") == "scratch_peak_factor",
       "600 MiB of scratch over 2x the peak is refused naming scratch_peak_factor", over)
expect(claim["status"] == "policy_violation" and (claim.get("scratch_cap") or {}).get("from") == "reference_peak"
       and claim["scratch_cap"]["bytes"] == over["scratch_cap"]["bytes"],
       "a record claiming a terabyte of peak raises nothing: the worker's measurement sizes the cap", claim)
expect(shapes["status"] == "passed" and (shapes.get("scratch_cap") or {}).get("from") == "reference_peak",
       "a record with shapes and no peak: the CPU stage leaves the cap to the worker, whose peak lets 300 MiB through", shapes)
sys.exit(1 if bad else 0)
PY
[ $fails -eq 0 ] && echo "tolerance_gpu: all passed" || echo "tolerance_gpu: $fails failed"
exit $((fails > 0))
