#!/usr/bin/env bash
# CPU: a check of status task_stochastic (the task's reference is a random draw: kernel-check's rule
# for it), task_insensitive (a constant answer would pass) or task_ill_conditioned (the reference's
# own fp32 error is over every bound) or task_uncalibrated (no float64 run: no calibrated bound) is
# not a verdict against the candidate, nor is reference_error
# (the reference worker failed: the task's or the node's fault): reward-calc gives it
# no reward and no -1 and passes it on with an error section, while an incorrect check of the same
# candidate gets -1. The check schema accepts those records (correct null, not false). ops-synth
# import flags a dropout task stochastic, a big-bias task insensitive, a task constant on its own
# draws (not on a variant) insensitive, a cancellation ill-conditioned, code that cannot run in
# float64 with ill_conditioned null and the error, code that names float32 calibrated (its dtypes
# lifted to float64), and a linear one none of these.
set -u
RC="$CA_BIN/reward-calc"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
base='"task_id": "t-drop", "candidate_id": "c1", "schema": "cuda-agent/candidate/v1"'
cat > "$T/in.jsonl" <<JSON
{$base, "check": {"compiled": true, "correct": null, "status": "task_stochastic", "reason": "the task's reference is stochastic", "arch": "sm_90", "task_stochastic": true, "precision": "fp32", "tolerance": "calibrated"}}
{$base, "check": {"compiled": true, "correct": false, "status": "incorrect", "reason": "warm call: outputs.0: relative error norm over the calibrated bound", "arch": "sm_90", "precision": "fp32", "tolerance": "calibrated"}}
{$base, "check": {"compiled": true, "correct": null, "status": "task_insensitive", "reason": "the task's reference hardly depends on its inputs", "arch": "sm_90", "task_insensitive": true, "precision": "fp32", "tolerance": "calibrated", "reference": {"mode": "train", "stochastic": false, "from": "worker", "insensitive": true, "ill_conditioned": false, "insensitive_evidence": {"checks": [{"against": "seed 1", "rel_l2": 7e-8, "within": true}]}, "task_record_said": {"insensitive": false}}}, "prof": {"time_us": 1.0}}
{$base, "check": {"compiled": true, "correct": null, "status": "task_ill_conditioned", "reason": "the task's fp32 reference is 0.79 from its float64 run", "arch": "sm_90", "task_ill_conditioned": true, "precision": "fp32", "tolerance": "calibrated", "reference": {"mode": "train", "stochastic": false, "from": "worker", "insensitive": false, "ill_conditioned": true, "ill_conditioned_evidence": {"cap_rel_l2": 0.05, "fp32_err_rel_l2": 0.79}}}}
{$base, "check": {"compiled": true, "correct": null, "status": "reference_error", "reason": "reference worker: reference: worker_died: the worker process ended", "arch": "sm_90", "reference_error": true, "precision": "fp32", "tolerance": "calibrated"}}
{$base, "check": {"compiled": true, "correct": null, "status": "node_error", "reason": "init: cuMemAlloc(scratch.h): out of memory", "arch": "sm_90", "node_error": true, "precision": "fp32", "tolerance": "calibrated"}}
{$base, "check": {"compiled": true, "correct": null, "status": "task_uncalibrated", "reason": "the task's reference could not run in float64", "arch": "sm_90", "task_uncalibrated": true, "precision": "fp32", "tolerance": "calibrated", "reference": {"mode": "train", "stochastic": false, "from": "worker", "insensitive": false, "ill_conditioned": null, "ill_conditioned_evidence": {"cap_rel_l2": 0.05, "error": "calibrate: RuntimeError: expected m1 and m2 to have the same dtype"}}}, "prof": {"time_us": 1.0}}
JSON
"$RC" --no-store < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
rc=$?
echo "reward-calc exit $rc"
python3 - "$T/out.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 7, recs
stoch, incorrect, insensitive, ill, referr, nodeerr, uncal = recs
for name, rec in (("task_insensitive", insensitive), ("task_ill_conditioned", ill), ("reference_error", referr),
                  ("node_error", nodeerr), ("task_uncalibrated", uncal)):
    v = (rec.get("reward") or {}).get("value")
    # A constant-output kernel timed at 1 us on an insensitive task: still nothing.
    assert v is None, "%s scored %r" % (name, v)
    assert "error" in rec and name in json.dumps(rec["error"]), rec
    print("ok   %s: no reward, no -1, error %s" % (name, json.dumps(rec["error"])[:160]))
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
lines = open(sys.argv[2]).read().splitlines()
for i in (2, 3, 4, 5, 6):
    bad = json.loads(lines[i])["check"]
    bad["correct"] = False
    try:
        jsonschema.validate(bad, schema)
        print("FAIL a %s check with correct false validated" % bad["status"])
        sys.exit(1)
    except jsonschema.ValidationError:
        pass
    bad = json.loads(lines[i])["check"]
    del bad[bad["status"]]
    try:
        jsonschema.validate(bad, schema)
        print("FAIL a %s check without its flag validated" % bad["status"])
        sys.exit(1)
    except jsonschema.ValidationError:
        pass
print("ok   check schema: task_insensitive, task_ill_conditioned, reference_error, node_error and task_uncalibrated with correct null and their flag")
PY
# Where the flag comes from: ops-synth import runs the reference from two RNG states (the CPU worker).
# The same load measures whether a constant would pass (insensitive) and whether the fp32 reference
# is over every bound from float64 (ill_conditioned), with the evidence.
for f in stochastic_dropout linear_relu insensitive_bias ill_conditioned constant_on_draws no_float64 float32_spelled diluted_block closure_submodule; do cp "$CA_SRC/tests/worker/fixtures/$f.py" "$T/"; done
"$CA_BIN/ops-synth" import --no-store --device cpu "$T/stochastic_dropout.py" "$T/linear_relu.py" \
  "$T/insensitive_bias.py" "$T/ill_conditioned.py" "$T/constant_on_draws.py" "$T/no_float64.py" "$T/float32_spelled.py" \
  "$T/diluted_block.py" "$T/closure_submodule.py" \
  > "$T/tasks.jsonl" 2> "$T/import.err" || { echo "FAIL ops-synth import: $(tail -3 "$T/import.err")"; fails=$((fails + 1)); }
python3 - "$T/tasks.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
recs = {json.loads(l)["name"]: json.loads(l) for l in open(sys.argv[1])}
flags = {n: r.get("stochastic") for n, r in recs.items()}
assert flags == {"stochastic_dropout": True, "linear_relu": False, "insensitive_bias": False,
                 "ill_conditioned": False, "constant_on_draws": False, "no_float64": False, "float32_spelled": False,
                 "diluted_block": False, "closure_submodule": False}, flags
print("ok   ops-synth import: stochastic %s" % flags)
got = {n: (r["reference"].get("insensitive"), r["reference"].get("ill_conditioned")) for n, r in recs.items()}
assert got == {"stochastic_dropout": (False, None), "linear_relu": (False, False), "insensitive_bias": (True, False),
               "ill_conditioned": (False, True), "constant_on_draws": (True, False), "no_float64": (False, None),
               "float32_spelled": (False, False), "diluted_block": (False, False),
               "closure_submodule": (False, False)}, got
assert recs["insensitive_bias"]["reference"]["insensitive_evidence"]["checks"][0]["within"] is True
assert recs["ill_conditioned"]["reference"]["ill_conditioned_evidence"]["fp32_err_rel_l2"] > 0.05
assert "stochastic" in recs["stochastic_dropout"]["reference"]["ill_conditioned_evidence"]["error"]
# Constant on its own draws, moved by a variant: insensitive by the calibrated bound on seed 1 alone.
ev = recs["constant_on_draws"]["reference"]["insensitive_evidence"]
assert ev["own_draws"]["rel_l2"] <= ev["own_draws"]["calibrated_bound_rel_l2"] and not ev["checks"][1]["within"], ev
assert "own_draws" not in recs["linear_relu"]["reference"]["insensitive_evidence"]
# No float64 run: the error is the evidence kernel-check's task_uncalibrated names.
err = recs["no_float64"]["reference"]["ill_conditioned_evidence"]["error"]
assert "float64" in err and "float32 inputs only" in err and "lifted" in err, err
assert recs["no_float64"]["reference"]["ill_conditioned_evidence"]["out_of_memory"] is False  # the task's, not the node's
# Code that names float32 is calibrated by the second run, with the dtypes it names lifted.
assert recs["float32_spelled"]["reference"]["ill_conditioned_evidence"]["fp32_err_rel_l2"] >= 0
# A lambda over a submodule: the float64 model is built again (a deep copy ran the original's layers).
ev = recs["closure_submodule"]["reference"]["ill_conditioned_evidence"]
assert "error" not in ev and ev["fp32_err_rel_l2"] < 1e-5, ev
# The part of each output's norm the inputs move (the calibrated floor's scale): ~1 for a Linear +
# ReLU, ~1e-4 beside a block of 1000s (0.1 * tanh on half the elements).
vf = {n: recs[n]["reference"]["insensitive_evidence"]["checks"][0]["varying_fraction"]["outputs.0"]
      for n in ("linear_relu", "diluted_block")}
assert 0.5 < vf["linear_relu"] <= 1 and 1e-5 < vf["diluted_block"] < 1e-3, vf
print("ok   ops-synth import: (insensitive, ill_conditioned) %s; varying fractions %s" % (got, vf))
PY
SPY2=python3
for py in python3 /usr/bin/python3; do "$py" -c "import jsonschema" 2>/dev/null && { SPY2=$py; break; }; done
if "$SPY2" -c "import jsonschema" 2>/dev/null; then
  CA_SRC="$CA_SRC" "$SPY2" "$CA_SRC/tests/validate_schema.py" task "$T/tasks.jsonl" || { echo "FAIL imported records: task schema"; fails=$((fails + 1)); }
fi
[ $fails -eq 0 ] && echo "stochastic_reward: all passed" || echo "stochastic_reward: $fails failed"
exit $((fails > 0))
