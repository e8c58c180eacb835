#!/bin/bash
# The bar of issue 8: against a scripted server that answers 503 once, then writes kernels/k.cu and
# plan.yaml, then sends a malformed call, then calls compile, then stops, agent-run retries, answers
# the malformed call with an error, offers all nine tools, and emits one record whose bundle holds
# both files and whose episode holds the calls.
source "$CA_SRC/tests/agent-run/lib.sh"
start_mock "$HERE/scripts/bar.json"
export CA_KERNEL_CHECK="$HERE/fake-kernel-check.sh" FAKE_LOG="$TMP/fake.log"
"$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store --tasks "$TMP/task.jsonl" \
  --retry-base 0.2 --seed 7 > "$TMP/out.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run exited $?"; }
cat "$TMP/err.txt"
grep -q "HTTP 503" "$TMP/err.txt" || fail "no retry warning for the 503"

# The mock's view: 5 requests (503 + 4 turns), no violations, nine tools offered each time.
py '
reqs = recs
assert len(reqs) == 5, [r["status"] for r in reqs]
assert [r["status"] for r in reqs] == [503, 200, 200, 200, 200], [r["status"] for r in reqs]
for r in reqs:
    assert r["violations"] == [], r["violations"]
    names = sorted(t["function"]["name"] for t in r["body"]["tools"])
    assert names == sorted(["read_file","write_file","edit_file","list_files","grep","bash","compile","verify","profile"]), names
    assert r["body"]["seed"] == 7 and r["body"]["logprobs"] is True
assert reqs[0]["body"]["messages"] == reqs[1]["body"]["messages"], "the retry is not the same request"
# The malformed call was answered with an error the model sees.
tool_msgs = [m for m in reqs[3]["body"]["messages"] if m["role"] == "tool"]
assert tool_msgs[-1]["content"].startswith("error:") and "not valid JSON" in tool_msgs[-1]["content"], tool_msgs[-1]
print("mock: 5 requests, 503 retried, nine tools offered, malformed call answered:", tool_msgs[-1]["content"][:80])
' "$TMP/requests.jsonl"

# The record.
py '
assert len(recs) == 1, len(recs)
r = recs[0]
assert r["task_id"] == "t-scale-add"
assert len(r["candidate_id"]) == 16
b = r["bundle"]
assert list(b["kernels"]) == ["k.cu"] and "scale_add" in b["kernels"]["k.cu"], b
assert "launch: scale_add" in b["plan"], b["plan"]
e = r["episode"]
assert e["stop_reason"] == "done", e["stop_reason"]
calls = [c["name"] for t in e["turns"] for c in t["assistant"]["tool_calls"]]
assert calls == ["write_file", "write_file", "edit_file", "compile"], calls
results = [x for t in e["turns"] for x in t["tool_results"]]
assert [x["ok"] for x in results] == [True, True, False, True], results
assert results[2]["malformed"] and results[2]["content"].startswith("error:")
assert e["turns"][0]["attempts"] == 2, e["turns"][0]["attempts"]
assert e["turns"][0]["assistant"]["token_ids"] and len(e["turns"][0]["assistant"]["logprobs"]) == len(e["turns"][0]["assistant"]["token_ids"])
assert e["counts"]["turns"] == 4 and e["counts"]["tool_calls"] == 4 and e["counts"]["malformed_calls"] == 1, e["counts"]
assert e["counts"]["prompt_tokens"] > 0 and not e["counts"]["tokens_estimated"]
assert e["results"][0]["tool"] == "compile" and e["results"][0]["check"]["compiled"] is True, e["results"]
assert e["policy"]["kind"] == "openai" and e["policy"]["model"] == "mock-model"
print("record: bundle", list(b["kernels"]), "+ plan;", e["counts"]["turns"], "turns;", e["counts"])
' "$TMP/out.jsonl"

# compile ran kernel-check --compile-only on the bundle, fed on stdin.
grep -q -- "--compile-only" "$TMP/fake.log" || fail "compile did not pass --compile-only"
"$PY" "$CA_SRC/tests/validate_schema.py" candidate "$TMP/out.jsonl"
"$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/out.jsonl"
echo "bar: ok"
