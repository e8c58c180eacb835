#!/usr/bin/env bash
# The store keeps its promise (issue 21): merging a store into itself is refused at once (it waited
# 30 s and failed "database is locked"); another program's SQLite file is refused untouched (no
# tables added, journal mode kept); a store on read-only media can be queried and summarized; after
# kill -9, every task ops-synth generate put on stdout is in the store (it committed 512 at a time,
# after stdout); the run row of a tool stopped by bad input is closed with its exit status.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
# the read-only-media part takes write permission away: give it back before the temp dir is removed
chmod 755 "$T"; at_exit 'chmod -R u+w "$T" 2>/dev/null'
export CUDA_AGENT_DATA="${CUDA_AGENT_DATA:-$CA_SRC/datasets}"
RS="$CA_BIN/run-store"
OS="$CA_BIN/ops-synth"

printf '%s\n' '{"task_id":"t1","code":"a"}' '{"task_id":"t2","code":"b"}' > "$T/two.jsonl"
"$RS" import --store "$T/s.db" -i "$T/two.jsonl" 2>/dev/null

# 1. merge S S and through a symlink: exit 1 at once, naming the problem, S unchanged.
ln -s "$T/s.db" "$T/link.db"
for target in "$T/s.db" "$T/link.db"; do
  start=$(date +%s)
  set +e; timeout 20 "$RS" merge "$T/s.db" "$target" 2> "$T/err"; rc=$?; set -e
  secs=$(( $(date +%s) - start ))
  [ "$rc" = 1 ] || fail "merge S $target: exit $rc, expected 1: $(cat "$T/err")"
  grep -q "into itself" "$T/err" || fail "merge S $target: unclear message: $(cat "$T/err")"
  [ "$secs" -le 5 ] || fail "merge S $target took $secs s"
done
# Also when S is one input among others: nothing is merged before the refusal.
"$RS" import --store "$T/other.db" -i "$T/two.jsonl" 2>/dev/null
set +e; "$RS" merge "$T/s.db" "$T/other.db" "$T/s.db" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] || fail "merge S A S: exit $rc"
[ "$("$RS" query --store "$T/s.db" 'SELECT COUNT(*) AS n FROM runs')" = '{"n":1}' ] || fail "merge S A S merged A first"

# 2. Another program's SQLite file: refused, byte for byte unchanged, no -wal made.
"$PY" - "$T/foreign.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
db.execute("INSERT INTO notes (text) VALUES ('keep me')")
db.commit()
db.close()
PY
sum=$(sha256sum < "$T/foreign.db")
for cmd in "$RS import --store $T/foreign.db -i $T/two.jsonl" "$RS init --store $T/foreign.db" \
           "$OS generate -n 3 --sizes tiny --store $T/foreign.db"; do
  set +e
  # shellcheck disable=SC2086
  $cmd > /dev/null 2> "$T/err"
  rc=$?
  set -e
  [ "$rc" = 3 ] || fail "$cmd: exit $rc, expected 3: $(cat "$T/err")"
  grep -q "not a cuda-agent run store" "$T/err" || fail "$cmd: unclear message: $(cat "$T/err")"
  [ "$(sha256sum < "$T/foreign.db")" = "$sum" ] || fail "$cmd changed the foreign file"
  [ ! -e "$T/foreign.db-wal" ] || fail "$cmd switched the foreign file to WAL"
done
"$PY" -c '
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type=\"table\"")] == ["notes"]
assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"' "$T/foreign.db" || fail "foreign file changed"

# 3. Read-only media: the store's folder and file not writable, read by a user who cannot write
# them (root ignores the mode bits); and a read-only bind mount where the test may make one.
mkdir "$T/ro"
cp "$T/s.db" "$T/ro/s.db"
chmod 444 "$T/ro/s.db"; chmod 555 "$T/ro"
read_checks() {  # read_checks PREFIX...: query and summary of $T/ro/s.db through PREFIX
  local q
  q=$("$@" "$RS" query --store "$T/ro/s.db" "SELECT COUNT(*) AS n FROM tasks" 2> "$T/err") \
    || fail "query of a read-only store ($*): $(cat "$T/err")"
  [ "$q" = '{"n":2}' ] || fail "read-only query gave $q"
  "$@" "$RS" summary --json --store "$T/ro/s.db" > "$T/sum" 2> "$T/err" || fail "summary of a read-only store ($*): $(cat "$T/err")"
  [ "$(wc -l < "$T/sum")" = 1 ] || fail "read-only summary: $(cat "$T/sum")"
  "$@" "$RS" export tasks --store "$T/ro/s.db" > /dev/null 2> "$T/err" || fail "export of a read-only store: $(cat "$T/err")"
  [ ! -e "$T/ro/s.db-shm" ] || fail "reading made a -shm file on read-only media"
}
ran=0
if [ "$(id -u)" != 0 ]; then
  read_checks env
  ran=1
elif command -v setpriv > /dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  read_checks setpriv --reuid=65534 --regid=65534 --clear-groups
  ran=1
fi
chmod 755 "$T/ro"; chmod 644 "$T/ro/s.db"
ro_mount="mount --bind '$T/mnt' '$T/mnt' && mount -o remount,bind,ro '$T/mnt'"
mkdir "$T/mnt"
cp "$T/s.db" "$T/mnt/s.db"
if [ "$(id -u)" = 0 ] && unshare -m bash -c "$ro_mount && ! touch '$T/mnt/x'" 2>/dev/null; then
  # A private mount namespace: the read-only bind is gone when the command ends.
  unshare -m bash -c "$ro_mount && '$RS' query --store '$T/mnt/s.db' 'SELECT COUNT(*) AS n FROM tasks' && \
    '$RS' summary --json --store '$T/mnt/s.db'" > "$T/mnt.out" 2> "$T/err" || fail "read-only mount: $(cat "$T/err")"
  grep -q '"n":2' "$T/mnt.out" || fail "read-only mount query: $(cat "$T/mnt.out")"
  ran=$((ran + 1))
else
  echo "note: no read-only bind mount here (needs root and mount namespaces)"
fi
[ "$ran" -ge 1 ] || fail "no way to test a read-only store here (not root, no setpriv)"

# 4. kill -9 during ops-synth generate --store: every task on stdout is in the store; the store
# holds at most the one record in flight more.
"$OS" generate -n 20000 --seed 4 --sizes tiny --store "$T/gen.db" > "$T/gen.jsonl" 2>/dev/null &
pid=$!
for _ in $(seq 200); do
  sleep 0.05
  [ "$(wc -l < "$T/gen.jsonl")" -ge 1500 ] && break
done
kill -9 $pid; wait $pid 2>/dev/null || true
"$RS" query --store "$T/gen.db" "SELECT task_id FROM tasks" > "$T/stored.jsonl"
"$PY" - "$T/gen.jsonl" "$T/stored.jsonl" <<'PY' || fail "stdout and store out of step after kill -9"
import json, sys
lines = open(sys.argv[1]).read().split("\n")
emitted = [json.loads(l)["task_id"] for l in lines[:-1]]  # the last piece may be cut
stored = {json.loads(l)["task_id"] for l in open(sys.argv[2])}
assert 1500 <= len(emitted) < 20000, len(emitted)
missing = [t for t in emitted if t not in stored]
assert not missing, "%d emitted tasks missing from the store (of %d)" % (len(missing), len(emitted))
assert len(stored) - len(emitted) <= 1, (len(stored), len(emitted))
print("kill -9: %d emitted, %d stored" % (len(emitted), len(stored)))
PY

# 5. A tool stopped by a bad line closes its run row with its exit status (2), not left open.
printf '%s\n' '{"task_id":"t9","code":"x"}' 'not json' > "$T/bad.jsonl"
set +e; "$OS" import --no-worker --store "$T/imp.db" "$T/bad.jsonl" > /dev/null 2>&1; rc=$?; set -e
[ "$rc" = 2 ] || fail "ops-synth import of a bad line: exit $rc"
st=$("$RS" query --store "$T/imp.db" "SELECT exit_status AS s, ended_at IS NOT NULL AS ended FROM runs")
[ "$st" = '{"s":2,"ended":1}' ] || fail "run row after exit 2: $st"
echo "store_safety: ok"
