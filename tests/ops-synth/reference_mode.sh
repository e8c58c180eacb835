#!/usr/bin/env bash
# The reference's mode is part of the task (issue 33): ops-synth import states it in every record
# (`reference.mode`, train as KernelBench runs models unless the record says eval) with the worker's
# stochastic flag and its evidence (and the reference's peak memory); a live nn.Dropout(p=0.5) is flagged, BatchNorm in training mode
# is not; a record asking eval gets eval (its dropout is then off: not stochastic); a Model that
# calls eval() itself is recorded as eval; a mode that is not one is a bad record naming
# reference.mode (exit 2 under --strict, with and without a worker); filter states it too.
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch (set CUDA_AGENT_PYTHON)"
export CUDA_AGENT_PYTHON="$PY"
FIX="$HERE/reference_mode"

# 1. KernelBench files through the CPU worker.
"$OS" import --no-store --device cpu "$FIX" > "$T/kb.jsonl" 2> "$T/err" || fail "import: $(tail -3 "$T/err")"
"$PY" - "$T/kb.jsonl" <<'PY' || fail "import: reference sections: $(cat "$T/kb.jsonl")"
import json, sys
recs = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(recs) == ["1_Dropout", "2_BatchNorm", "3_EvalInInit"], sorted(recs)
d, b, e = recs["1_Dropout"], recs["2_BatchNorm"], recs["3_EvalInInit"]
assert d["reference"]["mode"] == "train" and d["reference"]["stochastic"] is True, d["reference"]
assert d["stochastic"] is True, "the top-level flag older readers take"
ev = d["reference"]["evidence"]
assert ev["same_rng_bit_equal"] is True and ev["rel_diff_other_rng"] > 0.1, ev
assert b["reference"]["mode"] == "train" and b["reference"]["stochastic"] is False, b["reference"]
assert b["stochastic"] is False and b["reference"]["evidence"]["rel_diff_other_rng"] == 0.0, b["reference"]
assert any(p["name"] == "bn.running_mean" for p in b["params"]), b["params"]
assert e["reference"]["mode"] == "eval" and e["reference"]["stochastic"] is False, e["reference"]
# The reference's peak memory (the worker's load): BatchNorm's output, 8x4x6x6 floats (its batch
# statistics, 2x4 floats, die inside batch_norm), what kernel-check's scratch cap follows.
assert 4608 <= b["reference"]["peak_bytes"] <= 4608 + 32, b["reference"]
PY
pass "import: dropout stochastic in train mode, BatchNorm train and not stochastic, eval() in __init__ recorded as eval; reference.peak_bytes"
CA_SRC="$CA_SRC" "$PY" "$CA_SRC/tests/validate_schema.py" task "$T/kb.jsonl" || fail "imported records: schema"

# 2. JSONL rows that state a mode: eval turns the dropout off (the worker ran what the record said);
# a row's other reference keys are kept; a bad mode is a bad record naming the field.
"$PY" - "$T/kb.jsonl" > "$T/rows.jsonl" <<'PY'
import json, sys
recs = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
d = recs["1_Dropout"]
row = lambda **kw: json.dumps(dict({"ops": ["dropout"], "data_source": "test", "code": d["code"]}, **kw))
print(row(reference={"mode": "eval", "note": "kept"}))
print(row(reference={"mode": "inference"}))
print(row(reference={"mode": "train"}))
print(row(reference="train"))
PY
"$OS" import --no-store --device cpu "$T/rows.jsonl" > "$T/rows.out" 2> "$T/err" || fail "import rows: exit $?: $(tail -3 "$T/err")"
"$PY" - "$T/rows.out" <<'PY' || fail "import rows: $(cat "$T/rows.out")"
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
assert len(out) == 4, len(out)
assert out[0]["reference"]["mode"] == "eval" and out[0]["reference"]["stochastic"] is False, out[0]["reference"]
assert out[0]["reference"]["note"] == "kept", out[0]["reference"]
assert out[1]["error"]["field"] == "reference.mode", out[1].get("error")
assert "inference" in out[1]["error"]["reason"], out[1]["error"]
assert out[2]["reference"]["mode"] == "train" and out[2]["reference"]["stochastic"] is True, out[2]["reference"]
assert out[3]["error"]["field"] == "reference", out[3].get("error")
# An eval task is another task: its id differs from the train one's, which keeps the id of before.
kb = {r["name"]: r for r in map(json.loads, open(sys.argv[1].replace("rows.out", "kb.jsonl")))}
assert out[2]["task_id"] == kb["1_Dropout"]["task_id"], (out[2]["task_id"], kb["1_Dropout"]["task_id"])
assert out[0]["task_id"] != out[2]["task_id"], out[0]["task_id"]
PY
grep -q "reference.mode" "$T/err" || fail "the bad record's warning names reference.mode: $(cat "$T/err")"
for worker in "--device cpu" "--no-worker"; do
  set +e; "$OS" import --strict --no-store $worker "$T/rows.jsonl" > /dev/null 2> "$T/err"; rc=$?; set -e
  [ "$rc" = 2 ] || fail "import --strict $worker of a bad mode: exit $rc: $(cat "$T/err")"
  grep -q "line 2" "$T/err" && grep -q "reference.mode" "$T/err" || fail "import --strict $worker: $(cat "$T/err")"
done
pass "import: a row's eval mode is the worker's (dropout off) and its own task id; a bad mode is a bad record naming reference.mode (exit 2 under --strict)"

# 3. Without a worker the mode is stated, nothing measured.
"$OS" import --no-store --no-worker "$FIX/2_BatchNorm.py" > "$T/nw.jsonl" 2>/dev/null || fail "import --no-worker"
"$PY" -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); assert r["reference"] == {"mode": "train"}, r["reference"]; assert "stochastic" not in r' "$T/nw.jsonl" \
  || fail "import --no-worker: $(cat "$T/nw.jsonl")"
pass "import --no-worker: reference {mode: train}, stochastic not measured"

# 4. filter states it too (the worker's load inside the filters op) and sends the record's mode.
head -2 "$T/kb.jsonl" > "$T/two.jsonl"
"$OS" filter --device cpu --no-store --keep-rejected --no-compile -i "$T/two.jsonl" > "$T/f.jsonl" 2> "$T/err" \
  || fail "filter: $(tail -3 "$T/err")"
"$PY" - "$T/f.jsonl" <<'PY' || fail "filter: $(cut -c1-600 "$T/f.jsonl")"
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
assert [r["name"] for r in out] == ["1_Dropout", "2_BatchNorm"], [r["name"] for r in out]
assert out[0]["reference"]["mode"] == "train" and out[0]["reference"]["stochastic"] is True, out[0]["reference"]
assert out[0]["filter"]["kept"] is False and out[0]["filter"]["reason"] == "deterministic", out[0]["filter"]
assert out[1]["reference"]["mode"] == "train" and out[1]["reference"]["stochastic"] is False, out[1]["reference"]
assert 4608 <= out[1]["reference"]["peak_bytes"] <= 4608 + 32, out[1]["reference"]
PY
pass "filter: reference sections from the worker's load"
# 5. End to end: kernel-check's verdict on a candidate for the imported dropout task says its mode
# and the rule that judges it (compile-only: the task record's word, with its insensitive flag; its
# ill_conditioned is null, not measured for a stochastic reference, and not shown).
"$PY" - "$T/kb.jsonl" "$CA_SRC/datasets/skill/bundles/scale_add" > "$T/cand.jsonl" <<'PY'
import json, os, sys
task = [r for r in map(json.loads, open(sys.argv[1])) if r["name"] == "1_Dropout"][0]
d = sys.argv[2]
kernels = {f: open(os.path.join(d, f)).read() for f in sorted(os.listdir(d)) if f.endswith(".cu")}
print(json.dumps({"task_id": task["task_id"], "task": task,
                  "bundle": {"kernels": kernels, "plan": open(os.path.join(d, "plan.yaml")).read()}}))
PY
CUDA_AGENT_CACHE="$T/cache" "$CA_BIN/kernel-check" --compile-only --arch sm_90 --no-store < "$T/cand.jsonl" > "$T/check.jsonl" 2> "$T/err" \
  || true  # the scale_add bundle does not fit the dropout task's shapes: any verdict, the reference is what counts
"$PY" -c 'import json,sys; c=json.loads(open(sys.argv[1]).readline())["check"]; assert c["reference"] == {"mode": "train", "stochastic": True, "from": "task_record", "insensitive": False, "rule": "task_stochastic"}, c' "$T/check.jsonl" \
  || fail "kernel-check on the imported dropout task: $(cut -c1-600 "$T/check.jsonl") $(tail -2 "$T/err")"
pass "kernel-check's verdict on the imported dropout task: mode train, stochastic, rule task_stochastic"
echo "ops-synth reference mode: ok"
