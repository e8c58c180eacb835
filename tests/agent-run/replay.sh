#!/bin/bash
# replay:FILE policy: scripted turns drive every tool; --submit final vs best; a missing
# kernel-check is a tool error; -j 2 with several episodes keeps input order; limits end episodes
# with their stop reasons; a dead server is policy_error with the record still written.
source "$CA_SRC/tests/agent-run/lib.sh"
GOOD='extern \"C\" __global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] * alpha + b[i]; }'
PLAN='dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n'
cat > "$TMP/script.jsonl" <<JSON
{"content": "Look around.", "tool_calls": [{"name": "list_files", "arguments": {}}, {"name": "read_file", "arguments": {"path": "model.py"}}]}
{"content": "Write and verify.", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "$GOOD"}}, {"name": "write_file", "arguments": {"path": "/workspace/plan.yaml", "content": "$PLAN"}}, {"name": "verify", "arguments": {}}, {"name": "profile", "arguments": {}}]}
{"content": "Break it.", "tool_calls": [{"name": "edit_file", "arguments": {"path": "kernels/k.cu", "old": "__global__", "new": "__device__"}}, {"name": "verify", "arguments": {}}]}
{"content": "Bad edits.", "tool_calls": [{"name": "edit_file", "arguments": {"path": "plan.yaml", "old": "inputs.0", "new": "x"}}, {"name": "edit_file", "arguments": {"path": "plan.yaml", "old": "nothing like this", "new": "x"}}, {"name": "edit_file", "arguments": {"path": "plan.yaml"}}, {"name": "nosuchtool", "arguments": {}}]}
{"content": "Search.", "tool_calls": [{"name": "grep", "arguments": {"pattern": "scale_[a-z]+", "path": "kernels"}}, {"name": "bash", "arguments": {"command": "wc -l plan.yaml && pwd"}}]}
{"content": "Done."}
JSON
export CA_KERNEL_CHECK="$HERE/fake-kernel-check.sh" CA_KERNEL_PROF="$HERE/fake-kernel-prof.sh" FAKE_SPEEDUP=1.5
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" > "$TMP/final.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --submit best < "$TMP/task.jsonl" > "$TMP/best.jsonl"
py '
r = recs[0]; e = r["episode"]
res = {x["tool_call_id"]: x for t in e["turns"] for x in t["tool_results"]}
out = [x for t in e["turns"] for x in t["tool_results"]]
names = [x["name"] for x in out]
assert names == ["list_files","read_file","write_file","write_file","verify","profile","edit_file","verify","edit_file","edit_file","edit_file","nosuchtool","grep","bash"], names
ok = [x["ok"] for x in out]
assert ok == [True,True,True,True,True,True,True,True,False,False,False,False,True,True], ok
assert "SKILL.md" in out[0]["content"] and "model.py" in out[0]["content"] and "kernels/" in out[0]["content"], out[0]
assert "class Model" in out[1]["content"]
assert "\"correct\": true" in out[4]["content"], out[4]["content"]
assert "speedup_vs_compile" in out[5]["content"], out[5]["content"]
assert "\"correct\": false" in out[7]["content"], out[7]["content"]
assert "occurs 2 times" in out[8]["content"], out[8]["content"]
assert "does not occur" in out[9]["content"], out[9]["content"]
assert "missing argument" in out[10]["content"] and out[10]["malformed"], out[10]
assert "unknown tool" in out[11]["content"] and out[11]["malformed"], out[11]
assert "kernels/k.cu:1:" in out[12]["content"], out[12]["content"]
assert "/workspace" in out[13]["content"] and "[exit status 0]" in out[13]["content"], out[13]["content"]
assert "__device__" in r["bundle"]["kernels"]["k.cu"], "final must submit the workspace as left"
assert e["submitted"] == {"mode": "final", "from": "final"}, e["submitted"]
assert [x["tool"] for x in e["results"]] == ["verify", "profile", "verify"]
assert e["stop_reason"] == "done" and e["counts"]["tokens_estimated"] and e["counts"]["malformed_calls"] == 2, e["counts"]
assert e["policy"]["kind"] == "replay"
print("final: 14 tool results as expected; bundle = workspace as left")
' "$TMP/final.jsonl"
py '
r = recs[0]; e = r["episode"]
assert "__global__" in r["bundle"]["kernels"]["k.cu"], "best must submit the verified bundle"
assert e["submitted"]["from"] == "turn" and e["submitted"]["turn"] == 1, e["submitted"]
assert e["submitted"]["candidate_id"] == r["candidate_id"]
print("best: submitted the bundle verified and profiled at turn 1")
' "$TMP/best.jsonl"

# A missing kernel-check is a tool error, not a crash.
CA_KERNEL_CHECK=/nonexistent/kernel-check "$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store \
  --tasks "$TMP/task.jsonl" > "$TMP/missing.jsonl"
py '
out = [x for t in recs[0]["episode"]["turns"] for x in t["tool_results"] if x["name"] == "verify"]
assert not out[0]["ok"] and "/nonexistent/kernel-check is not an executable" in out[0]["content"], out[0]
print("missing kernel-check:", out[0]["content"][:90])
' "$TMP/missing.jsonl"

# -j 2, two tasks, two episodes each: four records in input order; a task without code is a bad record.
"$PY" -c '
import json
t = json.loads(open("'"$TMP"'/task.jsonl").read())
print(json.dumps(t)); t["task_id"] = "t-second"; print(json.dumps(t)); print(json.dumps({"task_id": "t-nocode"}))
' > "$TMP/tasks3.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/tasks3.jsonl" -j 2 \
  --episodes-per-task 2 --seed 100 > "$TMP/many.jsonl" 2> "$TMP/many.err"
py '
assert [r["task_id"] for r in recs] == ["t-scale-add"] * 2 + ["t-second"] * 2 + ["t-nocode"], [r["task_id"] for r in recs]
assert [r["episode"]["episode_index"] for r in recs[:4]] == [0, 1, 2, 3]
assert [r["episode"]["seed"] for r in recs[:4]] == [100, 101, 102, 103]
assert recs[4]["error"]["field"] == "code", recs[4]
print("-j 2: 4 episodes in order, 1 bad record")
' "$TMP/many.jsonl"

# Limits.
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" --max-turns 2 > "$TMP/turns.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" --max-context 1800 > "$TMP/ctx.jsonl"
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "max_turns" and e["counts"]["turns"] == 2, (e["stop_reason"], e["counts"]); print("max_turns ok")' "$TMP/turns.jsonl"
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "context_limit" and e["counts"]["context_tokens"] >= 1800, (e["stop_reason"], e["counts"]); print("context_limit ok after", e["counts"]["turns"], "turns")' "$TMP/ctx.jsonl"

# A dead server: stop reason policy_error, the record is still written, exit 0.
"$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:9/v1" --model m --no-store --tasks "$TMP/task.jsonl" \
  --retries 2 --retry-base 0.05 > "$TMP/dead.jsonl" 2> "$TMP/dead.err"
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "policy_error" and "after 3 attempts" in e["error"], e; print("dead server:", e["error"][:100])' "$TMP/dead.jsonl"

# SIGINT in the middle of a run: the episodes finished so far are written, exit 130.
printf '%s\n' '{"content": "wait", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2"}}]}' \
  '{"content": "wait", "tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2"}}]}' > "$TMP/slow.jsonl"
for i in 1 2 3 4 5; do cat "$TMP/task.jsonl"; done > "$TMP/tasks5.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/slow.jsonl" --no-store --tasks "$TMP/tasks5.jsonl" > "$TMP/int.jsonl" 2> "$TMP/int.err" &
AR=$!
sleep 6
kill -INT $AR
rc=0; wait $AR || rc=$?
[ "$rc" = 130 ] || { cat "$TMP/int.err"; fail "SIGINT: exit $rc, expected 130"; }
py '
stops = [r["episode"]["stop_reason"] for r in recs]
assert 1 <= len(recs) < 5 and stops[-1] == "interrupted" and all(s == "done" for s in stops[:-1]), stops
print("SIGINT:", stops)
' "$TMP/int.jsonl"

# CLI conventions: --help with an example, --version, a line that is not JSON is exit 2 naming it,
# a bad --policy is a usage error.
"$CA_BIN/agent-run" --help > "$TMP/help.txt"; grep -q "Example:" "$TMP/help.txt" || fail "--help has no example"
"$CA_BIN/agent-run" --version > "$TMP/version.txt"; grep -q "agent-run" "$TMP/version.txt" || fail "--version"
{ cat "$TMP/task.jsonl"; echo "{not json"; } > "$TMP/badline.jsonl"
rc=0; "$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/badline.jsonl" \
  > "$TMP/badline.out" 2> "$TMP/badline.err" || rc=$?
[ "$rc" = 2 ] || fail "a line that is not JSON: exit $rc, expected 2"
grep -q "line 2" "$TMP/badline.err" || fail "the error does not name line 2: $(cat "$TMP/badline.err")"
[ "$(wc -l < "$TMP/badline.out")" = 1 ] || fail "the episode before the bad line was not written"
rc=0; "$CA_BIN/agent-run" --policy "bogus:x" --no-store < /dev/null 2> /dev/null || rc=$?
[ "$rc" = 1 ] || fail "bad --policy: exit $rc, expected 1"

# With a store: the task, the candidate and the episode are stored.
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --store "$TMP/store.db" --tasks "$TMP/task.jsonl" > "$TMP/stored.jsonl" 2>/dev/null
"$PY" - "$TMP/store.db" <<'PYEOF' || fail "store rows"
import sqlite3, sys, json
db = sqlite3.connect(sys.argv[1])
n = {t: db.execute("SELECT COUNT(*) FROM " + t).fetchone()[0] for t in ("tasks", "candidates", "episodes")}
assert n == {"tasks": 1, "candidates": 1, "episodes": 1}, n
body = json.loads(db.execute("SELECT body FROM episodes").fetchone()[0])
assert body["stop_reason"] == "done", body["stop_reason"]
print("store:", n)
PYEOF
"$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/many.jsonl"
echo "replay: ok"
