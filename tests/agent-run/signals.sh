#!/bin/bash
# Signals (issue 21): SIGTERM (Slurm's scancel and time limit) and SIGINT end agent-run cleanly: the
# sandboxed command and kernel-check are stopped and reaped, the workspaces removed, the episodes in
# progress written as interrupted with their trajectory, the run row closed with the true exit
# status (143, 130). kill -9 leaves a workspace that the next run removes at start, and no
# kernel-check running.
source "$CA_SRC/tests/agent-run/lib.sh"
# run_closed STATUS [EPISODES] MESSAGE: the store's newest run row is closed with STATUS; with
# EPISODES, it holds that many episodes, every one written as interrupted.
run_closed() {
  local status=$1 episodes=$2 what=$3
  "$PY" - "$TMP/store.db" "$status" "$episodes" <<'PYEOF' || fail "$what"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
st, ended = db.execute("SELECT exit_status, ended_at FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()
assert st == int(sys.argv[2]) and ended, (st, ended)
if sys.argv[3]:
    n = db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    assert n == int(sys.argv[3]), n
    for (body,) in db.execute("SELECT body FROM episodes"):
        assert '"stop_reason":"interrupted"' in body.replace(" ", ""), body[:200]
print("store: run closed with", st)
PYEOF
}

command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
for i in 1 2 3 4; do sed "s/t-scale-add/t-$i/" "$TMP/task.jsonl"; done > "$TMP/tasks4.jsonl"
mkdir -p "$TMP/ws"
# wait_for FILE-GLOB: until it exists (10 s).
wait_for() { for _ in $(seq 100); do compgen -G "$1" >/dev/null && return 0; sleep 0.1; done; return 1; }
MARK="agent-run-signal-$$"

# SIGTERM while two episodes (-j 2) are inside a bash command that would sleep for 300 s.
printf '%s\n' '{"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "x"}}]}' \
  "{\"content\": \"\", \"tool_calls\": [{\"name\": \"bash\", \"arguments\": {\"command\": \"echo $MARK > /tmp/m; touch started; exec -a $MARK sleep 300\"}}]}" \
  '{"content": "Done."}' > "$TMP/slow.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/slow.jsonl" --store "$TMP/store.db" --tasks "$TMP/tasks4.jsonl" -j 2 \
  --workspace-dir "$TMP/ws" > "$TMP/term.jsonl" 2> "$TMP/term.err" &
AR=$!
wait_for "$TMP/ws/agent-run.*/ws/started" || fail "the sandboxed command did not start"
sleep 0.5
pgrep -f "^$MARK" >/dev/null || fail "control: the sandboxed sleep is not visible to pgrep"
SECONDS=0
kill -TERM $AR
rc=0; wait $AR || rc=$?
[ "$rc" = 143 ] || { cat "$TMP/term.err"; fail "SIGTERM: exit $rc, expected 143"; }
[ "$SECONDS" -le 10 ] || fail "SIGTERM took ${SECONDS}s"
sleep 0.5
! pgrep -f "^$MARK" >/dev/null || fail "a sandboxed process survived SIGTERM"
[ -z "$(ls "$TMP/ws")" ] || fail "workspaces left after SIGTERM: $(ls "$TMP/ws")"
py '
assert len(recs) == 2, len(recs)
for r in recs:
    e = r["episode"]
    assert e["stop_reason"] == "interrupted", e["stop_reason"]
    res = [x for t in e["turns"] for x in t["tool_results"]]
    assert [x["name"] for x in res] == ["write_file", "bash"], [x["name"] for x in res]
    assert "interrupted" in res[1]["content"] and not res[1]["ok"], res[1]["content"]
    assert r["bundle"]["kernels"] == {"k.cu": "x"}
print("SIGTERM: 2 episodes written as interrupted, with their trajectory")
' "$TMP/term.jsonl"
run_closed 143 "2" "store after SIGTERM"

# SIGINT while kernel-check runs (a stand-in that sleeps and says where it is): it is stopped too.
printf '%s\n' '{"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "__global__ void k() {}"}}, {"name": "verify", "arguments": {}}]}' \
  '{"content": "Done."}' > "$TMP/verify.jsonl"
cat > "$TMP/slow-check.sh" <<SH
#!/bin/bash
echo \$\$ > "$TMP/check.pid"
exec -a "$MARK-check" sleep 300
SH
chmod +x "$TMP/slow-check.sh"
rm -f "$TMP/store.db"
CA_KERNEL_CHECK="$TMP/slow-check.sh" "$CA_BIN/agent-run" --policy "replay:$TMP/verify.jsonl" --store "$TMP/store.db" \
  --tasks "$TMP/task.jsonl" --workspace-dir "$TMP/ws" > "$TMP/int.jsonl" 2> "$TMP/int.err" &
AR=$!
wait_for "$TMP/check.pid" || fail "kernel-check did not start"
sleep 0.3
kill -0 "$(cat "$TMP/check.pid")" || fail "control: the kernel-check stand-in is not running"
kill -INT $AR
rc=0; wait $AR || rc=$?
[ "$rc" = 130 ] || { cat "$TMP/int.err"; fail "SIGINT: exit $rc, expected 130"; }
! kill -0 "$(cat "$TMP/check.pid")" 2>/dev/null || fail "kernel-check survived SIGINT"
[ -z "$(ls "$TMP/ws")" ] || fail "workspaces left after SIGINT: $(ls "$TMP/ws")"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "interrupted", e["stop_reason"]
v = e["turns"][0]["tool_results"][1]
assert v["name"] == "verify" and not v["ok"] and "verify interrupted" in v["content"], v
print("SIGINT: kernel-check stopped, episode written as interrupted")
' "$TMP/int.jsonl"
run_closed 130 "1" "store after SIGINT"

# SIGTERM while agent-run waits on its input (a pipe that stays open): it still ends at once.
rm -f "$TMP/store.db"
mkfifo "$TMP/fifo"
sleep 30 > "$TMP/fifo" &
HOLD=$!
"$CA_BIN/agent-run" --policy "replay:$TMP/verify.jsonl" --store "$TMP/store.db" --tasks "$TMP/fifo" \
  --workspace-dir "$TMP/ws" > "$TMP/idle.jsonl" 2> "$TMP/idle.err" &
AR=$!
sleep 1
SECONDS=0
kill -TERM $AR
rc=0; wait $AR || rc=$?
kill $HOLD 2>/dev/null || true
[ "$rc" = 143 ] || { cat "$TMP/idle.err"; fail "SIGTERM while reading: exit $rc, expected 143"; }
[ "$SECONDS" -le 5 ] || fail "SIGTERM while reading took ${SECONDS}s"
run_closed 143 "0" "store after SIGTERM while reading"

# kill -9: its workspace stays behind (nothing can run then); the next run removes it at start, and
# leaves a live run's workspace alone.
"$CA_BIN/agent-run" --policy "replay:$TMP/slow.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --workspace-dir "$TMP/ws" > /dev/null 2> "$TMP/k9.err" &
LIVE=$!
"$CA_BIN/agent-run" --policy "replay:$TMP/slow.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --workspace-dir "$TMP/ws" > /dev/null 2> "$TMP/k9.err" &
AR=$!
wait_for "$TMP/ws/agent-run.*.$AR.*/ws/started" || fail "the kill -9 victim did not start"
wait_for "$TMP/ws/agent-run.*.$LIVE.*/ws/started" || fail "the live run did not start"
kill -9 $AR; wait $AR 2>/dev/null || true
compgen -G "$TMP/ws/agent-run.*.$AR.*" >/dev/null || fail "control: kill -9 left no workspace (nothing to clean)"
sleep 0.5
echo '{"content": "Done."}' > "$TMP/done.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/done.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --workspace-dir "$TMP/ws" > "$TMP/after.jsonl" 2> "$TMP/after.err" || fail "the run after kill -9 failed: $(cat "$TMP/after.err")"
grep -q "removed 1 stale workspace" "$TMP/after.err" || fail "no stale workspace removed: $(cat "$TMP/after.err")"
! compgen -G "$TMP/ws/agent-run.*.$AR.*" >/dev/null || fail "the dead run's workspace is still there"
compgen -G "$TMP/ws/agent-run.*.$LIVE.*" >/dev/null || fail "the live run's workspace was removed"
kill -TERM $LIVE; wait $LIVE 2>/dev/null || true
[ -z "$(ls "$TMP/ws")" ] || fail "workspaces left: $(ls "$TMP/ws")"
echo "kill -9: the stale workspace was removed by the next run, the live one kept"

# kill -9 while kernel-check runs: kernel-check goes with agent-run (it is not left computing).
rm -f "$TMP/check.pid"
CA_KERNEL_CHECK="$TMP/slow-check.sh" "$CA_BIN/agent-run" --policy "replay:$TMP/verify.jsonl" --no-store \
  --tasks "$TMP/task.jsonl" --workspace-dir "$TMP/ws" > /dev/null 2>&1 &
AR=$!
wait_for "$TMP/check.pid" || fail "kernel-check did not start"
sleep 0.3
kill -0 "$(cat "$TMP/check.pid")" || fail "control: the kernel-check stand-in is not running"
kill -9 $AR; wait $AR 2>/dev/null || true
for _ in $(seq 20); do kill -0 "$(cat "$TMP/check.pid")" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$(cat "$TMP/check.pid")" 2>/dev/null || fail "kernel-check outlived agent-run's kill -9"
echo "kill -9: kernel-check ended with agent-run"
echo "signals: ok"
