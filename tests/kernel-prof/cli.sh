#!/usr/bin/env bash
# kernel-prof without a GPU: --help documents the options, records whose check failed (or that
# have none) pass through untouched, bad input is named, and a passing record exits 3.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
KP="$CA_BIN/kernel-prof"

"$KP" --help > "$T/help"
for opt in --metric --baselines --gpus --refresh --metrics --tasks Example: device wall compile-max-autotune; do
  grep -q -- "$opt" "$T/help" || fail "--help does not mention $opt"
done
"$KP" --version | grep -q kernel-prof || fail "--version"
set +e; "$KP" --metric cycles < /dev/null 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "--metric cycles should be a usage error (1), got $rc"
set +e; "$KP" --baselines eager,jit < /dev/null 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "--baselines jit should be a usage error (1), got $rc"
# The rules it holds loaded code to again: a missing or malformed file is a usage error, named.
set +e; "$KP" --rules "$T/no-such-rules.yaml" < /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] || fail "--rules with a missing file should be a usage error (1), got $rc"
grep -q "no-such-rules.yaml" "$T/err" || fail "--rules: the message should name the file: $(cat "$T/err")"
printf 'max_stack_bytes: [not, a, number]\n' > "$T/bad-rules.yaml"
set +e; "$KP" --rules "$T/bad-rules.yaml" < /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] || fail "--rules with a malformed file should be a usage error (1), got $rc: $(cat "$T/err")"
grep -q "max_stack_bytes" "$T/err" || fail "--rules: the message should name the key: $(cat "$T/err")"
printf 'max_stack_bytes: 4096\n' > "$T/rules.yaml"
# What the gpu test's fixtures are held to, on the CPU (kernel-check --compile-only, the rules kernel-prof
# applies again): every candidate of cands.jsonl keeps the rules for sm_90 (session 34: a module
# variable calls_made was read as a call of "s_made"); arch.jsonl's keeps them for sm_80 and breaks
# them for sm_90, where its branch reads %globaltimer.
mkdir -p "$T/fx" && $PY "$CA_SRC/tests/kernel-prof/fixtures/make_records.py" "$T/fx"
"$CA_BIN/kernel-check" --compile-only --arch sm_90 --no-store < "$T/fx/cands.jsonl" > "$T/fx/c90.jsonl" 2> "$T/err" ||
  fail "kernel-check --compile-only on the fixtures: $(cat "$T/err")"
for a in sm_80 sm_90; do
  "$CA_BIN/kernel-check" --compile-only --arch $a --no-store < "$T/fx/arch.jsonl" > "$T/fx/a$a.jsonl" 2> "$T/err" || true
done
$PY - "$T/fx" <<'PY' || fail "the fixtures and the rules"
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(d + "/c90.jsonl")]
assert len(recs) == 5 and all(r["check"]["status"] == "compiled" for r in recs), [(r["name"], r["check"]) for r in recs]
a80 = json.loads(open(d + "/asm_80.jsonl").readline())["check"]
a90 = json.loads(open(d + "/asm_90.jsonl").readline())["check"]
assert a80["status"] == "compiled", a80
assert a90["status"] == "policy_violation" and "globaltimer" in a90["reason"], a90
PY

# Failed checks and records without a check pass through untouched (same keys, order, values).
cat > "$T/failed.jsonl" <<'J'
{"task_id":"t1","candidate_id":"c1","bundle":{"kernels":{"a.cu":"x"},"plan":"forward: []"},"check":{"status":"incorrect","correct":false,"reason":"outputs.0: 12 elements off"},"zeta":[1,2.5,"s"]}
{"task_id":"t2","note":"no check section, e.g. a task record"}
{"candidate_id":"c3","task_id":"t3","check":{"status":"compile_error","correct":false},"alpha":{"nested":{"k":null}}}
J
"$KP" --no-store < "$T/failed.jsonl" > "$T/out.jsonl" 2> "$T/err"
$PY - "$T/failed.jsonl" "$T/out.jsonl" <<'PY' || fail "failed-check records were changed"
import json, sys
a = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[1])]
b = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[2])]
assert a == b, (a, b)
PY
grep -q "3 passed through" "$T/err" || fail "summary should count 3 passed through: $(cat "$T/err")"

# --gpus 0,1: one child per GPU, each record to the next free one, written back in input order.
$PY -c '
import json
for i in range(9):
    print(json.dumps({"task_id": "t%d" % i, "candidate_id": "c%d" % i, "check": {"status": "incorrect", "correct": False}, "i": i}))
' > "$T/many.jsonl"
"$KP" --no-store --gpus 0,1 < "$T/many.jsonl" > "$T/many.out" 2> "$T/err" || fail "--gpus 0,1: exit $?: $(cat "$T/err")"
$PY - "$T/many.jsonl" "$T/many.out" <<'PY' || fail "--gpus 0,1 changed or reordered records"
import json, sys
a = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[1])]
b = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[2])]
assert a == b, (a[:2], b[:2])
PY
grep -q "9 records dealt to 2 GPUs" "$T/err" || fail "--gpus summary: $(cat "$T/err")"

# A line that is not JSON: exit 2 naming the line; earlier records are written.
printf '{"task_id":"t1","check":{"correct":false}}\n{oops\n' > "$T/bad.jsonl"
set +e; "$KP" --no-store < "$T/bad.jsonl" > "$T/out2" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] || fail "not JSON should exit 2, got $rc"
grep -q "line 2" "$T/err" || fail "error does not name line 2: $(cat "$T/err")"
[ "$(wc -l < "$T/out2")" = 1 ] || fail "record before the bad line lost"

# A check without a boolean `correct`: error section and a warning, or exit 2 under --strict.
printf '{"task_id":"t1","check":{"status":"passed"}}\n' > "$T/nocorrect.jsonl"
"$KP" --no-store < "$T/nocorrect.jsonl" > "$T/out3" 2> "$T/err"
grep -q '"error":{"tool":"kernel-prof","field":"check.correct"' "$T/out3" || fail "no error section: $(cat "$T/out3")"
grep -q "check.correct" "$T/err" || fail "no warning naming check.correct"
set +e; "$KP" --no-store --strict < "$T/nocorrect.jsonl" > /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] || fail "--strict should exit 2, got $rc"

# A passing record on a machine without a GPU: the failed one before it is written, then exit 3.
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  echo "note: a CUDA driver is present here; the no-GPU exit-3 case is covered on GPU-less CI" >&2
else
  # Candidate ids are content ids (libcommon/ids.cpp): --resume reuses a stored verdict only under
  # the id of what was judged. C2 is the bundle's id.
  read -r C2 < <($PY - <<'PY'
import hashlib, json
def cid(task_id, bundle):
    key = json.dumps({"task_id": task_id, "bundle": bundle}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:16]
b = {"kernels": {"a.cu": "__global__ void k(){}"}, "plan": "forward: []"}
print(cid("t2", b))
PY
)
  cat > "$T/pass.jsonl" <<J
{"task_id":"t1","candidate_id":"c1","check":{"status":"incorrect","correct":false}}
{"task_id":"t2","candidate_id":"$C2","task":{"code":"import torch"},"bundle":{"kernels":{"a.cu":"__global__ void k(){}"},"plan":"forward: []"},"check":{"status":"passed","correct":true}}
J
  set +e; "$KP" --no-store < "$T/pass.jsonl" > "$T/out4" 2> "$T/err"; rc=$?; set -e
  [ "$rc" = 3 ] || fail "a passing record without a GPU should exit 3, got $rc: $(cat "$T/err")"
  grep -qi "GPU" "$T/err" || fail "exit 3 message should mention the GPU: $(cat "$T/err")"
  grep -q "needs a GPU" "$T/err" || fail "exit 3 message should say the record needs a GPU: $(cat "$T/err")"
  [ "$(wc -l < "$T/out4")" = 1 ] || fail "the failed record before it should have been written"
  grep -q '"c1"' "$T/out4" || fail "wrong record written"

  # --resume reuses a stored profile only when it was timed as this run would time it: its
  # prof.timed_by is the content id of the task's content, the candidate, the check's bound, the
  # options that change the numbers or the verdict, the kind of GPU and the release. On a host
  # without a GPU the stored profile's own GPU stands for it, and a reuse needs no GPU; anything else
  # that differs needs the GPU again (exit 3 here).
  profile_row() {  # candidate_id, timed_by ("" for a row from before timed_by)
    $PY - "$1" "$2" <<'PY'
import json, sys
method = {"min_runs": 10, "max_runs": 10000, "rel_ci": 0.01, "budget_s": 10.0, "seed": 0, "warmup_calls": 3}
prof = {"status": "timed", "correct": True, "method": method, "time_us": {"median": 12.5},
        "baselines": {"eager": {"time_us": {"median": 30.0}}, "compile": {"time_us": {"median": 20.0}}},
        "speedup_vs_eager": 2.4, "speedup_vs_compile": 1.6, "gpu": {"name": "NVIDIA H200", "arch": "sm_90"}}
if sys.argv[2]:
    prof["timed_by"] = sys.argv[2]
print(json.dumps({"task_id": "t2", "candidate_id": sys.argv[1], "prof": prof}))
PY
  }
  kp_resume() {  # input file, then kernel-prof's options; sets rc, output in $T/outr, log in $T/err
    local in="$1"; shift
    set +e; "$KP" --store "$T/s.db" --resume -v "$@" < "$in" > "$T/outr" 2> "$T/err"; rc=$?; set -e
  }
  "$KP" --help | grep -q -- "--resume" || fail "--help does not mention --resume"
  # A profile stored before timed_by (the same candidate, seed and stop rule) is timed again.
  profile_row "$C2" "" | "$CA_BIN/run-store" import --store "$T/s.db" 2> "$T/err" || fail "import: $(cat "$T/err")"
  kp_resume "$T/pass.jsonl" --seed 0
  [ "$rc" = 3 ] || fail "a stored profile without timed_by must be timed again (exit 3 without a GPU), got $rc: $(cat "$T/err")"
  grep -q "timed otherwise (timed_by none" "$T/err" || fail "-v should say the stored profile was timed otherwise: $(cat "$T/err")"
  H=$(grep -o "this run's [0-9a-f]\{16\}" "$T/err" | head -n 1 | awk '{print $3}')
  [ -n "$H" ] || fail "-v should name this run's timed_by: $(cat "$T/err")"
  # One stored under this run's timed_by is reused, without a GPU.
  profile_row "$C2" "$H" | "$CA_BIN/run-store" import --store "$T/s.db" 2> "$T/err" || fail "import: $(cat "$T/err")"
  kp_resume "$T/pass.jsonl" --seed 0
  [ "$rc" = 0 ] || fail "--resume with the profile timed alike in the store should need no GPU, got $rc: $(cat "$T/err")"
  $PY - "$T/outr" "$H" <<'PY' || fail "--resume did not reuse the stored profile"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2 and recs[0]["candidate_id"] == "c1" and "prof" not in recs[0], recs[0]
p = recs[1]["prof"]
assert p["status"] == "timed" and p["speedup_vs_compile"] == 1.6 and p["time_us"]["median"] == 12.5, p
assert p["timed_by"] == sys.argv[2], p
PY
  grep -q "1 skipped" "$T/err" || fail "a reused profile counts as skipped: $(cat "$T/err")"
  kp_resume "$T/pass.jsonl" --seed 0 --baselines compile,eager
  [ "$rc" = 0 ] || fail "the baselines are a set (their order changes nothing): reused, got $rc: $(cat "$T/err")"
  # The kind of GPU is in timed_by: here the stored row's GPU stands for this run's, so the same
  # timed_by on a row that says another GPU is not the hash of what timed it: timed again.
  profile_row "$C2" "$H" | sed 's/"NVIDIA H200"/"NVIDIA H100 80GB HBM3"/' | "$CA_BIN/run-store" import --store "$T/s.db" 2> "$T/err" ||
    fail "import: $(cat "$T/err")"
  kp_resume "$T/pass.jsonl" --seed 0
  [ "$rc" = 3 ] || fail "a profile whose timed_by is not that of its GPU must not be reused, got $rc: $(cat "$T/err")"
  # A stored row whose status is not a string (run-store import stores a record's prof as it came) is
  # timed again (exit 3 here), never the JSON library's type error (exit 4).
  profile_row "$C2" "$H" | sed 's/"status": "timed"/"status": 5/' | "$CA_BIN/run-store" import --store "$T/s.db" 2> "$T/err" ||
    fail "import: $(cat "$T/err")"
  kp_resume "$T/pass.jsonl" --seed 0
  [ "$rc" = 3 ] || fail "a stored profile whose status is 5 must be timed again (exit 3 without a GPU), got $rc: $(cat "$T/err")"
  profile_row "$C2" "$H" | "$CA_BIN/run-store" import --store "$T/s.db" 2> "$T/err" || fail "import: $(cat "$T/err")"
  # Timed otherwise: another option (each one the old method comparison let through), no --seed
  # (a run draws its own seeds: a profile timed under a known one is not one of those), another
  # bound in the record's check, another task content under the same ids: timed again.
  for opts in "--metric wall" "--margin 0.1" "--remeasure 0" "--no-cupti" "--input-sets 2" "--baseline-budget-s 5" \
              "--baselines eager" "--metrics" "--rules $T/rules.yaml" ""; do
    # shellcheck disable=SC2086
    if [ -n "$opts" ]; then kp_resume "$T/pass.jsonl" --seed 0 $opts; else kp_resume "$T/pass.jsonl"; fi
    [ "$rc" = 3 ] || fail "a profile timed otherwise must not be reused ('${opts:-no --seed}'; exit 3 without a GPU), got $rc: $(cat "$T/err")"
  done
  sed -e 's/"status":"passed","correct":true/"status":"passed","correct":true,"tolerance":"published"/' "$T/pass.jsonl" > "$T/pass_pub.jsonl"
  grep -q '"tolerance":"published"' "$T/pass_pub.jsonl" || fail "test setup: no tolerance in the record"
  kp_resume "$T/pass_pub.jsonl" --seed 0
  [ "$rc" = 3 ] || fail "a profile timed under the calibrated bound must not be reused for a check that says published, got $rc"
  sed -e 's/"code":"import torch"/"code":"import torch  # another task"/' "$T/pass.jsonl" > "$T/pass_task.jsonl"
  kp_resume "$T/pass_task.jsonl" --seed 0
  [ "$rc" = 3 ] || fail "a profile of another task content under the same ids must not be reused, got $rc"
  # A stored verdict is never reused under an id that is not the record's content id.
  sed -e "s/\"$C2\"/\"c2\"/" "$T/pass.jsonl" > "$T/forged.jsonl"
  kp_resume "$T/forged.jsonl" --seed 0
  grep -q '"field":"candidate_id"' "$T/outr" || fail "a forged candidate_id must be a bad record, not reuse: $(cat "$T/outr")"
  set +e; "$KP" --store "$T/s.db" --seed 0 < "$T/pass.jsonl" > /dev/null 2> "$T/err"; rc=$?; set -e
  [ "$rc" = 3 ] || fail "without --resume the stored profile is not reused (exit 3 without a GPU), got $rc"
fi

# The man page renders.
if command -v man >/dev/null; then man -l "$CA_SRC/man/kernel-prof.1" 2>/dev/null | grep -q "kernel-prof" || fail "man page"; fi
echo "kernel-prof cli: ok"
