#!/usr/bin/env bash
# kernel-prof end to end on the GPU (label gpu): a correct candidate is timed with eager and
# compile baselines (positive, cached on the second run) and validates against the schema; a
# bundle that would skip its work after the first call cannot (its call counter is restored before
# every call): it is timed as the honest kernel; a failed check passes through;
# a tf32 candidate (read from its code) gets precision-matched baselines, an fp32 one whose record
# claims tf32 does not; a candidate that kills the GPU context fails
# alone (the records after it are timed by a fresh process); --resume reuses a profile timed alike
# (prof.timed_by) and times again one timed under other options; a bundle that breaks the rules only
# in this GPU's arch (checked for another) fails. Prints the wall time with cached baselines.
set -euo pipefail
KP="$CA_BIN/kernel-prof"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=$(command -v python3)
export CUDA_AGENT_PYTHONPATH="${CUDA_AGENT_PYTHONPATH:-$CA_SRC/libcommon/python}"
export CUDA_AGENT_LOCK_DIR="$T/locks"
$PY "$CA_SRC/tests/kernel-prof/fixtures/make_records.py" "$T"
ARGS=(--store "$T/s.db" --tasks "$T/tasks.jsonl" --baselines eager,compile --budget-s 2 --baseline-budget-s 2)

"$KP" "${ARGS[@]}" -v < "$T/cands.jsonl" > "$T/out1.jsonl" 2> "$T/err1" || { cat "$T/err1"; fail "first run exit $?"; }
cat "$T/err1" | tail -5
$PY - "$T/out1.jsonl" <<'PY' || fail "first run records"
import json, sys
recs = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
g = recs["kp-good"]["prof"]
assert g["status"] == "timed" and g["correct"] is True, g.get("reason")
assert g["time_us"]["median"] > 0 and g["device_time_us"]["median"] > 0, g["time_us"]
assert g["method"]["metric"] == "device" and g["method"]["input_sets"] == "fresh per call"
# Every call on a fresh set: a random subset checked, the last call always; the draw is untimed.
assert 1 <= g["method"]["checked_calls"] <= g["method"]["calls"] + 64, g["method"]
assert g["method"]["draw_ms_per_call"] > 0, g["method"]
seeds = [o["seed"] for o in g["outputs_check"]]
assert len(seeds) == len(set(seeds)) == g["method"]["checked_calls"], g["outputs_check"]
assert g["method"]["flush_bytes"] >= 2 * g["gpu"]["l2_bytes"]
assert any("relu2" in k["name"] for k in g["kernels"]), g["kernels"]
k = g["kernels"][0]
assert k["block"] == [256, 1, 1] and k["grid"][0] == 4096 * 2048 // 256 and k["registers"] > 0, k
assert all(o["ok"] for o in g["outputs_check"]) and len(g["outputs_check"]) >= 1
for mode in ("eager", "compile"):
    b = g["baselines"][mode]
    assert "error" not in b, b
    assert b["time_us"]["median"] > 0 and b["cached"] is False, b
assert g["speedup_vs_eager"] > 0 and g["speedup_vs_compile"] > 0
# The bundle that counts its calls in a module global to skip its work after the first: the global
# is restored before every call, so it always computes, is right, and is timed as the honest kernel.
c = recs["kp-cheat"]["prof"]
assert c["status"] == "timed" and c["correct"] is True, c
assert all(o["ok"] for o in c["outputs_check"]), c["outputs_check"]
assert c["time_us"]["median"] >= 0.9 * g["time_us"]["median"], (c["time_us"], g["time_us"])
assert "prof" not in recs["kp-failed"], "a failed check must pass through untouched"
t = recs["kp-tf32"]["prof"]
assert t["matched_precision"] == "tf32"
assert t["baselines"]["compile_precision_matched"]["precision"] == "tf32"
assert t["baselines"]["compile_precision_matched"]["time_us"]["median"] > 0
assert t["precision"] == "tf32" and "check_precision_said" not in t, t
# The precision is read from the compiled candidate: a record's claim of tf32 for an fp32 kernel
# gets no precision-matched (faster) baselines, and the claim is kept as what the check said.
f = recs["kp-claims-tf32"]["prof"]
assert f["status"] == "timed" and f["precision"] == "fp32" and f["check_precision_said"] == "tf32", f
assert "matched_precision" not in f and "compile_precision_matched" not in f["baselines"], f["baselines"].keys()
assert g["precision"] == "fp32" and "check_precision_said" not in g, g
assert g["reference"] == {"mode": "train"}, g.get("reference")
print("run 1: candidate %.2f us (device), eager %.2f us, compile %.2f us, speedups %.2fx / %.2fx; calls %d, stop %s"
      % (g["time_us"]["median"], g["baselines"]["eager"]["time_us"]["median"],
         g["baselines"]["compile"]["time_us"]["median"], g["speedup_vs_eager"], g["speedup_vs_compile"],
         g["method"]["calls"], g["method"]["stop"]))
print("call-counting cheat cannot pay: %.2f us against the honest %.2f us" % (c["time_us"]["median"], g["time_us"]["median"]))
PY
if $PY -c 'import jsonschema' 2>/dev/null; then
  $PY "$CA_SRC/tests/validate_schema.py" prof "$T/out1.jsonl" || fail "schema"
else
  echo "note: no jsonschema here: prof records are validated on the CPU side (tests/kernel-prof/schema.sh, a stored device record)"
fi

start=$(date +%s.%N)
"$KP" "${ARGS[@]}" < "$T/good.jsonl" > "$T/out2.jsonl" 2> "$T/err2" || { cat "$T/err2"; fail "second run"; }
end=$(date +%s.%N)
$PY - "$T/out2.jsonl" "$start" "$end" <<'PY' || fail "second run: baselines not from the cache"
import json, sys
ps = [json.loads(l)["prof"] for l in open(sys.argv[1])]
assert len(ps) == 2
for g in ps:
    for mode in ("eager", "compile"):
        assert g["baselines"][mode]["cached"] is True, g["baselines"][mode]
        assert g["baselines"][mode]["time_us"]["median"] > 0
print("run 2 (cached baselines): profile_s %.2f s for the first candidate (reference worker start included), "
      "%.2f s for the second; whole process %.2f s; second candidate %.2f us vs first %.2f us"
      % (ps[0]["profile_s"], ps[1]["profile_s"], float(sys.argv[3]) - float(sys.argv[2]),
         ps[1]["time_us"]["median"], ps[0]["time_us"]["median"]))
PY
# --resume reuses a stored profile only when it was timed alike (prof.timed_by: the task's content,
# the candidate, the check's bound, the options, this GPU's name and arch, the release): the same
# options reuse run 2's two profiles without timing; another --margin times them again.
"$KP" "${ARGS[@]}" --resume -v < "$T/good.jsonl" > "$T/out5.jsonl" 2> "$T/err5" || { cat "$T/err5"; fail "--resume run"; }
grep -q "2 skipped" "$T/err5" || { cat "$T/err5"; fail "--resume: run 2's profiles, timed alike, should be reused"; }
"$KP" "${ARGS[@]}" --resume -v --margin 0.2 < "$T/good.jsonl" > "$T/out6.jsonl" 2> "$T/err6" || { cat "$T/err6"; fail "--resume --margin 0.2 run"; }
grep -q "timed otherwise" "$T/err6" || { cat "$T/err6"; fail "--resume --margin 0.2: run 2's profiles should be timed again"; }
$PY - "$T/out2.jsonl" "$T/out5.jsonl" "$T/out6.jsonl" <<'PY' || fail "--resume and timed_by"
import json, sys
two, five, six = ([json.loads(l)["prof"] for l in open(f)] for f in sys.argv[1:4])
assert all(len(p["timed_by"]) == 16 for p in two), [p.get("timed_by") for p in two]
assert [p["timed_by"] for p in five] == [p["timed_by"] for p in two], "reused: run 2's very profiles"
assert [p["profile_s"] for p in five] == [p["profile_s"] for p in two]
assert all(p["status"] == "timed" for p in six) and all(a["timed_by"] != b["timed_by"] for a, b in zip(six, two)), six
print("--resume: run 2's profiles reused under the same options; timed again under another --margin")
PY
# --metrics: the roofline from the task's estimates always; ncu's counters where ncu can read them
# (on gVisor machines it cannot: then the error is reported in prof.metrics.ncu, and printed here).
head -1 "$T/good.jsonl" | "$KP" "${ARGS[@]}" --metrics > "$T/out3.jsonl" 2> "$T/err3" || { cat "$T/err3"; fail "--metrics run"; }
$PY - "$T/out3.jsonl" <<'PY' || fail "--metrics"
import json, sys
m = json.loads(open(sys.argv[1]).readline())["prof"]["metrics"]
r = m["roofline"]
assert r["bound"] == "memory" and 0 < r["fraction_of_roof"] < 1.5, r
print("roofline: %.3f FLOP/byte, %.2f TB/s achieved of %.2f peak, %.0f%% of roof" %
      (r["intensity_flop_per_byte"], r["achieved_tb_per_s"], r["peak_dram_tb_per_s"], 100 * r["fraction_of_roof"]))
n = m["ncu"]
if "kernels" in n:
    for k in n["kernels"]:
        print("ncu: %s dram %.1f%% sm %.1f%% occupancy %.1f%% time %.2f us" % (k["name"][:40], k["dram_throughput_pct"],
              k["sm_throughput_pct"], k["achieved_occupancy_pct"], k["gpu_time_duration_ns"] / 1e3))
    assert any(k["dram_throughput_pct"] > 0 for k in n["kernels"])
    # Only the candidate's kernels (ncu is told the replay's NVTX range): none of the tool's own.
    assert [k["name"] for k in n["kernels"] if "relu2" not in k["name"]] == [], [k["name"] for k in n["kernels"]]
else:
    print("ncu UNAVAILABLE here: " + json.dumps(n)[:600])
    # ncu ran the replay but profiled nothing: the NVTX range (replay.hpp) matched no launch. That is
    # the filter's fault, not the machine's (which says ERR_NVGPUCTRPERM when counters are closed).
    said = n.get("stderr", "") + n.get("stdout_tail", "")
    assert not ("No kernels were profiled" in said and "ERR_NVGPUCTRPERM" not in said), \
        "ncu profiled no kernel inside the candidate's NVTX range: " + said[-400:]
PY
# A candidate whose kernels kill the GPU context (an illegal address, a trap) costs its own record,
# never the records after it: CA_KERNEL_PROF_INJECT_FAULT makes kp-good's timing start with a trap in
# the candidate's context (this process: the records after it go to a fresh kernel-prof child) and
# kp-cheat's too (that child: it exits when handed the next record, and a fresh child takes it).
ids=$($PY -c 'import json,sys; r={j["name"]: j["candidate_id"] for j in map(json.loads, open(sys.argv[1]))}; print(r["kp-good"] + "," + r["kp-cheat"])' "$T/cands.jsonl")
rc=0
# Bounded: a hang here (a child never answering) must fail the test with what it printed, not stall it.
CA_KERNEL_PROF_INJECT_FAULT=$ids timeout "${KP_FAULT_TIMEOUT_S:-240}" "$KP" -v --tasks "$T/tasks.jsonl" --baselines eager --budget-s 2 \
  --baseline-budget-s 2 --no-store < "$T/cands.jsonl" > "$T/out4.jsonl" 2> "$T/err4" || rc=$?
[ "$rc" = 0 ] || { cat "$T/err4"; echo "records written: $(wc -l < "$T/out4.jsonl")"; fail "a context-killing candidate: exit $rc"; }
grep -q "fresh kernel-prof process" "$T/err4" || { cat "$T/err4"; fail "no word of the fresh process"; }
grep -q "a fresh child takes the next record" "$T/err4" || { cat "$T/err4"; fail "the child that lost its context was not replaced"; }
$PY - "$T/out4.jsonl" <<'PY' || { cat "$T/err4"; fail "records after a context-killing candidate"; }
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
names = [r["name"] for r in recs]
assert names == ["kp-good", "kp-cheat", "kp-failed", "kp-tf32", "kp-claims-tf32"], names  # all of them, in input order
for n in ("kp-good", "kp-cheat"):
    p = recs[names.index(n)]["prof"]
    assert p["status"] == "failed" and p["correct"] is False, p
    assert "killed the GPU context" in p["reason"], p["reason"]
assert "prof" not in recs[2]
assert recs[4]["prof"]["status"] == "timed", recs[4]["prof"].get("reason")
t = recs[3]
assert "task" not in t, "the task handed to the child stays out of the output"
assert t["prof"]["status"] == "timed" and t["prof"]["correct"] is True, t["prof"].get("reason")
assert t["prof"]["time_us"]["median"] > 0 and t["prof"]["baselines"]["eager"]["time_us"]["median"] > 0
print("context lost twice (this process, then its child): kp-good and kp-cheat failed (%s); kp-tf32 timed %.2f us by a fresh child"
      % (recs[0]["prof"]["reason"][:90], t["prof"]["time_us"]["median"]))
PY
# A GPU too small for one candidate's timing (CA_KERNEL_PROF_INJECT_OOM: its setup ends as an
# out-of-memory there would) costs that record a node_error (correct null: no verdict), never the run
# (exit 0) nor the records after it; reward-calc gives it an error section, no reward and no -1.
oom=$($PY -c 'import json,sys; print(next(j["candidate_id"] for j in map(json.loads, open(sys.argv[1])) if j["name"] == "kp-good"))' "$T/cands.jsonl")
rc=0
CA_KERNEL_PROF_INJECT_OOM=$oom timeout 240 "$KP" --tasks "$T/tasks.jsonl" --baselines eager --budget-s 2 \
  --baseline-budget-s 2 --no-store < "$T/cands.jsonl" > "$T/out5.jsonl" 2> "$T/err5" || rc=$?
[ "$rc" = 0 ] || { cat "$T/err5"; fail "a candidate too large for this GPU ended the run: exit $rc"; }
# (timed against eager only, as the whole file does: the speedup-over-eager scheme, which needs no compile)
"$CA_BIN/reward-calc" --no-store --scheme speedup --speedup-baseline eager < "$T/out5.jsonl" > "$T/rew5.jsonl" 2> "$T/rerr5" || true
$PY - "$T/out5.jsonl" "$T/rew5.jsonl" <<'PY' || { cat "$T/err5" "$T/rerr5"; fail "records after a node_error"; }
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
names = [r["name"] for r in recs]
assert names == ["kp-good", "kp-cheat", "kp-failed", "kp-tf32", "kp-claims-tf32"], names
p = recs[0]["prof"]
assert p["status"] == "node_error" and p["correct"] is None and p["node_error"] is True, p
assert "CA_KERNEL_PROF_INJECT_OOM" in p["reason"] and "time_us" not in p, p
for r in recs[3:]:
    assert r["prof"]["status"] == "timed", (r["name"], r["prof"].get("reason"))
rew = [json.loads(l) for l in open(sys.argv[2])]
assert "reward" not in rew[0] and rew[0]["error"]["field"] == "prof.status", rew[0]
assert all("reward" in r for r in rew[3:]), [r.get("error") for r in rew[3:]]
print("node_error: kp-good not timed (%s), the rest timed and rewarded" % p["reason"][:60])
PY
# A checked call whose reference the worker cannot make beside the candidate (CA_KERNEL_PROF_INJECT_REF_OOM:
# the first checked call's reference answers as out of GPU memory even alone): the candidate is ended and the
# reference made without it. The honest kp-good is then not timed (node_error, no verdict); kp-wrong (doubles
# without the ReLU, with a passing check in its record) is wrong on that call: -1, never no verdict.
$PY - "$T/cands.jsonl" > "$T/refoom.jsonl" <<'PY'
import hashlib, json, sys
recs = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
good = recs["kp-good"]
wrong = json.loads(json.dumps(good))
src = next(iter(wrong["bundle"]["kernels"].values()))
assert "fmaxf(x[i], 0.0f) * 2.0f" in src, src
name = next(iter(wrong["bundle"]["kernels"]))
wrong["bundle"]["kernels"][name] = src.replace("fmaxf(x[i], 0.0f) * 2.0f", "x[i] * 2.0f")
wrong["name"] = "kp-wrong"
canon = lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
wrong["candidate_id"] = hashlib.sha256(canon({"task_id": wrong["task_id"], "bundle": wrong["bundle"]}).encode()).hexdigest()[:16]
for r in (good, wrong):
    print(json.dumps(r))
PY
ids=$($PY -c 'import json,sys; print(",".join(json.loads(l)["candidate_id"] for l in open(sys.argv[1])))' "$T/refoom.jsonl")
rc=0
CA_KERNEL_PROF_INJECT_REF_OOM=$ids timeout 240 "$KP" -v --tasks "$T/tasks.jsonl" --baselines eager --budget-s 2 \
  --baseline-budget-s 2 --no-store < "$T/refoom.jsonl" > "$T/out6.jsonl" 2> "$T/err6" || rc=$?
[ "$rc" = 0 ] || { cat "$T/err6"; fail "a reference that did not fit beside the candidate: exit $rc"; }
$PY - "$T/out6.jsonl" <<'PY' || { cat "$T/err6"; fail "the reference made without the candidate"; }
import json, sys
recs = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
g, w = recs["kp-good"]["prof"], recs["kp-wrong"]["prof"]
assert g["status"] == "node_error" and g["correct"] is None and "matched" in g["reason"], g
assert w["status"] == "failed" and w["correct"] is False, w
assert any(not c["ok"] for c in w["outputs_check"]) if "outputs_check" in w else True
print("reference without the candidate: kp-good node_error; kp-wrong failed (%s)" % w["reason"][:80])
PY
# The rules again on the code this GPU loads: a bundle that reads %globaltimer only under
# `__CUDA_ARCH__ >= 900` passes kernel-check for sm_80 (its code has no clock) and fails here, the
# rule named, with no timing; reward-calc gives it the failure value.
"$CA_BIN/kernel-check" --compile-only --arch sm_80 --no-store < "$T/arch.jsonl" > "$T/arch80.jsonl" 2> "$T/erra" ||
  { cat "$T/erra"; fail "kernel-check --compile-only --arch sm_80"; }
grep -q '"status":"compiled"' "$T/arch80.jsonl" || fail "the sm_80 build should pass the rules: $(head -c 600 "$T/arch80.jsonl")"
"$CA_BIN/kernel-check" --compile-only --arch sm_90 --no-store < "$T/arch.jsonl" > "$T/arch90.jsonl" 2> "$T/erra" || true
grep -q '"status":"policy_violation"' "$T/arch90.jsonl" || fail "the sm_90 build should break the rules: $(head -c 600 "$T/arch90.jsonl")"
rc=0
timeout 240 "$KP" --tasks "$T/tasks.jsonl" --baselines eager --budget-s 1 --baseline-budget-s 1 --no-store \
  < "$T/arch.jsonl" > "$T/out7.jsonl" 2> "$T/err7" || rc=$?
[ "$rc" = 0 ] || { cat "$T/err7"; fail "a candidate that breaks the rules on this GPU: exit $rc"; }
"$CA_BIN/reward-calc" --no-store --scheme speedup --speedup-baseline eager < "$T/out7.jsonl" > "$T/rew7.jsonl" 2> "$T/rerr7" ||
  { cat "$T/rerr7"; fail "reward-calc on the arch record"; }
$PY - "$T/out7.jsonl" "$T/rew7.jsonl" <<'PY' || { cat "$T/err7"; fail "the rules on the loaded code"; }
import json, sys
p = json.loads(open(sys.argv[1]).readline())["prof"]
assert p["status"] == "failed" and p["correct"] is False, p
assert p["reason"].startswith("refused on this GPU (untimed): policy_violation") and "globaltimer" in p["reason"], p["reason"]
assert p.get("time_us") is None and p["method"]["calls"] == 0, p  # untimed
r = json.loads(open(sys.argv[2]).readline())
assert r["reward"]["value"] < 0, r["reward"]
print("rules on the loaded code: %s; reward %s" % (p["reason"][:120], r["reward"]["value"]))
PY
# A mistyped entry in a record's check.calibration: that record is bad (named), the run goes on (exit 0).
rc=0
timeout 240 "$KP" --tasks "$T/tasks.jsonl" --baselines eager --budget-s 1 --baseline-budget-s 1 --no-store \
  < "$T/badcal.jsonl" > "$T/out8.jsonl" 2> "$T/err8" || rc=$?
[ "$rc" = 0 ] || { cat "$T/err8"; fail "a record with a mistyped calibration: exit $rc"; }
$PY - "$T/out8.jsonl" <<'PY' || { cat "$T/err8"; fail "the mistyped calibration"; }
import json, sys
bad, after = map(json.loads, open(sys.argv[1]))
assert bad["error"]["field"] == "check.calibration" and "precision" in bad["error"]["reason"], bad.get("error")
assert after["name"] == "kp-after-badcal" and after["prof"]["status"] == "timed", after.get("prof")
print("mistyped calibration: %s; the next record timed" % bad["error"]["reason"][:100])
PY
# KP_KEEP_DIR: keep the records (the stored sample for the CPU schema test came from here).
if [ -n "${KP_KEEP_DIR:-}" ]; then cp "$T"/out*.jsonl "$KP_KEEP_DIR"/; fi
echo "kernel-prof gpu e2e: ok"
