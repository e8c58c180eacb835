#!/bin/bash
# The bash tool's sandbox: a write outside the workspace, a network connection, a fork bomb, an
# infinite loop, a sleep, an output flood, a memory hog and a symlink out of the workspace are each
# contained and reported to the model; the episode goes on after each.
source "$CA_SRC/tests/agent-run/lib.sh"
command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
# A listener on the host's loopback: reachable from here, not from the sandbox.
"$PY" -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    c, _ = s.accept(); c.sendall(b"HELLO\n"); c.close()
' "$TMP/lport" & MOCK_PID=$!
for _ in $(seq 50); do [ -s "$TMP/lport" ] && break; sleep 0.1; done
LPORT=$(cat "$TMP/lport")
exec 3<>/dev/tcp/127.0.0.1/$LPORT && head -1 <&3 | grep -q HELLO || fail "control: the host cannot reach its own listener"
exec 3<&-
MARK="agent-run-escape-$$"
"$PY" - "$TMP/script.jsonl" "$LPORT" "$MARK" <<'PY'
import json, sys
path, port, mark = sys.argv[1], sys.argv[2], sys.argv[3]
def bash(cmd): return {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": cmd}}]}
turns = [
  bash("echo pwned > /usr/%s; echo pwned > /etc/%s; echo pwned > /tmp/%s && ls /tmp; echo pwned > ../%s; ls /; id -u" % (mark, mark, mark, mark)),
  {"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "../" + mark, "content": "x"}},
                                 {"name": "write_file", "arguments": {"path": "/tmp/" + mark, "content": "x"}},
                                 {"name": "read_file", "arguments": {"path": "/etc/hostname"}}]},
  bash("ln -s /etc/passwd kernels/leak.cu; ln -s /etc kernels/etc; echo linked"),
  {"content": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "kernels/leak.cu"}},
                                 {"name": "write_file", "arguments": {"path": "kernels/etc/" + mark, "content": "x"}}]},
  bash("exec 3<>/dev/tcp/127.0.0.1/%s && echo CONNECTED || echo BLOCKED; getent hosts example.com || echo NODNS" % port),
  bash(":(){ :|:& };:"),
  bash("while :; do :; done"),
  bash("sleep 1000"),
  bash("yes"),
  bash("/usr/bin/python3 -c 'x = bytearray(6 << 30); print(len(x))'"),
  bash("echo still alive"),
]
with open(path, "w") as f:
    for t in turns: f.write(json.dumps(t) + "\n")
PY
SECONDS=0
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --bash-timeout 15 --bash-cpu 1 --bash-procs 64 --bash-memory 2048 --bash-output 4096 --sandbox-uid 61000 \
  > "$TMP/out.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run failed"; }
echo "episode took ${SECONDS}s"
for p in /usr /etc /tmp /work "$TMP" "$(dirname "$TMP")"; do
  [ ! -e "$p/$MARK" ] || fail "a file escaped the sandbox: $p/$MARK"
done
# Nothing the fork bomb started survives.
if [ "$(id -u)" = 0 ]; then
  left=$( (ps -u 61000 -o pid= || true) | wc -l)
  [ "$left" = 0 ] || fail "$left processes of the sandbox user still run"
fi
py '
import json
e = recs[0]["episode"]
out = [x["content"] for t in e["turns"] for x in t["tool_results"]]
def show(i, what): print("%-14s %s" % (what, out[i].strip().splitlines()[-1][:110]))
assert "Read-only file system" in out[0] and "/etc/" in out[0], out[0]
assert "workspace" in out[0] and "home" not in out[0].split("[exit")[0].split(), out[0]
show(0, "write outside:")
assert out[1].startswith("error:") and "outside the workspace" in out[1], out[1]
assert out[2].startswith("error:") and "outside the workspace" in out[2], out[2]
assert out[3].startswith("error:") and "outside the workspace" in out[3], out[3]
assert out[5].startswith("error:") and "outside the workspace" in out[5], out[5]
assert out[6].startswith("error:") and "outside the workspace" in out[6], out[6]
show(1, "write_file ..:")
assert "BLOCKED" in out[7] and "CONNECTED" not in out[7] and "NODNS" in out[7], out[7]
show(7, "network:")
assert "wall-time limit" in out[8] or "Resource temporarily unavailable" in out[8], out[8]
show(8, "fork bomb:")
assert "CPU-time limit" in out[9], out[9]
show(9, "busy loop:")
assert "wall-time limit" in out[10], out[10]
show(10, "sleep 1000:")
assert "output cut at 4096 bytes" in out[11] and len(out[11]) < 4500, out[11][-200:]
show(11, "yes:")
assert "MemoryError" in out[12], out[12]
show(12, "6 GiB alloc:")
assert "still alive" in out[13], out[13]
assert "leak.cu" not in recs[0]["bundle"]["kernels"], recs[0]["bundle"]
assert any(r.startswith("kernels/leak.cu: a symlink, refused") for r in e["bundle_refused"]), e.get("bundle_refused")
assert "root:" not in json.dumps(recs[0])
print("symlink to /etc/passwd refused, left out of the bundle:", e["bundle_refused"])
' "$TMP/out.jsonl"
echo "sandbox: ok"
