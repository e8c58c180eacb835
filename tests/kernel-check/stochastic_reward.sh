#!/usr/bin/env bash
# CPU: a check of status task_stochastic (the task's reference is a random draw: kernel-check's rule
# for it) is not a verdict against the candidate: reward-calc gives it no -1 and passes it on with
# an error section, while an incorrect check of the same candidate gets -1. The check schema
# accepts the record. ops-synth import flags a dropout task stochastic and a linear one not.
set -u
RC="$CA_BIN/reward-calc"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
base='"task_id": "t-drop", "candidate_id": "c1", "schema": "cuda-agent/candidate/v1"'
cat > "$T/in.jsonl" <<JSON
{$base, "check": {"compiled": true, "correct": null, "status": "task_stochastic", "reason": "the task's reference is stochastic", "arch": "sm_90", "task_stochastic": true, "precision": "fp32", "tolerance": "calibrated"}}
{$base, "check": {"compiled": true, "correct": false, "status": "incorrect", "reason": "warm call: outputs.0: relative error norm over the calibrated bound", "arch": "sm_90", "precision": "fp32", "tolerance": "calibrated"}}
JSON
"$RC" --no-store < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
rc=$?
echo "reward-calc exit $rc"
python3 - "$T/out.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 2, recs
stoch, incorrect = recs
v = (stoch.get("reward") or {}).get("value")
assert v not in (-1, -1.0), "task_stochastic scored %r" % (v,)
assert "error" in stoch and "task_stochastic" in json.dumps(stoch["error"]), stoch
print("ok   task_stochastic: no reward, error %s" % json.dumps(stoch["error"])[:200])
assert incorrect["reward"]["value"] == -1, incorrect
print("ok   incorrect: -1")
PY
# The record is valid against the check schema (with a python3 that has jsonschema).
SPY=python3
for py in python3 /usr/bin/python3; do "$py" -c "import jsonschema" 2>/dev/null && { SPY=$py; break; }; done
"$SPY" - "$CA_SRC/schemas/check.schema.json" "$T/in.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
try:
    import jsonschema
except ImportError:
    print("skip schema: no python3 jsonschema")
    sys.exit(0)
schema = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    jsonschema.validate(json.loads(line)["check"], schema)
bad = json.loads(open(sys.argv[2]).readline())["check"]
bad["correct"] = False
try:
    jsonschema.validate(bad, schema)
    print("FAIL a task_stochastic check with correct false validated")
    sys.exit(1)
except jsonschema.ValidationError:
    pass
print("ok   check schema: task_stochastic with correct null, not false")
PY
# Where the flag comes from: ops-synth import runs the reference from two RNG states (the CPU worker).
cp "$CA_SRC/tests/worker/fixtures/stochastic_dropout.py" "$CA_SRC/tests/worker/fixtures/linear_relu.py" "$T/"
"$CA_BIN/ops-synth" import --no-store --device cpu "$T/stochastic_dropout.py" "$T/linear_relu.py" \
  > "$T/tasks.jsonl" 2> "$T/import.err" || { echo "FAIL ops-synth import: $(tail -3 "$T/import.err")"; fails=$((fails + 1)); }
python3 - "$T/tasks.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
flags = {json.loads(l)["name"]: json.loads(l).get("stochastic") for l in open(sys.argv[1])}
assert flags == {"stochastic_dropout": True, "linear_relu": False}, flags
print("ok   ops-synth import: stochastic %s" % flags)
PY
[ $fails -eq 0 ] && echo "stochastic_reward: all passed" || echo "stochastic_reward: $fails failed"
exit $((fails > 0))
