#!/bin/bash
# The workspace is read without following symlinks (issue 16): an agent that makes kernels/ a symlink
# to a host folder or to /etc, kernels/x.cu a symlink to /etc/passwd, or plan.yaml one to /etc/shadow
# gets a tool error naming the path from compile/verify/profile, kernel-check never runs on it, no
# host content reaches the record or the log, and the episode finishes with its record. A regular
# bundle afterwards compiles (the control: the refusals are not the tools being broken).
source "$CA_SRC/tests/agent-run/lib.sh"
command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
SECRET="host-secret-$$-$RANDOM"
mkdir -p "$TMP/hostdir"
echo "$SECRET" > "$TMP/hostdir/secret.cu"
echo "dims: {}  # $SECRET" > "$TMP/hostdir/plan.yaml"
"$PY" - "$TMP/script.jsonl" "$TMP/hostdir" <<'PY'
import json, sys
path, hostdir = sys.argv[1], sys.argv[2]
def turn(*calls): return {"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
def bash(c): return ("bash", {"command": c})
K = 'extern "C" __global__ void k(float* o) { o[0] = 1; }'
turns = [
  turn(bash("rm -rf kernels && ln -s %s kernels && ls -l kernels" % hostdir), ("compile", {})),
  turn(bash("rm kernels && ln -s /etc kernels"), ("verify", {}), ("list_files", {"path": "kernels"})),
  turn(bash("rm kernels && mkdir kernels && ln -s /etc/passwd kernels/x.cu"), ("profile", {}),
       ("read_file", {"path": "kernels/x.cu"})),
  turn(bash("rm kernels/x.cu && rm plan.yaml && ln -s /etc/shadow plan.yaml"),
       ("write_file", {"path": "kernels/k.cu", "content": K}), ("compile", {})),
  turn(bash("rm plan.yaml"), ("write_file", {"path": "plan.yaml", "content": "forward: []\n"}), ("compile", {})),
  # Left so for the final bundle read: kernels/x.cu -> /etc/passwd, plan.yaml -> /etc/shadow.
  turn(bash("ln -s /etc/passwd kernels/x.cu && rm plan.yaml && ln -s /etc/shadow plan.yaml && echo left")),
  {"content": "Done."},
]
with open(path, "w") as f:
    for t in turns: f.write(json.dumps(t) + "\n")
PY
export CA_KERNEL_CHECK="$HERE/fake-kernel-check.sh" CA_KERNEL_PROF="$HERE/fake-kernel-prof.sh" FAKE_LOG="$TMP/calls.log"
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --workspace-dir "$TMP" > "$TMP/out.jsonl" 2> "$TMP/err.txt" || rc=$?
[ "$rc" = 0 ] || { cat "$TMP/err.txt"; fail "agent-run exit $rc, expected 0"; }
for f in "$TMP/out.jsonl" "$TMP/err.txt" "$TMP/calls.log"; do
  [ ! -e "$f" ] || ! grep -q -e 'root:' -e "$SECRET" -e 'daemon:' "$f" || fail "host content in $(basename "$f")"
done
# kernel-check ran once: for the control bundle, never for a refused one.
[ "$(wc -l < "$TMP/calls.log")" = 1 ] || fail "kernel-check ran $(wc -l < "$TMP/calls.log") times, expected 1 (the control)"
grep -q '"k.cu"' "$TMP/calls.log" || fail "the control compile did not get kernels/k.cu"
py '
e = recs[0]["episode"]
res = [x for t in e["turns"] for x in t["tool_results"]]
locked = [x for x in res if x["name"] in ("compile", "verify", "profile")]
assert len(locked) == 5, [x["name"] for x in locked]
expect = ["kernels: a symlink, refused", "kernels: a symlink, refused", "kernels/x.cu: a symlink, refused",
          "plan.yaml: a symlink, refused"]
for x, want in zip(locked, expect):
    assert not x["ok"] and x["content"].startswith("error: " + x["name"] + " refused, nothing was run") and want in x["content"], x
assert locked[4]["ok"] and "\"compiled\": true" in locked[4]["content"], locked[4]
print("refused:", [x["content"][:80] for x in locked[:4]])
# The file tools refuse the same links (they resolve outside the workspace).
other = {x["name"]: x for x in res if x["name"] in ("list_files", "read_file")}
assert not other["list_files"]["ok"] and "outside the workspace" in other["list_files"]["content"], other["list_files"]
assert not other["read_file"]["ok"] and "outside the workspace" in other["read_file"]["content"], other["read_file"]
assert e["stop_reason"] == "done", e["stop_reason"]
b = recs[0]["bundle"]
assert b["plan"] == "" and "x.cu" not in b["kernels"] and "k.cu" in b["kernels"], b
assert any(r.startswith("kernels/x.cu: a symlink") for r in e["bundle_refused"]), e["bundle_refused"]
assert any(r.startswith("plan.yaml: a symlink") for r in e["bundle_refused"]), e["bundle_refused"]
assert [r["tool"] for r in e["results"]] == ["compile", "verify", "profile", "compile", "compile"]
print("final bundle: refused", e["bundle_refused"])
' "$TMP/out.jsonl"
ls "$TMP" | grep -q '^agent-run\.' && fail "a workspace was left in $TMP: $(ls "$TMP")"
echo "symlinks: ok"
