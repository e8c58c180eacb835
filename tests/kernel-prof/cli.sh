#!/usr/bin/env bash
# kernel-prof without a GPU: --help documents the options, records whose check failed (or that
# have none) pass through untouched, bad input is named, and a passing record exits 3.
set -euo pipefail
KP="$CA_BIN/kernel-prof"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3

"$KP" --help > "$T/help"
for opt in --metric --baselines --gpus --refresh --metrics --tasks Example: device wall compile-max-autotune; do
  grep -q -- "$opt" "$T/help" || fail "--help does not mention $opt"
done
"$KP" --version | grep -q kernel-prof || fail "--version"
set +e; "$KP" --metric cycles < /dev/null 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "--metric cycles should be a usage error (1), got $rc"
set +e; "$KP" --baselines eager,jit < /dev/null 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "--baselines jit should be a usage error (1), got $rc"

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

# --gpus 0,1: one child per GPU, records dealt round-robin, written back in input order.
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
  cat > "$T/pass.jsonl" <<'J'
{"task_id":"t1","candidate_id":"c1","check":{"status":"incorrect","correct":false}}
{"task_id":"t2","candidate_id":"c2","task":{"code":"import torch"},"bundle":{"kernels":{"a.cu":"__global__ void k(){}"},"plan":"forward: []"},"check":{"status":"passed","correct":true}}
J
  set +e; "$KP" --no-store < "$T/pass.jsonl" > "$T/out4" 2> "$T/err"; rc=$?; set -e
  [ "$rc" = 3 ] || fail "a passing record without a GPU should exit 3, got $rc: $(cat "$T/err")"
  grep -qi "GPU" "$T/err" || fail "exit 3 message should mention the GPU: $(cat "$T/err")"
  grep -q "needs a GPU" "$T/err" || fail "exit 3 message should say the record needs a GPU: $(cat "$T/err")"
  [ "$(wc -l < "$T/out4")" = 1 ] || fail "the failed record before it should have been written"
  grep -q '"c1"' "$T/out4" || fail "wrong record written"
fi

# The man page renders.
if command -v man >/dev/null; then man -l "$CA_SRC/man/kernel-prof.1" 2>/dev/null | grep -q "kernel-prof" || fail "man page"; fi
echo "kernel-prof cli: ok"
