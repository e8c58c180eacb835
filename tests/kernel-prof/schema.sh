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
echo "kernel-prof schema: ok"
