#!/usr/bin/env bash
# ops-synth generate: the bar (1000 tiny tasks, seed 7: < 10 s, byte-identical, >= 60 op classes,
# mix within 3 points, all parse, >= 27 of the first 30 run on CPU torch with the declared shapes),
# the CI check (2,000 tiny tasks: mix within 2 points, unique, all parse, 100 run), the schema,
# sharding, and the usage errors.
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch (set CUDA_AGENT_PYTHON)"

"$OS" --help | grep -q "Example:" || fail "--help has no example"
"$OS" generate --help | grep -q -- "--sizes" || fail "generate --help"
set +e; "$OS" generate --sizes huge --no-store >/dev/null 2>&1; rc=$?; set -e
[ "$rc" = 1 ] || fail "bad --sizes should exit 1, got $rc"
set +e; "$OS" generate --ops NoSuchOp --no-store >/dev/null 2>"$T/err"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q NoSuchOp "$T/err" || fail "unknown --ops should exit 1 naming it (rc $rc)"

# The bar.
start=$(date +%s.%N)
"$OS" generate -n 1000 --seed 7 --sizes tiny --no-store > "$T/a.jsonl" 2>"$T/a.err"
end=$(date +%s.%N)
secs=$(python3 -c "print(round($end - $start, 2))")
python3 -c "import sys; sys.exit(0 if $secs < 10 else 1)" || fail "generate -n 1000 took $secs s"
"$OS" generate -n 1000 --seed 7 --sizes tiny --no-store > "$T/b.jsonl" 2>/dev/null
cmp -s "$T/a.jsonl" "$T/b.jsonl" || fail "two runs with --seed 7 differ"
[ "$(wc -l < "$T/a.jsonl")" = 1000 ] || fail "expected 1000 records"
"$PY" "$HERE/check_tasks.py" "$T/a.jsonl" --mix 3 --min-classes 60 --run 30 --min-ok 27 > "$T/bar.json" \
  || fail "bar: $(cat "$T/bar.json")"
echo "bar: $secs s, $(cat "$T/bar.json")"

# CI: 2,000 tiny tasks, mix within 2 points, unique, all parse, 100 (every 20th) run.
"$OS" generate -n 2000 --seed 2024 --sizes tiny --no-store > "$T/ci.jsonl" 2>/dev/null
"$PY" "$HERE/check_tasks.py" "$T/ci.jsonl" --mix 2 --run 100 --every 20 > "$T/ci.json" || fail "ci: $(cat "$T/ci.json")"
echo "ci: $(cat "$T/ci.json")"

# Every record validates against schemas/task.schema.json.
if "$PY" -c 'import jsonschema' 2>/dev/null; then
  CA_SRC="$CA_SRC" "$PY" "$CA_SRC/tests/validate_schema.py" task "$T/ci.jsonl" || fail "schema"
fi

# Shards are a partition of the unsharded output (by index), in order.
for s in 0 1 2; do "$OS" generate -n 300 --seed 5 --sizes tiny --no-store --shard $s/3 > "$T/s$s.jsonl" 2>/dev/null; done
"$OS" generate -n 300 --seed 5 --sizes tiny --no-store > "$T/all.jsonl" 2>/dev/null
cat "$T"/s?.jsonl | sort > "$T/union"; sort "$T/all.jsonl" > "$T/whole"
cmp -s "$T/union" "$T/whole" || fail "shards 0-2/3 are not a partition of the whole"

# gpu sizes: every estimate within the default 1-100 ms window; the store gets the tasks.
"$OS" generate -n 300 --seed 9 --store "$T/s.db" > "$T/g.jsonl" 2>/dev/null
python3 - "$T/g.jsonl" <<'PY' || fail "gpu sizes"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 300
for r in recs:
    ms = r["estimates"]["eager_ms"]
    assert 1 <= ms <= 100, (r["name"], ms)
PY
[ "$("$CA_BIN/run-store" query --store "$T/s.db" 'SELECT COUNT(*) AS n FROM tasks' 2>/dev/null)" = '{"n":300}' ] \
  || fail "store should hold 300 tasks"

# Speed: at least 1,000 tasks/s on one core (8,000 gpu-sized tasks).
"$OS" generate -n 8000 --seed 1 --no-store 2>"$T/speed.err" >/dev/null
rate=$(grep -o '[0-9]* tasks/s' "$T/speed.err" | cut -d' ' -f1)
[ "${rate:-0}" -ge 1000 ] || fail "generation rate ${rate:-?} tasks/s < 1000"
echo "rate: $rate tasks/s (8000 gpu-sized)"
echo "ops-synth generate: ok"
