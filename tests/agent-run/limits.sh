#!/bin/bash
# Bounded resources (issue 21): sandbox and episode limits are checked at start-up (exit 1 naming the
# flag, before anything runs; never uid 0 for the sandbox); workspaces are made on disk under
# --workspace-dir ($TMPDIR by default), not in /dev/shm; a command that writes past the workspace cap
# (--workspace-mib, /workspace and /tmp together, many files each under the per-file limit) is ended,
# the workspace is trimmed and the model told, and the episode goes on.
source "$CA_SRC/tests/agent-run/lib.sh"
command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
echo '{"content": "Done."}' > "$TMP/done.jsonl"
for bad in "--sandbox-uid 0" "--sandbox-uid -5" "--bash-output -1" "--bash-output 0" "--bash-timeout 0" \
           "--bash-cpu -1" "--bash-memory 0" "--bash-procs 0" "--bash-procs -3" "--bash-file-size 0" \
           "--workspace-mib 0" "--episode-timeout 0" "--episode-timeout nan" "--episode-timeout -1" \
           "--locked-timeout 0" "--max-turns 0" "--max-context -1" "--tool-output-chars 0" \
           "--workspace-dir $TMP/nonexistent" "--sandbox-uid 2000000000 -j 2"; do
  rc=0
  # shellcheck disable=SC2086
  "$CA_BIN/agent-run" --policy "replay:$TMP/done.jsonl" --no-store --tasks "$TMP/task.jsonl" $bad \
    > "$TMP/bad.out" 2> "$TMP/bad.err" || rc=$?
  flag=${bad%% *}
  [ "$rc" = 1 ] || fail "$bad: exit $rc, expected 1 ($(cat "$TMP/bad.err"))"
  grep -q -- "$flag" "$TMP/bad.err" || fail "$bad: the error does not name $flag: $(cat "$TMP/bad.err")"
  [ ! -s "$TMP/bad.out" ] || fail "$bad: an episode ran"
done
echo "20 bad limits refused at start-up, each naming its flag"

# The workspace is on disk, under TMPDIR by default, and gone after the run. The sandbox runs as the
# default uid, not root.
mkdir -p "$TMP/tmpdir"
cat > "$TMP/where.jsonl" <<'JSON'
{"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "id -u; sleep 3"}}]}
{"content": "Done."}
JSON
TMPDIR="$TMP/tmpdir" "$CA_BIN/agent-run" --policy "replay:$TMP/where.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/where.out" 2> "$TMP/where.err" &
AR=$!
seen=
for _ in $(seq 50); do
  ls "$TMP"/tmpdir/agent-run.*/ws/SKILL.md >/dev/null 2>&1 && { seen=1; break; }
  sleep 0.1
done
ls /dev/shm | grep -q "^agent-run" && fail "a workspace in /dev/shm: $(ls /dev/shm)"
wait $AR || fail "agent-run failed: $(cat "$TMP/where.err")"
[ -n "$seen" ] || fail "no workspace appeared under TMPDIR"
[ -z "$(ls "$TMP/tmpdir")" ] || fail "the workspace was left behind: $(ls "$TMP/tmpdir")"
if [ "$(id -u)" = 0 ]; then
  py 'c = recs[0]["episode"]["turns"][0]["tool_results"][0]["content"]; assert c.split()[0] == "60000", c; print("sandbox uid:", c.split()[0])' "$TMP/where.out"
fi

# The cap: 40 files of 4 MiB (each under the 64 MiB file limit) in a 32 MiB workspace; then 40 MiB in
# /tmp; then a write_file while the workspace is fine again; the episode goes on to the end.
"$PY" - "$TMP/cap.jsonl" <<'PY'
import json, sys
def bash(c): return {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": c}}]}
turns = [
  bash("for i in $(seq 40); do head -c 4M /dev/zero > f$i || exit 9; sleep 0.05; done; echo wrote all"),
  bash("du -sk /workspace | cut -f1; ls"),
  bash("head -c 40M /dev/zero > /tmp/big; echo wrote tmp"),
  {"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "__global__ void k() {}"}},
                                 {"name": "bash", "arguments": {"command": "ls /tmp | wc -l; echo still alive"}}]},
  {"content": "Done."},
]
with open(sys.argv[1], "w") as f:
    for t in turns: f.write(json.dumps(t) + "\n")
PY
"$CA_BIN/agent-run" --policy "replay:$TMP/cap.jsonl" --no-store --tasks "$TMP/task.jsonl" --workspace-dir "$TMP" \
  --workspace-mib 32 > "$TMP/cap.out" 2> "$TMP/cap.err" || fail "agent-run failed: $(cat "$TMP/cap.err")"
py '
e = recs[0]["episode"]
res = [x for t in e["turns"] for x in t["tool_results"]]
c = [x["content"] for x in res]
assert not res[0]["ok"] and "wrote all" not in c[0], c[0]
assert "over its cap of 32768 KiB (32 MiB)" in c[0] and "killed:" in c[0] and "workspace cap (--workspace-mib)" in c[0] and "removed: f" in c[0], c[0]
kib = int(c[1].split()[0])
assert kib <= 32 * 1024, c[1]
# The trim is final: nothing the killed command started wrote after it (what it removed stays
# gone), and the next command finds the workspace under the cap (no second trim).
import re
gone = set(re.findall(r"\b(f\d+) \(", c[0].split("removed:")[1]))
listed = set(c[1].split()[1:])
assert gone and not (gone & listed), (gone, listed)
assert res[1]["ok"] and "workspace cap" not in c[1], c[1]
assert not res[2]["ok"] and "over its cap" in c[2], c[2]
assert res[3]["ok"] and res[4]["ok"] and "still alive" in c[4] and c[4].split()[0] == "0", c[3:]
assert e["stop_reason"] == "done" and recs[0]["bundle"]["kernels"] == {"k.cu": "__global__ void k() {}"}
print("cap:", c[0].strip().splitlines()[-1][:160])
print("after: %d KiB in the workspace; /tmp over the cap:" % kib, c[2].strip().splitlines()[-1][:100])
' "$TMP/cap.out"
ls "$TMP" | grep -q '^agent-run\.' && fail "a workspace was left in $TMP"
echo "limits: ok"
