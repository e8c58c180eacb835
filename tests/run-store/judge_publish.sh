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
  # The health checks are stand-ins that answer at once: wait for both services to have written
  # their stores (they say "serving"), however slowly the interpreter starts.
  for _ in $(seq 200); do
    [ "$(cat "$T"/tmp/ca-judge.*/*.out 2>/dev/null | grep -c serving)" = 2 ] && break
    sleep 0.1
  done
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
rm -rf "$T"/tmp/ca-judge.*

# Public on purpose only (issue 32: the example bound 0.0.0.0 with no secret): --bind 0.0.0.0 without
# a secret is refused; with --secret-file the services get --public and the file, and the secret
# itself is on no command line (any user of the node reads those in /proc): neither the services'
# nor the health checks' (health needs none).
set +e; bash "$CA_SRC/examples/judge-node.sh" --urls "$T/pub/open.urls" --bind 0.0.0.0 > /dev/null 2> "$T/node.err"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "needs --secret-file" "$T/node.err" || fail "--bind 0.0.0.0 without a secret: exit $rc: $(cat "$T/node.err")"
secret=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
printf '%s\n' "$secret" > "$T/secret" && chmod 600 "$T/secret"
printf '#!/bin/sh\necho "$*" >> "%s/argv.log"\nexit 0\n' "$T" > "$T/bin/curl"
rm -f "$T/bin/kernel-check" "$T/bin/kernel-prof"  # links to the stand-in: each becomes a script logging its argv
cat > "$T/bin/kernel-check" <<SH
#!/bin/sh
echo "\$0 \$*" >> "$T/argv.log"
exec "$T/bin/fake-service" "\$@"
SH
cp "$T/bin/kernel-check" "$T/bin/kernel-prof"
chmod +x "$T/bin/kernel-check" "$T/bin/kernel-prof"
rm -f "$T/pub/node.urls"
bash "$CA_SRC/examples/judge-node.sh" --urls "$T/pub/node.urls" --store-dir "$T/pub" --bind 0.0.0.0 --secret-file "$T/secret" \
  2> "$T/node.err" & pid=$!
for _ in $(seq 100); do [ -s "$T/pub/node.urls" ] && break; sleep 0.1; done
[ -s "$T/pub/node.urls" ] || fail "judge-node.sh --bind 0.0.0.0 --secret-file did not come up: $(cat "$T/node.err")"
kill -TERM "$pid"; wait "$pid" || true
grep -q "kernel-check --serve 0.0.0.0:7100 --secret-file $T/secret --public" "$T/argv.log" \
  || fail "the service was not started public with the secret file: $(cat "$T/argv.log")"
grep -q "health" "$T/argv.log" || fail "no health check seen: $(cat "$T/argv.log")"
! grep -q "$secret" "$T/argv.log" || fail "the secret is on a command line: $(grep "$secret" "$T/argv.log" | head -2)"
echo "run_store_judge_publish: ok"
