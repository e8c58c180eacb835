#!/usr/bin/env bash
# The prof schema against real kernel-prof output (records from the H200 run of gpu.sh, kept in
# fixtures/prof_h200.jsonl), and against broken copies it must reject.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
V="$CA_SRC/tests/validate_schema.py"
S="$CA_SRC/tests/kernel-prof/fixtures/prof_h200.jsonl"
$PY "$V" prof "$S" || fail "the stored device records do not validate"
n=$($PY -c 'import json,sys; print(sum("prof" in json.loads(l) for l in open(sys.argv[1])))' "$S")
[ "$n" = 3 ] || fail "expected 3 profiled records in the sample, got $n"
# Each broken copy must be rejected.
for mutation in 'del p["time_us"]' 'p["status"] = "fast"' 'p["time_us"]["median"] = "x"' \
                'del p["baselines"]' 'p["kernels"][0]["grid"] = [1]' 'del p["gpu"]["uuid"]'; do
  $PY - "$S" "$mutation" > "$T/bad.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
r = next(r for r in recs if r.get("prof", {}).get("status") == "timed")
p = r["prof"]
exec(sys.argv[2])
print(json.dumps(r))
PY
  if $PY "$V" prof "$T/bad.jsonl" 2>/dev/null; then fail "schema accepted a record with: $mutation"; fi
done
# prof.timed_by (kernel-prof --resume): a stored sample that carries it validates; mistyped, rejected.
$PY - "$S" > "$T/timed_by.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "prof" in r:
        r["prof"]["timed_by"] = "0123456789abcdef"
    print(json.dumps(r))
PY
$PY "$V" prof "$T/timed_by.jsonl" || fail "stored records with prof.timed_by do not validate"
for bad in 5 '"timed-by-me"' null; do
  $PY -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "prof" in r: r["prof"]["timed_by"] = json.loads(sys.argv[2])
    print(json.dumps(r))' "$T/timed_by.jsonl" "$bad" > "$T/bad.jsonl"
  if $PY "$V" prof "$T/bad.jsonl" 2>/dev/null; then fail "schema accepted prof.timed_by = $bad"; fi
done
$PY -c 'import json,sys; p=json.load(open(sys.argv[1]))["properties"]["timed_by"]; assert p["type"] == "string" and p["description"]' \
  "$CA_SRC/schemas/prof.schema.json" || fail "prof.schema.json does not describe timed_by"
# node_error (the GPU could not hold the timing): what profile() writes validates; correct must be
# null beside it, node_error is required, and a timed or failed profile still needs its times.
$PY - "$S" > "$T/node_error.jsonl" <<'PY'
import json, sys
r = next(json.loads(l) for l in open(sys.argv[1]) if json.loads(l).get("prof", {}).get("status") == "timed")
p = r["prof"]
r["prof"] = {"status": "node_error", "correct": None, "node_error": True, "notes": [], "profile_s": 1.5,
             "reason": "GPU memory (setup): out of memory", "gpu": p["gpu"], "timed_by": "0123456789abcdef"}
print(json.dumps(r))
PY
$PY "$V" prof "$T/node_error.jsonl" || fail "a node_error profile does not validate"
for mutation in 'p["correct"] = True' 'del p["node_error"]' 'del p["reason"]' 'p["status"] = "failed"'; do
  $PY -c 'import json,sys
r = json.loads(open(sys.argv[1]).read()); p = r["prof"]
exec(sys.argv[2]); print(json.dumps(r))' "$T/node_error.jsonl" "$mutation" > "$T/bad.jsonl"
  if $PY "$V" prof "$T/bad.jsonl" 2>/dev/null; then fail "schema accepted a node_error profile with: $mutation"; fi
done
echo "kernel-prof schema: ok"
