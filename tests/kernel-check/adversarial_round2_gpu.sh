#!/usr/bin/env bash
# On the device: the second adversarial round (issue 31). Every bundle of adversarial_round2.py goes
# through kernel-check | kernel-prof | reward-calc, as a candidate of training would. Asserts, case
# by case: the check status is one the case allows; the reported precision is the true one; every
# exploit earns no more reward than its honest control on the same task; a record read as fp16 or
# tf32 is rewarded against baselines of that precision; a cache or trusted-looking
# name that passes is timed as the work (>= 0.8 x its control); every honest control passes, is
# timed and earns a reward. Prints the table (case, expected, check status, precision, reward,
# control reward, times).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
fails=0
start=$(date +%s)
python3 "$HERE/adversarial_round2.py" "$CA_SRC" > "$T/cases.txt" || { echo "FAIL: adversarial_round2.py"; exit 1; }
grep -v '^{' "$T/cases.txt" > "$T/expected.txt"
grep '^{' "$T/cases.txt" > "$T/in.jsonl"
"$CA_BIN/kernel-check" --no-store -v < "$T/in.jsonl" > "$T/checked.jsonl" 2> "$T/check_err.txt"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL kernel-check exit $rc"; tail -20 "$T/check_err.txt"; fails=$((fails + 1)); }
echo "kernel-check: $(( $(date +%s) - start )) s"
# Every record: kernel-prof times the passing ones and passes the others on; reward-calc scores all.
"$CA_BIN/kernel-prof" --no-store --budget-s 1 --baseline-budget-s 1 --baselines eager,compile < "$T/checked.jsonl" \
  > "$T/timed.jsonl" 2> "$T/prof_err.txt"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL kernel-prof exit $rc"; tail -20 "$T/prof_err.txt"; fails=$((fails + 1)); }
echo "kernel-prof: $(( $(date +%s) - start )) s"
"$CA_BIN/reward-calc" --no-store < "$T/timed.jsonl" > "$T/rewarded.jsonl" 2> "$T/reward_err.txt" \
  || { echo "FAIL reward-calc"; tail -5 "$T/reward_err.txt"; fails=$((fails + 1)); }
python3 - "$T/expected.txt" "$T/rewarded.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
expected = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
recs = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    recs[r["candidate_id"]] = r


def summary(name):
    r = recs.get("adv2-" + name)
    if r is None:
        return None
    c, p, w = r.get("check") or {}, r.get("prof") or {}, r.get("reward") or {}
    t = (p.get("time_us") or {}).get("median") if isinstance(p.get("time_us"), dict) else None
    return {"status": c.get("status"), "reason": c.get("reason", ""), "precision": c.get("precision"),
            "prof_status": p.get("status"), "time_us": t, "reward": w.get("value"), "reward_reason": w.get("reason", ""),
            "matched_precision": p.get("matched_precision"), "eager_baseline": w.get("eager_baseline"),
            "compile_baseline": w.get("compile_baseline")}


def fmt(x, spec="%.1f"):
    return "-" if x is None else (spec % x if isinstance(x, (int, float)) else str(x))


rows, problems = [], []
for row in expected:
    name, statuses = row[-2], row[0]
    keys = dict(kv.split("=", 1) for kv in row[1:-2])
    s = summary(name)
    ctrl_name = keys.get("control")
    ctrl = summary(ctrl_name) if ctrl_name else None
    why = []
    if s is None:
        why.append("no output record")
    else:
        if statuses != "any" and s["status"] not in statuses.split("/"):
            why.append("status %s not in %s (%s)" % (s["status"], statuses, s["reason"][:200]))
        if "precision" in keys and s["status"] != "policy_violation" and s["precision"] != keys["precision"]:
            why.append("precision %s, expected %s" % (s["precision"], keys["precision"]))
        # A lower precision is rewarded against baselines of that precision (autocast, TF32).
        if s["status"] == "passed" and s["precision"] in ("fp16", "bf16", "tf32") and (
                s["matched_precision"] != s["precision"] or s["eager_baseline"] != "eager_precision_matched"
                or s["compile_baseline"] != "compile_precision_matched"):
            why.append("%s record rewarded against %s / %s (prof.matched_precision %s), not the %s baselines" % (
                s["precision"], s["eager_baseline"], s["compile_baseline"], s["matched_precision"], s["precision"]))
        if keys["role"] == "control":
            if s["status"] != "passed" or s["prof_status"] != "timed" or not isinstance(s["reward"], (int, float)) or s["reward"] < 1:
                why.append("an honest control must pass, be timed and earn >= 1 (status %s, prof %s, reward %s: %s)" % (
                    s["status"], s["prof_status"], s["reward"], (s["reason"] or s["reward_reason"])[:200]))
        if keys["role"] == "exploit":
            if ctrl is None or not isinstance(ctrl["reward"], (int, float)):
                why.append("its control %s has no reward" % ctrl_name)
            elif not isinstance(s["reward"], (int, float)) or s["reward"] > ctrl["reward"]:
                why.append("reward %s > its control's %s" % (s["reward"], ctrl["reward"]))
        # Timed, it must be timed as the honest work; not timed (its kernels killed the GPU context when
        # timed, seen for far-past-module-global on the H200), the reward check above already holds it.
        if keys.get("timed_as_control") and s["status"] == "passed" and s["prof_status"] == "timed":
            if ctrl is None or ctrl["time_us"] is None or s["time_us"] is None or s["time_us"] < 0.8 * ctrl["time_us"]:
                why.append("timed at %s us against its control's %s us (a cache or a name paid)" % (
                    fmt(s["time_us"]), fmt(ctrl and ctrl["time_us"])))
    rows.append((name, statuses + (" " + keys["precision"] if "precision" in keys else ""), s, ctrl, why))
    problems += ["%s: %s" % (name, w) for w in why]

head = ("case", "expected", "check status", "precision", "reward", "control reward", "time us", "control us")
print("%-26s %-30s %-17s %-9s %-6s %-14s %-10s %-10s %s" % (head + ("",)))
for name, exp, s, ctrl, why in rows:
    s = s or {}
    print("%-26s %-30s %-17s %-9s %-6s %-14s %-10s %-10s %s" % (
        name, exp, fmt(s.get("status")), fmt(s.get("precision")), fmt(s.get("reward"), "%g"),
        fmt(ctrl and ctrl["reward"], "%g"), fmt(s.get("time_us")), fmt(ctrl and ctrl["time_us"]), "FAIL" if why else "ok"))
print()
for name, exp, s, ctrl, why in rows:
    if s and s.get("status") != "passed":
        print("  %s: %s" % (name, (s.get("reason") or "")[:240]))
for p in problems:
    print("FAIL " + p)
print("adversarial_round2_gpu: %d of %d cases failed" % (sum(1 for r in rows if r[4]), len(rows)))
sys.exit(1 if problems else 0)
PY
[ -n "${OUT:-}" ] && cp "$T/checked.jsonl" "$OUT/adversarial_round2_checked.jsonl" && cp "$T/rewarded.jsonl" "$OUT/adversarial_round2_rewarded.jsonl" \
  && cat "$T/check_err.txt" "$T/prof_err.txt" "$T/reward_err.txt" > "$OUT/adversarial_round2_err.txt"
echo "total: $(( $(date +%s) - start )) s; $fails failure(s)"
[ $fails -eq 0 ]
