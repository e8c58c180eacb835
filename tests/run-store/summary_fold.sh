#!/usr/bin/env bash
# run-store summary: agent-run's locked compile/verify/profile calls (kernel-check and kernel-prof
# runs it started, one record each) are folded into the episode's run, so a stage shows once; the
# pipeline stages around it, a run on another host and a killed run stay rows of their own. A run
# that records its parent (runs.parent_run_id, when the store has that column) is folded by it.
set -euo pipefail
RS="$CA_BIN/run-store"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$RS" init --store "$T/s.db" 2>/dev/null
python3 - "$T/s.db" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def t(s):  # seconds after 10:00:00 as the store writes times
    return "2026-12-01T10:%02d:%06.3fZ" % (int(s) // 60, s % 60)
def run(rid, tool, host, start, end, read):
    db.execute("INSERT INTO runs (run_id, tool, version, argv, host, started_at, ended_at, exit_status, counts) "
               "VALUES (?,?,?,?,?,?,?,?,?)", (rid, tool, "0.1", json.dumps([tool]), host, t(start),
               None if end is None else t(end), None if end is None else 0,
               None if read is None else json.dumps({"read": read})))
run("import", "run-store", "h1", 0, 1, 2)
run("agent", "agent-run", "h1", 2, 60, 2)
run("lc1", "kernel-check", "h1", 5, 6, 1)       # compile call of episode 1
run("lc2", "kernel-check", "h1", 10, 11, 1)     # verify call of episode 2 ...
run("lp2", "kernel-prof", "h1", 11.5, 13, 1)    # ... and its profile call
run("pipe", "kernel-check", "h1", 2.001, 61, 2) # agent-run | kernel-check: ends after agent-run
run("far", "kernel-check", "h2", 20, 21, 1)     # another host
run("killed", "kernel-check", "h1", 30, None, None)
run("after", "kernel-check", "h1", 62, 63, 1)   # a later stage over one record
run("reward", "reward-calc", "h1", 64, 65, 2)
for c, r in [("e1", "agent"), ("e2", "agent")]:
    db.execute("INSERT INTO candidates VALUES (?,?,?,?)", (c, "t", r, "{}"))
    db.execute("INSERT INTO episodes VALUES (?,?,?,?)", (c, r, "t", "{}"))
for c, r, ok in [("x1", "lc1", 1), ("x2", "lc2", 1), ("e1", "pipe", 1), ("e2", "pipe", 0), ("x3", "far", 1), ("e1", "after", 1)]:
    db.execute("INSERT INTO checks VALUES (?,?,?,?,?,?)", (c, r, "t", "passed" if ok else "incorrect", ok, "{}"))
db.execute("INSERT INTO profiles (candidate_id, run_id, task_id, body) VALUES ('x2', 'lp2', 't', '{}')")
db.commit()
PY
"$RS" summary --store "$T/s.db" --json > "$T/sum.jsonl"
python3 - "$T/sum.jsonl" <<'PY' || fail "folded summary: $(cat "$T/sum.jsonl")"
import json, sys
rows = {r["run_id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(rows) == sorted(["import", "agent", "pipe", "far", "killed", "after", "reward"]), sorted(rows)
a = rows["agent"]
assert (a["locked_calls"], a["locked_checks"], a["locked_profiles"]) == (3, 2, 1), a
assert a["episodes"] == 2 and a["checks"] == 0, a
assert all(r["locked_calls"] == 0 for k, r in rows.items() if k != "agent"), rows
assert rows["pipe"]["checks"] == 2 and rows["pipe"]["pass_rate"] == 0.5, rows["pipe"]
PY
"$RS" summary --store "$T/s.db" --table > "$T/table.txt"
[ "$(wc -l < "$T/table.txt")" = 8 ] || fail "table should have a header and 7 runs: $(cat "$T/table.txt")"
head -1 "$T/table.txt" | grep -q "locked$" || fail "table has no locked column: $(head -1 "$T/table.txt")"
grep "^agent " "$T/table.txt" | grep -q " 3$" || fail "agent-run row does not show its 3 locked calls: $(cat "$T/table.txt")"

# A store whose runs record their parent (the column the child tools would fill from
# CUDA_AGENT_PARENT_RUN): the recorded parent decides, on any host; a parent that is not in the store
# folds nothing.
cp "$T/s.db" "$T/p.db"
python3 - "$T/p.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("ALTER TABLE runs ADD COLUMN parent_run_id TEXT")
db.execute("UPDATE runs SET parent_run_id = 'agent' WHERE run_id = 'far'")
db.execute("UPDATE runs SET parent_run_id = 'gone' WHERE run_id = 'lc1'")
db.commit()
PY
"$RS" summary --store "$T/p.db" --json | python3 -c '
import json, sys
rows = {r["run_id"]: r for r in map(json.loads, sys.stdin)}
assert sorted(rows) == sorted(["import", "agent", "lc1", "pipe", "killed", "after", "reward"]), sorted(rows)
a = rows["agent"]
assert (a["locked_calls"], a["locked_checks"], a["locked_profiles"]) == (3, 2, 1), a
' || fail "recorded parent_run_id"
echo "run_store_summary_fold: ok"
