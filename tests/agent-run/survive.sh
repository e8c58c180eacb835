#!/bin/bash
# An episode survives anything its model does (issue 21): random bytes in a kernels/ file, in a
# command's output, in a file name and through read_file/grep/compile are made valid UTF-8 (U+FFFD,
# with a note) and the episode finishes. An episode that fails anyway (a fault injected at turn 1)
# still writes its trajectory so far, its bundle and the reason, and agent-run exits 4 with the run
# row closed at 4.
source "$CA_SRC/tests/agent-run/lib.sh"
command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
"$PY" - "$TMP/script.jsonl" <<'PY'
import json, sys
def turn(*calls): return {"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
def bash(c): return ("bash", {"command": c})
turns = [
  turn(bash("head -c 64 /dev/urandom > kernels/rand.cu; printf 'ok \\xff\\xfe\\xc3(\\n'; head -c 256 /dev/urandom"),
       ("write_file", {"path": "plan.yaml", "content": "forward: []\n"})),
  turn(("read_file", {"path": "kernels/rand.cu"}), ("compile", {}), ("grep", {"pattern": ".", "path": "kernels"})),
  turn(bash("touch \"kernels/$(printf 'n\\xff')\" && printf '\\xe2\\x82' > plan.yaml && ls kernels"), ("list_files", {}),
       ("verify", {})),
  {"content": "Done."},
]
with open(sys.argv[1], "w") as f:
    for t in turns: f.write(json.dumps(t) + "\n")
PY
export CA_KERNEL_CHECK="$HERE/fake-kernel-check.sh" CA_KERNEL_PROF="$HERE/fake-kernel-prof.sh"
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" --workspace-dir "$TMP" \
  > "$TMP/out.jsonl" 2> "$TMP/err.txt" || rc=$?
[ "$rc" = 0 ] || { cat "$TMP/err.txt"; fail "agent-run exit $rc, expected 0"; }
grep -q "invalid UTF-8" "$TMP/err.txt" && fail "an invalid UTF-8 error: $(cat "$TMP/err.txt")"
# Strict UTF-8 decode of the whole output: a record that is not valid UTF-8 fails here.
"$PY" -c 'import sys; open(sys.argv[1], encoding="utf-8", errors="strict").read()' "$TMP/out.jsonl" || fail "output is not UTF-8"
py '
e = recs[0]["episode"]
res = [x for t in e["turns"] for x in t["tool_results"]]
names = [x["name"] for x in res]
assert names == ["bash", "write_file", "read_file", "compile", "grep", "bash", "list_files", "verify"], names
assert e["stop_reason"] == "done", (e["stop_reason"], e.get("error"))
assert "ok \ufffd\ufffd\ufffd(" in res[0]["content"] and "not valid UTF-8 are shown as U+FFFD" in res[0]["content"], res[0]["content"][:200]
assert res[0]["content"].rstrip().endswith("[exit status 0]"), res[0]["content"][-100:]
assert res[2]["ok"] and "\ufffd" in res[2]["content"], res[2]
assert res[3]["ok"] and "\"compiled\"" in res[3]["content"], res[3]
assert "U+FFFD" in res[3]["content"], "the compile result says the kernel text was changed"
assert "n\ufffd" in res[6]["content"], res[6]
k = recs[0]["bundle"]["kernels"]
assert "rand.cu" in k and "n\ufffd" in k and "\ufffd" in k["rand.cu"], list(k)
assert set(recs[0]["bundle"]["plan"]) == {"\ufffd"}, recs[0]["bundle"]["plan"]
assert "not valid UTF-8" in e["bundle_notes"], e["bundle_notes"]
print("random bytes: episode done,", len(res), "tool results, bundle", sorted(k))
' "$TMP/out.jsonl"

# A failing episode: the fault hook throws at turn 1, after turn 0 wrote a kernel. Two tasks, -j 2,
# a store: both records are written in order with their trajectory, bundle and reason; exit 4.
cat > "$TMP/script2.jsonl" <<'JSON'
{"content": "write", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "__global__ void k() {}"}}]}
{"content": "never reached"}
JSON
"$PY" -c '
import json
t = json.loads(open("'"$TMP"'/task.jsonl").read())
print(json.dumps(t)); t["task_id"] = "t-second"; print(json.dumps(t))' > "$TMP/tasks2.jsonl"
rc=0
CA_AGENT_RUN_FAULT_TURN=1 "$CA_BIN/agent-run" --policy "replay:$TMP/script2.jsonl" --store "$TMP/store.db" \
  --tasks "$TMP/tasks2.jsonl" -j 2 --workspace-dir "$TMP" > "$TMP/fail.jsonl" 2> "$TMP/fail.err" || rc=$?
[ "$rc" = 4 ] || { cat "$TMP/fail.err"; fail "failed episodes: exit $rc, expected 4"; }
grep -q "2 episode(s) failed" "$TMP/fail.err" || fail "the summary does not say episodes failed: $(cat "$TMP/fail.err")"
py '
assert [r["task_id"] for r in recs] == ["t-scale-add", "t-second"], [r["task_id"] for r in recs]
for r in recs:
    e = r["episode"]
    assert e["stop_reason"] == "error" and "injected fault at turn 1" in e["error"], e
    assert len(e["turns"]) == 1 and e["turns"][0]["tool_results"][0]["ok"], e["turns"]
    assert r["bundle"]["kernels"] == {"k.cu": "__global__ void k() {}"}, r["bundle"]
    assert r["candidate_id"] and r["schema"] == "cuda-agent/candidate/v1"
print("failed episodes: trajectory, bundle and reason kept")
' "$TMP/fail.jsonl"
"$PY" - "$TMP/store.db" <<'PYEOF' || fail "store rows"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
st, ended = db.execute("SELECT exit_status, ended_at FROM runs").fetchone()
assert st == 4 and ended, (st, ended)
assert db.execute("SELECT COUNT(*) FROM episodes").fetchone()[0] == 2
print("store: run closed with exit 4, 2 episodes")
PYEOF
"$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/fail.jsonl"
"$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/out.jsonl"
ls "$TMP" | grep -q '^agent-run\.' && fail "a workspace was left in $TMP: $(ls "$TMP")"
echo "survive: ok"
