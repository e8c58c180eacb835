#!/usr/bin/env bash
# run-store CLI: help, import, bad lines, merge idempotence, query/export/summary, kill -9 safety.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
RS="$CA_BIN/run-store"

"$RS" --help | grep -q "Example:" || fail "--help has no example"
"$RS" --version | grep -q "run-store" || fail "--version"
set +e; "$RS" frobnicate 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "unknown subcommand should exit 1, got $rc"

# Line 2 is not JSON: exit 2, the message names line 2, line 1 is kept.
printf '{"task_id":"t1","code":"a"}\n{not json\n{"task_id":"t3","code":"c"}\n' > "$T/bad.jsonl"
set +e; "$RS" import --store "$T/bad.db" -i "$T/bad.jsonl" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] || fail "bad line should exit 2, got $rc"
grep -q "line 2" "$T/err" || fail "error does not name line 2: $(cat "$T/err")"
n=$("$RS" query --store "$T/bad.db" "SELECT COUNT(*) AS n FROM tasks" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["n"])')
[ "$n" = 1 ] || fail "record before the bad line lost (n=$n)"

# A record without ids is skipped with a warning, or fatal under --strict.
printf '{"task_id":"t1","code":"a"}\n{"x":1}\n' > "$T/noid.jsonl"
"$RS" import --store "$T/noid.db" -i "$T/noid.jsonl" 2> "$T/err"
grep -q "line 2: task_id" "$T/err" || fail "missing field not named: $(cat "$T/err")"
set +e; "$RS" import --strict --store "$T/noid2.db" -i "$T/noid.jsonl" 2>/dev/null; rc=$?; set -e
[ "$rc" = 2 ] || fail "--strict should exit 2, got $rc"

# Two shards merged twice give the same counts.
for s in 0 1; do
  "$PY" - "$s" > "$T/shard$s.jsonl" <<'PY'
import json, sys
s = int(sys.argv[1])
for i in range(50):
    print(json.dumps({"task_id": f"t{s}-{i}", "code": f"x{i}"}))
    print(json.dumps({"task_id": f"t{s}-{i}", "candidate_id": f"c{s}-{i}",
                      "check": {"status": "passed" if i % 2 else "incorrect", "correct": bool(i % 2)},
                      "reward": {"value": 1 if i % 2 else -1, "scheme": "milestone"}}))
PY
  "$RS" import --store "$T/shard$s.db" -i "$T/shard$s.jsonl" 2>/dev/null
done
"$RS" merge "$T/merged.db" "$T/shard0.db" "$T/shard1.db" 2>/dev/null
first=$("$RS" query --store "$T/merged.db" "SELECT (SELECT COUNT(*) FROM tasks) AS t, (SELECT COUNT(*) FROM checks) AS c, (SELECT COUNT(*) FROM runs) AS r")
"$RS" merge "$T/merged.db" "$T/shard0.db" "$T/shard1.db" 2>/dev/null
second=$("$RS" query --store "$T/merged.db" "SELECT (SELECT COUNT(*) FROM tasks) AS t, (SELECT COUNT(*) FROM checks) AS c, (SELECT COUNT(*) FROM runs) AS r")
[ "$first" = "$second" ] || fail "merge twice changed counts: $first vs $second"
[ "$first" = '{"t":100,"c":100,"r":2}' ] || fail "merged counts wrong: $first"

# export and summary are JSON when piped.
[ "$("$RS" export tasks --store "$T/merged.db" | wc -l)" = 100 ] || fail "export tasks"
"$RS" summary --store "$T/merged.db" | "$PY" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert len(rows) == 2, rows
for r in rows:
    assert r["checks"] == 50 and abs(r["pass_rate"] - 0.5) < 1e-9 and r["reward_mean"] == 0.0, r
' || fail "summary"
"$RS" summary --table --store "$T/merged.db" | head -1 | grep -q "pass" || fail "summary table"

# kill -9 in the middle of an import: the store opens cleanly and holds a prefix of the input.
"$PY" -c '
import json
for i in range(200000):
    print(json.dumps({"task_id": "k%06d" % i, "code": "y" * 200}))
' > "$T/big.jsonl"
"$RS" import --store "$T/kill.db" -i "$T/big.jsonl" 2>/dev/null &
pid=$!
for _ in $(seq 100); do
  sleep 0.1
  [ -f "$T/kill.db-wal" ] && [ "$(stat -c %s "$T/kill.db-wal")" -gt 100000 ] && break
done
kill -9 $pid; wait $pid 2>/dev/null || true
"$RS" query --store "$T/kill.db" "PRAGMA integrity_check" | grep -q '"ok"' || fail "integrity check after kill -9"
n=$("$RS" query --store "$T/kill.db" "SELECT COUNT(*) AS n, MAX(task_id) AS last FROM tasks")
"$PY" - "$n" <<'PY' || fail "kill -9 store is not a clean prefix: $n"
import json, sys
r = json.loads(sys.argv[1])
assert 0 < r["n"] < 200000, r          # killed mid-way
assert r["last"] == "k%06d" % (r["n"] - 1), r  # every committed record, in order, none missing
PY
echo "run_store: ok"
