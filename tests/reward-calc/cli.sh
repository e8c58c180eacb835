#!/usr/bin/env bash
# reward-calc at the command line: --help and man page, rewards land in the store (one run row,
# one reward row per record), real output validates against schemas/reward.schema.json, and the
# schema rejects a broken section (so the validation can fail).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
export PATH="$CA_BIN:$PATH"
tmp=$T

reward-calc --help > "$tmp/help"
grep -q 'Example:' "$tmp/help" || fail "--help has no example"
for opt in --scheme --margin --compile-baseline --violation-penalty --allow-unprofiled --config --strict --shard; do
  grep -q -- "$opt" "$tmp/help" || fail "--help does not document $opt"
done
reward-calc --version | grep -q '^reward-calc ' || fail "--version"
if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$CA_SRC/man/reward-calc.1" > "$tmp/man" 2>/dev/null || fail "man page does not render"
  grep -q 'milestone' "$tmp/man" || fail "man page lacks the milestone scheme"
fi

in="$CA_SRC/tests/reward-calc/golden/milestone-bar/in.jsonl"
reward-calc --store "$tmp/run.db" --allow-unprofiled -i "$in" -o "$tmp/out.jsonl" 2> "$tmp/err"
grep -q 'rewards (milestone): -1 x2, 1 x4, 2 x1, 3 x1' "$tmp/err" || fail "summary line: $(cat "$tmp/err")"
[[ $(wc -l < "$tmp/out.jsonl") == 9 ]] || fail "expected 9 records out"
rows=$(run-store query --store "$tmp/run.db" "SELECT candidate_id, value, scheme FROM rewards ORDER BY candidate_id")
[[ $(echo "$rows" | wc -l) == 8 ]] || fail "expected 8 reward rows (the bad record has none): $rows"
echo "$rows" | grep -q '"candidate_id":"c5-6pct-both","value":3.0,"scheme":"milestone"' || fail "c5 row: $rows"
run-store query --store "$tmp/run.db" "SELECT tool, exit_status FROM runs" | grep -q '"tool":"reward-calc","exit_status":0' \
  || fail "no run row"

# A record without candidate_id can't be stored: bad record with a store, fine without one.
echo '{"check":{"correct":false}}' | reward-calc --store "$tmp/run.db" 2>/dev/null | grep -q '"field":"candidate_id"' \
  || fail "candidate_id not required with a store"
echo '{"check":{"correct":false}}' | reward-calc --no-store | grep -q '"value":-1' || fail "--no-store scoring"

# Sharding: the two halves partition the input.
a=$(reward-calc --no-store --allow-unprofiled --shard 0/2 -i "$in" 2>/dev/null | wc -l)
b=$(reward-calc --no-store --allow-unprofiled --shard 1/2 -i "$in" 2>/dev/null | wc -l)
[[ $((a + b)) == 9 ]] || fail "shards 0/2 + 1/2 give $a + $b records, expected 9"

py=$PY
if "$py" -c 'import jsonschema' 2>/dev/null; then
  for d in "$CA_SRC"/tests/reward-calc/golden/*/; do
    grep -q '"reward"' "$d/out.jsonl" 2>/dev/null || continue
    "$py" "$CA_SRC/tests/validate_schema.py" reward "$d/out.jsonl" || fail "schema: $d"
  done
  echo '{"reward":{"value":4,"scheme":"milestone","reason":"x","time_us":1,"margin":0.05}}' > "$tmp/bad.jsonl"
  if "$py" "$CA_SRC/tests/validate_schema.py" reward "$tmp/bad.jsonl" 2>/dev/null; then fail "schema accepts a broken section"; fi
else
  fail "no Python with jsonschema for the schema check (set CUDA_AGENT_PYTHON)"
fi
echo "reward-calc cli: ok" >&2
