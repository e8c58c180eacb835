#!/usr/bin/env bash
# The store's copies are whole and its readers honest: `copy` carries a killed writer's -wal; a store
# replaced or removed under a running tool is an error; `merge` refuses a damaged input naming it (and
# OUT keeps nothing of it); an input of schema 1 merges by column; `report` skips a truncated body
# with a warning naming the row and reads only what it shows (its memory does not grow with the
# bodies); `report --table` and `summary --table` escape control characters from task data.
set -euo pipefail
RS="$CA_BIN/run-store"
export RS
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cd "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect CODE PATTERN CMD...
  local want=$1 pattern=$2 rc=0
  shift 2
  "$@" > out.txt 2> err.txt || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, expected $want: $(tail -3 err.txt)"
  grep -qE -- "$pattern" err.txt || fail "$*: stderr does not match '$pattern': $(tail -3 err.txt)"
}
count() { python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$@"; }

task() { printf '{"task_id":"%s","name":"%s","data_source":"%s","code":"x"}\n' "$1" "$2" "$3"; }
prof() {  # prof CANDIDATE TASK SPEEDUP [PAD_BYTES]
  python3 - "$@" <<'PY'
import json, sys
c, t, s = sys.argv[1], sys.argv[2], float(sys.argv[3])
pad = int(sys.argv[4]) if len(sys.argv) > 4 else 0
print(json.dumps({"candidate_id": c, "task_id": t, "check": {"status": "passed", "correct": True},
                  "prof": {"status": "timed", "time_us": 10.0, "speedup_vs_eager": s, "speedup_vs_compile": s,
                           "samples": "x" * pad}}))
PY
}

# --- copy: a writer killed -9 with its rows only in the -wal. A plain cp of the file has no tables.
"$RS" init --store live.db 2>/dev/null
(python3 - live.db <<'PY'
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("INSERT INTO tasks (task_id, run_id, body) VALUES ('t1', 'r', '{\"task_id\":\"t1\"}')")
db.execute("INSERT INTO tasks (task_id, run_id, body) VALUES ('t2', 'r', '{\"task_id\":\"t2\"}')")
os.kill(os.getpid(), signal.SIGKILL)
PY
) || true  # killed -9 on purpose
[ -s live.db-wal ] || fail "the killed writer left no -wal (the case is not reproduced)"
"$RS" copy live.db pub.db 2> err.txt || fail "copy of a killed writer's store: $(cat err.txt)"
[ "$(count pub.db 'SELECT COUNT(*) FROM tasks')" = 2 ] || fail "the copy lacks the -wal's rows"
[ ! -e pub.db-wal ] || fail "the copy is not one self-contained file"
[ "$(count pub.db 'PRAGMA journal_mode')" = delete ] || fail "the copy is still in WAL mode"
# A source that is not SQLite, or missing: named, exit 2 / 3, the destination untouched.
head -c 8192 /dev/urandom > garbage.db
echo keep > dest.db
expect 2 "copy: 'garbage.db'" "$RS" copy garbage.db dest.db
expect 3 "no store at 'missing.db'" "$RS" copy missing.db dest.db
[ "$(cat dest.db)" = keep ] || fail "a failed copy touched the destination"
mkdir ro && chmod 555 ro
if [ ! -w ro ]; then  # (root writes anywhere)
  expect 3 "copy: cannot create 'ro/x.db" "$RS" copy pub.db ro/x.db
fi
ls | grep -q '\.tmp\.' && fail "a temp copy was left behind: $(ls)"

# --- A store replaced (or removed) under a running tool: an error, not rows written into a ghost.
"$RS" init --store s.db 2>/dev/null
"$RS" init --store other.db 2>/dev/null
mkfifo feed
rc=0
( "$RS" import --store s.db < feed > /dev/null 2> replaced.err ) & pid=$!
exec 3> feed
task a A lvl#1 >&3
sleep 1
mv other.db s.db
task b B lvl#1 >&3
exec 3>&-
wait $pid || rc=$?
[ "$rc" = 3 ] || fail "import into a replaced store exited $rc: $(cat replaced.err)"
grep -q "store 's.db' was replaced by another file while this tool ran" replaced.err || fail "$(cat replaced.err)"
# (Record a, written before the mv, may still reach the new file through the old -wal SQLite leaves
# beside a moved database; record b, read after it, must be nowhere.)
[ "$(count s.db "SELECT COUNT(*) FROM tasks WHERE task_id = 'b'")" = 0 ] || fail "a row went into the new store"
[ "$(grep -c 'was replaced' replaced.err)" = 1 ] || fail "the error is not said once: $(cat replaced.err)"
rc=0
( "$RS" import --store gone.db < feed > /dev/null 2> removed.err ) & pid=$!
exec 3> feed
task a A lvl#1 >&3
sleep 1
rm gone.db gone.db-wal gone.db-shm 2>/dev/null || true
task b B lvl#1 >&3
exec 3>&-
wait $pid || rc=$?
[ "$rc" = 3 ] && grep -q "was removed while this tool ran" removed.err || fail "import into a removed store: $rc $(cat removed.err)"

# --- merge: damaged inputs are refused naming them; OUT gets nothing of them and is not blamed.
{ task t1 one "kernelbench#level1"; prof c1 t1 2.0; } | "$RS" import --store good.db 2>/dev/null
cp good.db trunc.db
python3 - trunc.db <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE profiles SET body = substr(body, 1, 20)")
db.commit()
PY
expect 2 "input store 'trunc.db' is damaged: table profiles row 1: body is not valid JSON" "$RS" merge m.db trunc.db
[ "$(count m.db 'SELECT COUNT(*) FROM profiles')" = 0 ] || fail "merge took rows from a damaged input"
grep -q "'m.db'" err.txt && fail "merge blamed OUT for a damaged input: $(cat err.txt)"
expect 2 "input store 'garbage.db'" "$RS" merge m.db garbage.db
grep -q "'m.db'" err.txt && fail "merge blamed OUT for a garbage input: $(cat err.txt)"
# Pages damaged in the middle of the file: SQLite's own check finds it.
python3 - good.db pages.db <<'PY'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1]); dst = sqlite3.connect(sys.argv[2])
src.backup(dst); dst.execute("PRAGMA journal_mode=DELETE"); dst.close()
raw = bytearray(open(sys.argv[2], "rb").read())
page = 4096
for p in range(2, len(raw) // page):  # every page but the header's: b-tree headers become garbage
    raw[p * page: p * page + 16] = b"\xff" * 16
open(sys.argv[2], "wb").write(bytes(raw))
PY
expect 2 "input store 'pages.db' is damaged" "$RS" merge m.db pages.db
"$RS" merge m.db good.db 2>/dev/null || fail "a good input does not merge after the refused ones"
[ "$(count m.db 'SELECT COUNT(*) FROM profiles')" = 1 ] || fail "the good input's profile is not merged"
# An input of schema 1 (before runs.parent_run_id) merges by column name.
python3 - v1.db <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE runs (run_id TEXT PRIMARY KEY, tool TEXT NOT NULL, version TEXT NOT NULL, argv TEXT NOT NULL,
  host TEXT NOT NULL, gpu TEXT, started_at TEXT NOT NULL, ended_at TEXT, exit_status INTEGER, counts TEXT);
CREATE TABLE tasks (task_id TEXT PRIMARY KEY, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE candidates (candidate_id TEXT PRIMARY KEY, task_id TEXT, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE checks (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, status TEXT,
  correct INTEGER, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE profiles (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, time_us REAL,
  speedup_vs_eager REAL, speedup_vs_compile REAL, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE baselines (baseline_key TEXT PRIMARY KEY, task_id TEXT NOT NULL, gpu TEXT, driver TEXT,
  torch_version TEXT, method TEXT, time_us REAL, run_id TEXT, body TEXT NOT NULL);
CREATE TABLE rewards (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, value REAL,
  scheme TEXT, body TEXT NOT NULL, PRIMARY KEY (candidate_id, run_id));
CREATE TABLE episodes (candidate_id TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT, body TEXT NOT NULL,
  PRIMARY KEY (candidate_id, run_id));
CREATE TABLE ppo_steps (step_id TEXT NOT NULL, run_id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (step_id, run_id));
CREATE TABLE filter_results (task_id TEXT NOT NULL, run_id TEXT NOT NULL, kept INTEGER NOT NULL,
  reason TEXT, body TEXT NOT NULL, PRIMARY KEY (task_id, run_id));
INSERT INTO runs VALUES ('old', 'kernel-check', '0.1', '[]', 'h', NULL, '2026-01-01T00:00:00.000Z', NULL, 0, NULL);
INSERT INTO tasks VALUES ('t9', 'old', '{"task_id":"t9"}');
PRAGMA user_version = 1;
""")
PY
"$RS" merge m.db v1.db 2> err.txt || fail "a schema-1 input does not merge: $(cat err.txt)"
[ "$(count m.db "SELECT COUNT(*) FROM runs WHERE run_id = 'old' AND parent_run_id IS NULL")" = 1 ] || fail "schema-1 runs row"

# --- report: a truncated body is skipped with a warning naming the row; the rest is reported.
cp good.db rep.db
{ task t2 two "kernelbench#level1"; prof c2 t2 3.0; } | "$RS" import --store rep.db 2>/dev/null
python3 - rep.db <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE profiles SET body = substr(body, 1, 30) WHERE candidate_id = 'c2'")
db.execute("UPDATE tasks SET body = substr(body, 1, 10) WHERE task_id = 't1'")
db.commit()
PY
"$RS" report --store rep.db --json > rep.jsonl 2> rep.err || fail "report failed as a whole: $(cat rep.err)"
grep -q "profiles row [0-9]* (candidate c2, run [0-9a-f]*): body is not valid JSON" rep.err || fail "no warning naming the profile row: $(cat rep.err)"
grep -q "tasks row [0-9]* (task t1): body is not valid JSON" rep.err || fail "no warning naming the task row: $(cat rep.err)"
python3 -c '
import json, sys
rows = {r["level"]: r for r in map(json.loads, open("rep.jsonl"))}
assert rows["all"]["tasks"] == 2, rows
' || fail "report rows: $(cat rep.jsonl)"

# --- report streams: 60 profiles of 2 MB each (120 MB of bodies) stay far from its memory.
python3 - > big.jsonl <<'PY'
import json
for i in range(60):
    print(json.dumps({"task_id": "b%d" % i, "name": "big%d" % i, "data_source": "kernelbench#level2", "code": "x"}))
    print(json.dumps({"candidate_id": "bc%d" % i, "task_id": "b%d" % i, "check": {"status": "passed", "correct": True},
                      "prof": {"status": "timed", "time_us": 5.0, "speedup_vs_eager": 1.5, "speedup_vs_compile": 1.2,
                               "samples": [0.5] * 500000}}))
PY
"$RS" import --store big.db < big.jsonl 2>/dev/null
rm big.jsonl
/usr/bin/time -f "%M" -o rss.txt "$RS" report --store big.db --json > big.out 2>/dev/null || fail "report of big bodies failed"
rss_kb=$(tail -1 rss.txt)
[ "$rss_kb" -lt 80000 ] || fail "report held the bodies: max RSS ${rss_kb} kB for 120 MB of profiles"
grep -q '"tasks":60' big.out || fail "big report: $(cat big.out)"

# Bodies of a size that stays in the C heap (20 KB; the 2 MB ones above are mmap'd): 8,000 of them,
# 160 MB. SQLite reads each body whole, and from the heap the rows the report keeps took the freed
# buffers' holes, so report grew by what it read: about the store's size (1 GB for 50,000 such rows).
python3 - big20k.db <<'PY'
import json, sqlite3, subprocess, sys, os
subprocess.run([os.environ["RS"], "init", "--store", sys.argv[1]], check=True, stderr=subprocess.DEVNULL)
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO runs (run_id, tool, version, argv, host, started_at) VALUES ('r1', 'kernel-prof', 'x', '[]', 'h', '2026-12-01T00:00:00Z')")
samples = [0.123456789012345] * 1000
for c in range(8000):
    t = "t%d" % (c % 800)
    if c < 800:
        db.execute("INSERT INTO tasks VALUES (?, 'r1', ?)", (t, json.dumps({"task_id": t, "data_source": "kernelbench#level%d" % (c % 3 + 1), "code": "x"})))
    s = 1 + (c % 7) / 3
    db.execute("INSERT INTO profiles VALUES (?, 'r1', ?, 10.0, ?, ?, ?)", ("c%d" % c, t, s, s, json.dumps(
        {"status": "timed", "correct": True, "time_us": 10.0, "speedup_vs_eager": s, "speedup_vs_compile": s, "samples": samples})))
db.commit()
PY
/usr/bin/time -f "%M" -o rss.txt "$RS" report --store big20k.db --json > big20k.out 2>/dev/null || fail "report of 20 KB bodies failed"
rss_kb=$(tail -1 rss.txt)
[ "$rss_kb" -lt 60000 ] || fail "report grew with the bodies it read: max RSS ${rss_kb} kB for 160 MB of 20 KB profiles"
grep -q '"level":"all".*"tasks":800' big20k.out || fail "20 KB report: $(tail -1 big20k.out)"
rm -f big20k.db

# --- Terminal output: control characters from task data are escaped.
esc=$'\e'
python3 - <<'PY' | "$RS" import --store term.db 2>/dev/null
import json
level = "evil\x1b]0;pwned\x07\x1b[31m#1"
print(json.dumps({"task_id": "t5", "name": "n", "data_source": level, "code": "x"}))
print(json.dumps({"candidate_id": "c5", "task_id": "t5", "check": {"status": "passed", "correct": True},
                  "prof": {"status": "timed", "time_us": 1.0, "speedup_vs_eager": 2.0, "speedup_vs_compile": 2.0}}))
PY
"$RS" report --store term.db --table > table.txt 2>/dev/null
grep -q "$esc" table.txt && fail "report --table printed a raw escape: $(cat -v table.txt)"
grep -q $'\a' table.txt && fail "report --table printed a raw BEL"
grep -qF 'evil\x1b]0;pwned\x07\x1b[31m#1' table.txt || fail "the level is not shown escaped: $(cat -v table.txt)"
# The HTML page too: a raw ESC or BEL is invalid HTML and reaches a terminal that prints the page.
"$RS" report --store term.db --html page.html > /dev/null 2>&1 || fail "report --html of hostile task data"
grep -q "$esc" page.html && fail "report --html wrote a raw escape"
grep -q $'\a' page.html && fail "report --html wrote a raw BEL"
grep -qF 'evil\x1b]0;pwned\x07\x1b[31m#1' page.html || fail "the level is not shown escaped in the page"
python3 - term.db <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE runs SET tool = 'x' || char(27) || '[2J' || char(155) || 'y'")  # ESC and the C1 CSI (U+009B)
db.commit()
PY
"$RS" summary --store term.db --table > sum.txt
grep -q "$esc" sum.txt && fail "summary --table printed a raw escape: $(cat -v sum.txt)"
grep -qF 'x\x1b[2J\u009by' sum.txt || fail "summary --table: $(cat -v sum.txt)"
echo "run_store_hostile: ok"
