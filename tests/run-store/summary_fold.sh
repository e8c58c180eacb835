#!/usr/bin/env bash
# run-store summary: agent-run's locked compile/verify/profile calls (kernel-check and kernel-prof
# runs it started) are folded into the episode's run by the parent each recorded (runs.parent_run_id,
# from CUDA_AGENT_PARENT_RUN), so a stage shows once. Nothing is inferred from times: the pipeline
# stages around it, a one-record run inside agent-run's window, and a second pipeline overlapping the
# first in time stay apart or fold into their own parent.
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
def run(rid, tool, host, start, end, read, parent=None):
    db.execute("INSERT INTO runs (run_id, tool, version, argv, host, started_at, ended_at, exit_status, counts, parent_run_id) "
               "VALUES (?,?,?,?,?,?,?,?,?,?)", (rid, tool, "0.1", json.dumps([tool]), host, t(start),
               None if end is None else t(end), None if end is None else 0,
               None if read is None else json.dumps({"read": read}), parent))
run("import", "run-store", "h1", 0, 1, 2)
run("agent", "agent-run", "h1", 2, 60, 2)
run("agent2", "agent-run", "h1", 3, 59, 1)             # a second pipeline on the same store, same host
run("lc1", "kernel-check", "h1", 5, 6, 1, "agent")     # compile call of episode 1
run("lc2", "kernel-check", "h1", 10, 11, 1, "agent")   # verify call of episode 2 ...
run("lp2", "kernel-prof", "h1", 11.5, 13, 1, "agent")  # ... and its profile call
run("lb1", "kernel-check", "h1", 12, 12.5, 1, "agent2")  # the second pipeline's call, inside both windows
run("pipe", "kernel-check", "h1", 2.001, 61, 2) # agent-run | kernel-check: ends after agent-run
run("inside", "kernel-check", "h1", 20, 21, 1)  # a one-record run inside agent's window, not its child
run("far", "kernel-check", "h2", 20, 21, 1, "agent")  # recorded parent: folded, on any host
run("gone", "kernel-check", "h1", 22, 23, 1, "nowhere")  # a parent not in the store folds nothing
run("self", "kernel-check", "h1", 24, 25, 1, "self")  # a run naming itself is not its own child
run("killed", "kernel-check", "h1", 30, None, None)
run("after", "kernel-check", "h1", 62, 63, 1)   # a later stage over one record
run("reward", "reward-calc", "h1", 64, 65, 2)
for c, r in [("e1", "agent"), ("e2", "agent")]:
    db.execute("INSERT INTO candidates VALUES (?,?,?,?)", (c, "t", r, "{}"))
    db.execute("INSERT INTO episodes VALUES (?,?,?,?)", (c, r, "t", "{}"))
for c, r, ok in [("x1", "lc1", 1), ("x2", "lc2", 1), ("e1", "pipe", 1), ("e2", "pipe", 0), ("x3", "far", 1), ("e1", "after", 1), ("x4", "lb1", 1)]:
    db.execute("INSERT INTO checks VALUES (?,?,?,?,?,?)", (c, r, "t", "passed" if ok else "incorrect", ok, "{}"))
db.execute("INSERT INTO profiles (candidate_id, run_id, task_id, body) VALUES ('x2', 'lp2', 't', '{}')")
db.commit()
PY
"$RS" summary --store "$T/s.db" --json > "$T/sum.jsonl"
python3 - "$T/sum.jsonl" <<'PY' || fail "folded summary: $(cat "$T/sum.jsonl")"
import json, sys
rows = {r["run_id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(rows) == sorted(["import", "agent", "agent2", "pipe", "inside", "gone", "self", "killed", "after", "reward"]), sorted(rows)
a = rows["agent"]
assert (a["locked_calls"], a["locked_checks"], a["locked_profiles"]) == (4, 3, 1), a
assert a["episodes"] == 2 and a["checks"] == 0, a
b = rows["agent2"]
assert (b["locked_calls"], b["locked_checks"], b["locked_profiles"]) == (1, 1, 0), b
assert all(r["locked_calls"] == 0 for k, r in rows.items() if k not in ("agent", "agent2")), rows
assert rows["pipe"]["checks"] == 2 and rows["pipe"]["pass_rate"] == 0.5, rows["pipe"]
PY
"$RS" summary --store "$T/s.db" --table > "$T/table.txt"
[ "$(wc -l < "$T/table.txt")" = 11 ] || fail "table should have a header and 10 runs: $(cat "$T/table.txt")"
head -1 "$T/table.txt" | grep -q "locked$" || fail "table has no locked column: $(head -1 "$T/table.txt")"
grep "^agent " "$T/table.txt" | grep -q " 4$" || fail "agent-run row does not show its 4 locked calls: $(cat "$T/table.txt")"

# The variable itself: a run begun with CUDA_AGENT_PARENT_RUN set records it; one begun without does not.
CUDA_AGENT_PARENT_RUN=agent "$RS" import --store "$T/s.db" < /dev/null 2>/dev/null
env -u CUDA_AGENT_PARENT_RUN "$RS" import --store "$T/s.db" < /dev/null 2>/dev/null
"$RS" query --store "$T/s.db" "SELECT parent_run_id FROM runs WHERE tool = 'run-store' ORDER BY rowid" > "$T/parents.jsonl"
python3 - "$T/parents.jsonl" <<'PY' || fail "parent_run_id from the environment: $(cat "$T/parents.jsonl")"
import json, sys
p = [json.loads(l)["parent_run_id"] for l in open(sys.argv[1])]
assert p == [None, "agent", None], p
PY
echo "run_store_summary_fold: ok"
