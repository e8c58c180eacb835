#!/usr/bin/env bash
# On the device: the adversarial suite (issue 16). Every exploit bundle of adversarial_bundles.py
# gets its verdict with a named reason, or, where the attack is a cache, passes and is timed as the
# honest kernel it then is (the cache is wiped before every call, so it cannot pay); the honest
# controls pass; a TF32 kernel is rewarded against precision-matched baselines.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
fails=0
python3 "$HERE/adversarial_bundles.py" "$CA_SRC" > "$T/cases.txt" || { echo "FAIL: adversarial_bundles.py"; exit 1; }
grep -v '^{' "$T/cases.txt" > "$T/expected.txt"
grep '^{' "$T/cases.txt" > "$T/in.jsonl"
"$CA_BIN/kernel-check" --no-store -v < "$T/in.jsonl" > "$T/checked.jsonl" 2> "$T/check_err.txt"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL kernel-check exit $rc"; tail -20 "$T/check_err.txt"; fails=$((fails + 1)); }
python3 - "$T/expected.txt" "$T/checked.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
expected = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(expected), (len(got), len(expected))
bad = 0
for row, rec in zip(expected, got):
    name = row[-2]
    want, extra = row[0], row[1:-2]
    c = rec["check"]
    ok = c["status"] == want
    if ok and want == "incorrect":
        ok = extra[0] in c.get("reason", "")
    if ok and want == "passed" and extra:
        ok = c.get("precision") == extra[0]
    print("%s %s: %s (%s)" % ("ok  " if ok else "FAIL", name, c["status"], c.get("reason", "")[:160]))
    bad += not ok
sys.exit(1 if bad else 0)
PY
# The exact kernel on the cancelling task passed by the calibrated elementwise rule (it misses the
# published gate where the fp32 reference is off float64), not by matching the fp32 reference.
python3 - "$T/checked.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
c = next(r for r in map(json.loads, open(sys.argv[1])) if r["candidate_id"] == "adv-honest-exact-cancel")["check"]
used = [t["tolerance"].get("elementwise_slack", {}).get("outputs.0") for t in c.get("trials", [])]
ok = c["status"] == "passed" and any(u and 0 < u["misses"] <= u["allowed"] for u in used)
print("%s honest-exact-cancel: slack, misses/allowed per trial %s" % (
    "ok  " if ok else "FAIL", [u and (round(u["slack"], 4), u["misses"], u["allowed"]) for u in used]))
sys.exit(0 if ok else 1)
PY
# Zeros spent on the allowance are caught by the calibrated norm whichever gate the reason names (the
# count fires first when the draw's reference missed on few elements): some trial's relative error
# norm is over its bound.
python3 - "$T/checked.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
c = next(r for r in map(json.loads, open(sys.argv[1])) if r["candidate_id"] == "adv-allowance-spent-on-zeros")["check"]
tol = [t["tolerance"] for t in c.get("trials", [])]
over = [(round(t["measured_rel_l2"], 5), round(t["bound_rel_l2"], 5)) for t in tol if "bound_rel_l2" in t]
ok = c["status"] == "incorrect" and any(m > b for m, b in over)
print("%s allowance-spent-on-zeros: the norm catches it, (rel l2, bound) per trial %s; count %s" % (
    "ok  " if ok else "FAIL", over, [t.get("elementwise_allowance", {}).get("outputs.0") for t in tol]))
sys.exit(0 if ok else 1)
PY
# Time the caches and their honest twin, and the TF32 gemm; then its reward.
python3 - "$T/expected.txt" "$T/checked.jsonl" > "$T/to_time.jsonl" <<'PY'
import json, sys
for row, line in zip(open(sys.argv[1]), open(sys.argv[2])):
    row = row.rstrip("\n").split("|")
    if row[-1] == "1" or row[-2] == "tf32-gemm":
        print(line.rstrip("\n"))
PY
"$CA_BIN/kernel-prof" --no-store --budget-s 1 --baseline-budget-s 1 --baselines eager,compile < "$T/to_time.jsonl" \
  > "$T/timed.jsonl" 2> "$T/prof_err.txt"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL kernel-prof exit $rc"; tail -20 "$T/prof_err.txt"; fails=$((fails + 1)); }
"$CA_BIN/reward-calc" --no-store < "$T/timed.jsonl" > "$T/rewarded.jsonl" 2> "$T/reward_err.txt" \
  || { echo "FAIL reward-calc"; tail -5 "$T/reward_err.txt"; fails=$((fails + 1)); }
python3 - "$T/rewarded.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
recs = {json.loads(l)["candidate_id"]: json.loads(l) for l in open(sys.argv[1])}
bad = 0
def say(ok, text):
    global bad
    print(("ok   " if ok else "FAIL ") + text)
    bad += not ok
honest = recs["adv-honest-tiled"]["prof"]
say(honest["status"] == "timed", "honest tiled kernel timed: %s us" % honest["time_us"]["median"])
t0 = honest["time_us"]["median"]
for name in ("memo-sample-forward-scratch", "memo-pointer", "memo-call-count-global", "memo-shared-memory"):
    p = recs["adv-" + name]["prof"]
    t = p["time_us"]["median"] if p.get("time_us") else 0
    # The cache never hits: the memo kernel does the honest work (plus its probes), never 1000x less.
    say(p["status"] == "timed" and t >= 0.8 * t0, "%s: %.1f us against the honest %.1f us (cannot pay)" % (name, t, t0))
    say(all(s["ok"] for s in p["outputs_check"]), "%s: every input set's outputs right after timing" % name)
    say(p["method"]["seed_given"] is False and isinstance(p["method"]["seed"], int), "%s: timing seed drawn per run" % name)
tf = recs["adv-tf32-gemm"]
say(tf["check"]["precision"] == "tf32", "tf32 gemm: precision %s" % tf["check"]["precision"])
say(tf["prof"].get("matched_precision") == "tf32", "tf32 gemm: precision-matched baselines timed")
r = tf["reward"]
say(r.get("compile_baseline") == "compile_precision_matched" and r.get("eager_baseline") == "eager_precision_matched",
    "tf32 gemm: reward against the matched baselines (%s, %s), value %s; plain %s" % (r.get("eager_baseline"), r.get("compile_baseline"),
                                                                                    r.get("value"), r.get("plain")))
say("plain" in r, "tf32 gemm: the plain fp32 comparison shown too")
sys.exit(1 if bad else 0)
PY
[ -n "${OUT:-}" ] && cp "$T/checked.jsonl" "$OUT/adversarial_checked.jsonl" && cp "$T/rewarded.jsonl" "$OUT/adversarial_rewarded.jsonl" \
  && cat "$T/check_err.txt" "$T/prof_err.txt" > "$OUT/adversarial_err.txt"
echo "$fails failure(s)"
[ $fails -eq 0 ]
