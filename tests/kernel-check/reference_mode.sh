#!/usr/bin/env bash
# kernel-check's verdict says the reference's mode (issue 33): check.reference has the mode the task
# states (train, as KernelBench runs models, when it states none), whether its reference is stochastic
# (the task record's word on the CPU path; null when nothing measured it) and, for a stochastic one,
# the rule that judges it (task_stochastic, or allow_stochastic with --allow-stochastic). A task whose
# mode is not one is a bad record naming task.reference.mode (exit 2 under --strict). Compile-only:
# the GPU path's, from the worker's load, is in gpu_judge.sh's stochastic case (tolerance_gpu.sh).
source "$(dirname "$0")/../lib.sh"
set -u
KC="$CA_BIN/kernel-check"
MK="python3 $CA_SRC/tests/kernel-check/make_candidate.py"
B="$CA_SRC/datasets/skill/bundles/scale_add"
export CUDA_AGENT_CACHE="$T/cache"

# ref FILE: check.reference of the first record, as JSON with sorted keys.
ref() { python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(json.dumps(r['check'].get('reference'), sort_keys=True))" "$1"; }
# run NAME EXPECTED [make_candidate args...] -- [kernel-check args...]
run() {
  local name=$1 want=$2; shift 2
  local mk=() kc=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do mk+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  kc=("$@")
  $MK "$B" "${mk[@]+"${mk[@]}"}" > "$T/cand.jsonl" || fail "$name: make_candidate"
  "$KC" --compile-only --arch sm_90 --no-store "${kc[@]+"${kc[@]}"}" < "$T/cand.jsonl" > "$T/out.jsonl" 2> "$T/err" \
    || fail "$name: exit $?: $(tail -2 "$T/err")"
  local got
  got=$(ref "$T/out.jsonl")
  [ "$got" = "$want" ] || fail "$name: check.reference is $got, expected $want"
  python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); assert r['check']['status']=='compiled', r['check']" "$T/out.jsonl" \
    || fail "$name: not compiled"
  cat "$T/out.jsonl" >> "$T/all.jsonl"
  pass "$name: $got"
}

run "a task without the field runs in train mode, stochastic unmeasured" \
  '{"from": null, "mode": "train", "stochastic": null}'
run "a task whose import measured a BatchNorm reference" \
  '{"from": "task_record", "mode": "train", "stochastic": false}' --task-set reference '{"mode": "train", "stochastic": false}'
run "an eval task" \
  '{"from": "task_record", "mode": "eval", "stochastic": false}' --task-set reference '{"mode": "eval", "stochastic": false}'
run "a stochastic task (dropout): the rule that will judge it" \
  '{"from": "task_record", "mode": "train", "rule": "task_stochastic", "stochastic": true}' --task-set reference '{"mode": "train", "stochastic": true}'
run "a stochastic task with --allow-stochastic" \
  '{"from": "task_record", "mode": "train", "rule": "allow_stochastic", "stochastic": true}' --task-set reference '{"mode": "train", "stochastic": true}' -- --allow-stochastic
run "an older record's top-level stochastic flag" \
  '{"from": "task_record", "mode": "train", "rule": "task_stochastic", "stochastic": true}' --task-set stochastic true
run "no task: no reference section" 'null' --no-task
CA_SRC="$CA_SRC" "$PY" "$CA_SRC/tests/validate_schema.py" check "$T/all.jsonl" || fail "check schema"
# The schema is not a rubber stamp: a stochastic reference without its rule, an unknown mode, fail.
"$PY" - "$T/all.jsonl" > "$T/broken.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][3]
assert r["check"]["reference"]["rule"] == "task_stochastic"
del r["check"]["reference"]["rule"]
print(json.dumps(r))
r["check"]["reference"].update(stochastic=False, mode="inference")
print(json.dumps(r))
PY
n=$(CA_SRC="$CA_SRC" "$PY" "$CA_SRC/tests/validate_schema.py" check "$T/broken.jsonl" 2>&1 | grep -c "reference") || true
[ "$n" -ge 2 ] || fail "check schema takes a broken reference section ($n errors)"
pass "check sections valid against check.schema.json; broken reference sections are not"

# compile-only's reason says what the record says of an unusable task (a policy should not optimize
# for a task no GPU verdict can use), and nothing for a usable one.
{ $MK "$B" --task-set reference '{"mode": "train", "stochastic": false, "insensitive": true}'
  $MK "$B" --task-set reference '{"mode": "train", "stochastic": true}'
  $MK "$B" --task-set reference '{"mode": "train", "stochastic": false, "insensitive": false, "ill_conditioned": false}'; } > "$T/flags.jsonl"
"$KC" --compile-only --arch sm_90 --no-store < "$T/flags.jsonl" > "$T/out.jsonl" 2> "$T/err" || fail "flags: exit $?"
python3 - "$T/out.jsonl" <<'PY' || fail "compile-only reason on flagged tasks: $(cut -c1-600 "$T/out.jsonl")"
import json, sys
ins, sto, ok = [json.loads(l)["check"] for l in open(sys.argv[1])]
assert ins["status"] == sto["status"] == ok["status"] == "compiled", (ins, sto, ok)
assert "the task record says its reference is insensitive" in ins["reason"] and "task_insensitive" in ins["reason"], ins["reason"]
assert "the task record says its reference is stochastic" in sto["reason"], sto["reason"]
assert "task record says" not in ok["reason"], ok["reason"]
PY
pass "compile-only's reason names a task the record says is insensitive or stochastic"

# A mode that is not one: a bad record naming task.reference.mode; the records around it are judged.
{ $MK "$B"; $MK "$B" --task-set reference '{"mode": "inference"}'; $MK "$B"; } > "$T/three.jsonl"
"$KC" --compile-only --arch sm_90 --no-store < "$T/three.jsonl" > "$T/out.jsonl" 2> "$T/err" || fail "bad mode without --strict: exit $?"
python3 - "$T/out.jsonl" <<'PY' || fail "bad mode: $(cut -c1-400 "$T/out.jsonl")"
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
assert len(out) == 3, len(out)
assert out[1]["error"]["field"] == "task.reference.mode", out[1].get("error")
assert "inference" in out[1]["error"]["reason"] and "check" not in out[1], out[1]
assert out[0]["check"]["status"] == out[2]["check"]["status"] == "compiled"
PY
set +e; "$KC" --compile-only --strict --arch sm_90 --no-store < "$T/three.jsonl" > /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "line 2" "$T/err" && grep -q "task.reference.mode" "$T/err" || fail "bad mode --strict: exit $rc: $(cat "$T/err")"
$MK "$B" --task-set reference '"eval"' > "$T/bad2.jsonl"
set +e; "$KC" --compile-only --strict --arch sm_90 --no-store < "$T/bad2.jsonl" > /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "task.reference" "$T/err" || fail "reference not an object --strict: exit $rc: $(cat "$T/err")"
pass "a bad mode is a bad record naming task.reference.mode (exit 2 under --strict)"
echo "kernel-check reference mode: ok"
