#!/usr/bin/env bash
# ops-synth filter --resume and the reference's mode (issue 33): a stored verdict is reused only for a
# record whose reference runs in the same mode (the same task id asking eval is judged again), and a
# reused verdict gives the record back its measured reference section (mode, stochastic, peak_bytes),
# as the run that made the verdict wrote it.
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch (set CUDA_AGENT_PYTHON)"
export CUDA_AGENT_PYTHON="$PY"
FIX="$HERE/reference_mode"

"$OS" import --no-store --device cpu "$FIX/2_BatchNorm.py" > "$T/bn.jsonl" 2> "$T/err" || fail "import: $(tail -3 "$T/err")"
"$OS" filter --device cpu --store "$T/s.db" --keep-rejected --no-compile -i "$T/bn.jsonl" > "$T/f1.jsonl" 2> "$T/err1" \
  || fail "filter: $(tail -3 "$T/err1")"
"$OS" filter --device cpu --store "$T/s.db" --keep-rejected --no-compile --resume -i "$T/bn.jsonl" > "$T/f2.jsonl" 2> "$T/err2" \
  || fail "filter --resume: $(tail -3 "$T/err2")"
grep -q "1 verdicts reused" "$T/err2" || fail "the stored verdict was not reused: $(cat "$T/err2")"
# The same task id asking eval: another task for the verdict, judged again.
"$PY" - "$T/bn.jsonl" > "$T/eval.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
r["reference"] = {"mode": "eval"}
print(json.dumps(r))
PY
"$OS" filter --device cpu --store "$T/s.db" --keep-rejected --no-compile --resume -i "$T/eval.jsonl" > "$T/f3.jsonl" 2> "$T/err3" \
  || fail "filter --resume (eval): $(tail -3 "$T/err3")"
if grep -q "verdicts reused" "$T/err3"; then fail "a train verdict was reused for an eval record: $(cat "$T/err3")"; fi
"$PY" - "$T/f1.jsonl" "$T/f2.jsonl" "$T/f3.jsonl" <<'PY' || fail "records: $(cut -c1-400 "$T/f2.jsonl")"
import json, sys
f1, f2, f3 = (json.loads(open(p).readline()) for p in sys.argv[1:4])
assert f1["filter"]["reference"]["mode"] == "train", f1["filter"]
# The reused verdict brings the measured reference back, as the first run wrote it.
assert f2["reference"] == f1["reference"], (f2.get("reference"), f1["reference"])
assert f2["reference"]["peak_bytes"] > 0 and f2["reference"]["stochastic"] is False, f2["reference"]
assert f3["reference"]["mode"] == "eval" and f3["filter"]["reference"]["mode"] == "eval", f3["reference"]
assert f3["task_id"] == f1["task_id"]
PY
pass "filter --resume: reused for the same mode with the measured reference back; the same id in eval is judged again"
