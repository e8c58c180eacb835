#!/usr/bin/env bash
# The CPU-visible part of the second adversarial round (issue 31): every bundle of
# adversarial_round2.py through kernel-check --compile-only. What a CPU can know without running
# anything: the heap spellings (mal##loc, ::operator new, (malloc)/(free)) are policy violations of
# the device_malloc rule, found in what the compiled code calls; a kernel named in the checker's
# reserved ca_ namespace is refused by the reserved_name rule; every precision spelling (mma with a
# line break, wmma through <mma.h>, half2 arithmetic in intrinsics and in inline PTX) reports fp16;
# a kernel the plan never launches does not lower the record; integer-emulated bf16 reads fp32
# (the calibrated bound on the device judges it); everything else compiles and its plan binds.
# ADV_ROUND=3 (adversarial_round3_cpu.sh) runs the third round's generator instead: every spelling
# of reduced precision, of the heap and of a reserved name, each case's expected compile-only
# status (alternatives with '/'), rule and precision.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache"
ROUND=${ADV_ROUND:-2}
GEN="$HERE/adversarial_round$ROUND.py"
python3 "$GEN" "$CA_SRC" > "$T/cases.txt" || { echo "FAIL: $GEN"; exit 1; }
grep -v '^{' "$T/cases.txt" > "$T/expected.txt"
grep '^{' "$T/cases.txt" > "$T/in.jsonl"
"$CA_BIN/kernel-check" --compile-only --arch sm_90 --no-store < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
rc=$?
fails=0
[ $rc -eq 0 ] || { echo "FAIL kernel-check --compile-only exit $rc: $(tail -5 "$T/err.txt")"; fails=1; }
python3 - "$T/expected.txt" "$T/out.jsonl" "$ROUND" <<'PY' || fails=$((fails + 1))
import json, sys
expected = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
got = {}
for line in open(sys.argv[2]):
    r = json.loads(line)
    got[r["candidate_id"]] = r
bad = 0
for row in expected:
    name = row[-2]
    keys = dict(kv.split("=", 1) for kv in row[:-2] if "=" in kv)
    rec = got.get("adv%s-%s" % (sys.argv[3], name))
    problems = []
    if rec is None:
        problems.append("no output record")
    else:
        c = rec.get("check", {})
        status, want = c.get("status"), keys["cpu"]
        if status not in want.split("/"):
            problems.append("status %s, expected %s (%s)" % (status, want, c.get("reason", "")[:200]))
        elif status == "compile_error":
            pass  # the compiler refuses the spelling: nothing runs
        elif status == "policy_violation":
            rule = (c.get("violation") or {}).get("rule")
            if "rule" in keys and rule != keys["rule"]:
                problems.append("rule %s, expected %s (%s)" % (rule, keys["rule"], c.get("reason", "")[:200]))
            if keys.get("rule") == "reserved_name" and "ca_" not in c.get("reason", ""):
                problems.append("the reason does not name the kernel: %s" % c.get("reason", "")[:200])
        else:
            # compiled: the plan bound to the task's shapes (scratch sized), and the precision read.
            if "scratch_bytes" not in c:
                problems.append("the plan did not bind (no check.scratch_bytes)")
            if "precision" in keys and c.get("precision") != keys["precision"]:
                problems.append("precision %s, expected %s (per kernel: %s)" % (c.get("precision"), keys["precision"],
                                                                                json.dumps(c.get("kernel_precision"))))
        shown = "%s%s%s" % (c.get("status"), " " + str((c.get("violation") or {}).get("rule")) if c.get("violation") else "",
                             " " + str(c.get("precision")) if c.get("status") == "compiled" else "")
    print("%s %-26s %s" % ("FAIL" if problems else "ok  ", name, "; ".join(problems) if problems else shown))
    bad += bool(problems)
print("adversarial_round%s_cpu: %d of %d cases failed" % (sys.argv[3], bad, len(expected)))
sys.exit(1 if bad else 0)
PY
[ $fails -eq 0 ]
