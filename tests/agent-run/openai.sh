#!/bin/bash
# openai:URL details beyond the bar: a 429 with Retry-After is waited out; an answer without usage
# or logprobs gives estimated tokens; reasoning_content is kept; a 400 is not retried and ends the
# episode as policy_error with the record written; the API key goes in the Authorization header.
source "$CA_SRC/tests/agent-run/lib.sh"
start_mock "$HERE/scripts/retry_after.json"
MY_KEY=sk-test-123 "$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store --tasks "$TMP/task.jsonl" \
  --api-key-env MY_KEY --retry-base 0.05 --temperature 0.6 --top-p 0.95 --max-tokens 1000 --model my-model \
  > "$TMP/out.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run failed"; }
py '
reqs = recs
assert [r["status"] for r in reqs] == [429, 200, 200], [r["status"] for r in reqs]
waited = reqs[1]["time"] - reqs[0]["time"]
assert waited >= 0.9, "Retry-After: 1 not honoured (%.2f s)" % waited
b = reqs[1]["body"]
assert (b["model"], b["temperature"], b["top_p"]) == ("my-model", 0.6, 0.95), b
assert b["max_tokens"] == 1000
assert reqs[1]["auth"] == "Bearer sk-test-123", reqs[1]["auth"]
hist = reqs[2]["body"]["messages"]
assert hist[2]["role"] == "assistant" and hist[2]["tool_calls"][0]["function"]["name"] == "list_files"
assert hist[3]["role"] == "tool" and "SKILL.md" in hist[3]["content"]
print("429 + Retry-After waited %.2f s; sampling settings sent" % waited)
' "$TMP/requests.jsonl"
py '
e = recs[0]["episode"]
t0 = e["turns"][0]
assert t0["attempts"] == 2 and t0["assistant"]["reasoning_content"] == "Let me look first.", t0
assert t0["context_tokens_estimated"] and "token_ids" not in t0["assistant"], t0
assert e["counts"]["tokens_estimated"] is True and e["stop_reason"] == "done"
assert e["policy"]["temperature"] == 0.6 and e["policy"]["model"] == "my-model"
print("no usage -> estimated tokens; reasoning kept")
' "$TMP/out.jsonl"
kill "$MOCK_PID"; MOCK_PID=; rm -f "$TMP/port" "$TMP/requests.jsonl"

start_mock "$HERE/scripts/reject.json"
"$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store --tasks "$TMP/task.jsonl" \
  --retry-base 0.05 > "$TMP/rej.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run failed"; }
py 'assert len(recs) == 1 and recs[0]["status"] == 400, recs; print("400: one request, no retry")' "$TMP/requests.jsonl"
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "policy_error" and "HTTP 400" in e["error"], e; assert e["policy"]["model"] == "mock-model"; print("400 -> policy_error:", e["error"][:80])' "$TMP/rej.jsonl"
echo "openai: ok"
