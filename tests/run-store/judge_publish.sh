#!/usr/bin/env bash
# examples/judge-node.sh publishes its services' stores whole: stand-in services (no GPU here) write a
# store whose rows are still in the -wal and are killed -9 at SIGTERM, as an OOM-killed service is.
# The published copy must have the tables and rows, the local folder goes only after every copy
# verified; a destination that cannot be written (or a damaged store) keeps the folder and exits 3.
set -euo pipefail
RS="$CA_BIN/run-store"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$T/bin" "$T/tmp" "$T/pub"
# The stand-in service: finds --store, writes two tasks left in the -wal, then waits; SIGTERM kills it -9.
cat > "$T/bin/fake-service" <<'PY'
#!/usr/bin/env python3
import os, signal, sqlite3, subprocess, sys, time
args = sys.argv[1:]
store = args[args.index("--store") + 1]
subprocess.run([os.environ["RUN_STORE"], "init", "--store", store], check=True, stderr=subprocess.DEVNULL)
if os.environ.get("FAKE_DAMAGE"):
    open(store, "r+b").write(b"this is no longer an SQLite file")
else:
    db = sqlite3.connect(store, isolation_level=None)
    db.execute("PRAGMA wal_autocheckpoint=0")
    for t in ("t1", "t2"):
        db.execute("INSERT INTO tasks (task_id, run_id, body) VALUES (?, 'r', '{}')", (t,))
signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGKILL))
print("serving", flush=True)
while True:
    time.sleep(0.1)
PY
chmod +x "$T/bin/fake-service"
ln -s fake-service "$T/bin/kernel-check"
ln -s fake-service "$T/bin/kernel-prof"
printf '#!/bin/sh\nexit 0\n' > "$T/bin/curl" && chmod +x "$T/bin/curl"   # every health check answers
export PATH="$T/bin:$PATH" RUN_STORE="$RS" TMPDIR="$T/tmp" CUDA_VISIBLE_DEVICES=0
host=$(hostname -f 2>/dev/null || hostname)

# run_node DEST: starts judge-node.sh, waits for its URL file, stops it with SIGTERM; prints its status.
run_node() {
  local rc=0
  bash "$CA_SRC/examples/judge-node.sh" --urls "$T/pub/node.urls" --store-dir "$1" 2> "$T/node.err" & local pid=$!
  for _ in $(seq 100); do [ -s "$T/pub/node.urls" ] && break; sleep 0.1; done
  [ -s "$T/pub/node.urls" ] || fail "judge-node.sh did not come up: $(cat "$T/node.err")"
  sleep 0.5
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  echo "$rc"
}

rc=$(run_node "$T/pub")
[ "$rc" = 0 ] || fail "judge-node.sh exited $rc: $(cat "$T/node.err")"
for svc in check prof; do
  db="$T/pub/$host-$svc-gpu0.db"
  [ -f "$db" ] || fail "no published $svc store: $(ls "$T/pub")"
  n=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM tasks").fetchone()[0])' "$db") \
    || fail "the published $svc store has no tasks table"
  [ "$n" = 2 ] || fail "the published $svc store has $n tasks, the -wal held 2"
done
[ -z "$(ls -A "$T/tmp")" ] || fail "the local folder was not removed after a verified publish: $(ls -A "$T/tmp")"

# A destination that cannot be written: exit 3, the local folder (with the stores) kept and named.
rc=$(run_node "$T/nowhere/at/all")
[ "$rc" = 3 ] || fail "judge-node.sh exited $rc publishing to a missing folder: $(cat "$T/node.err")"
grep -q "kept in $T/tmp/ca-judge" "$T/node.err" || fail "the kept folder is not named: $(cat "$T/node.err")"
ls "$T"/tmp/ca-judge.*/check-gpu0.db > /dev/null || fail "the local stores were removed after a failed publish"
rm -rf "$T"/tmp/ca-judge.*

# A damaged store is not published as if whole: exit 3, folder kept.
rc=$(FAKE_DAMAGE=1 run_node "$T/pub")
[ "$rc" = 3 ] || fail "judge-node.sh exited $rc with a damaged store: $(cat "$T/node.err")"
ls "$T"/tmp/ca-judge.*/check-gpu0.db > /dev/null || fail "the damaged store's folder was removed"
echo "run_store_judge_publish: ok"
