#!/bin/bash
# Every input channel is bounded (issue 32), against a hostile server on loopback and hostile replay
# files: answers nested 100,000 deep (in what agent-run reads and in what it skips), tool arguments
# nested as deep, answers over --max-answer-mib by Content-Length, chunked without end and as a gzip
# bomb; none crashes agent-run or grows it past its bounds, every episode's record is written with
# the reason and a warning names it (and with -j 4, all four). A replay line nested 100,000 deep is
# bad input naming the line. --episode-timeout holds inside a turn: a server that answers late, a
# Retry-After past the end, commands that sleep. A 40 MB answer makes a record cut under the readers'
# line limit, marked; a server that reports a tiny usage for huge answers meets the conversation bound.
source "$CA_SRC/tests/agent-run/lib.sh"

# start_hostile SCRIPT_JSON: the hostile server on a script given inline; sets PORT.
start_hostile() {
  [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null
  rm -f "$TMP/port" "$TMP/hostile.log"
  echo "$1" > "$TMP/hostile.json"
  "$PY" "$HERE/hostile_openai.py" "$TMP/hostile.json" "$TMP/port" "$TMP/hostile.log" 2>"$TMP/mock.err" &
  MOCK_PID=$!
  for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
  [ -s "$TMP/port" ] || fail "hostile server did not start: $(cat "$TMP/mock.err")"
  PORT=$(cat "$TMP/port")
}

# run_ar NAME ARGS...: agent-run against the server under a memory watch; sets RC, ELAPSED and
# MAXRSS_MB (the largest resident size agent-run reached).
run_ar() {
  local name=$1
  shift
  "$PY" - "$TMP/$name" "$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store \
    --model hostile --retry-base 0.05 "$@" <<'PY'
import resource, subprocess, sys, time
out = sys.argv[1]
t0 = time.time()
with open(out + ".out", "wb") as o, open(out + ".err", "wb") as e:
    rc = subprocess.call(sys.argv[2:], stdout=o, stderr=e)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
open(out + ".stat", "w").write("%d %.2f %d\n" % (rc, time.time() - t0, rss))
PY
  read -r RC ELAPSED MAXRSS_MB < "$TMP/$name.stat"
}

# 1. Answers nested 100,000 deep, where agent-run reads (a tool call's arguments) and where it does
# not (a key it skips): refused as malformed while parsing, retried, then policy_error, the record
# written. With -j 4 all four episodes are written.
for t in 1 2 3 4; do sed "s/t-scale-add/t-$t/" "$TMP/task.jsonl"; done > "$TMP/tasks4.jsonl"
for where in arguments extra; do
  start_hostile '{"steps": [{"kind": "deep", "depth": 100000, "where": "'$where'"}], "repeat_last": true}'
  run_ar deep-$where --tasks "$TMP/tasks4.jsonl" -j 4 --retries 1
  [ "$RC" = 0 ] || fail "deep answer ($where): exit $RC, expected 0: $(tail -5 "$TMP/deep-$where.err")"
  py '
assert len(recs) == 4, len(recs)
for r in recs:
    e = r["episode"]
    assert e["stop_reason"] == "policy_error", e["stop_reason"]
    assert "nested deeper than 512 levels" in e["error"], e["error"]
print("deep answer: 4 episodes written as policy_error:", recs[0]["episode"]["error"][:140])
' "$TMP/deep-$where.out"
  for t in 1 2 3 4; do
    grep -q "task t-$t episode .* failed (policy_error).*nested deeper" "$TMP/deep-$where.err" ||
      fail "no warning names task t-$t: $(cat "$TMP/deep-$where.err")"
  done
done
echo "deep answers: no crash, every record written, each failure named"

# 2. Tool arguments: a JSON string nested 100,000 deep is a malformed call the model is told about;
# the episode goes on to its end, and the history sends the call's arguments back as {}.
start_hostile '{"steps": [{"kind": "deep_string_args", "depth": 100000}, {"kind": "done"}]}'
run_ar deep-args --tasks "$TMP/task.jsonl"
[ "$RC" = 0 ] || fail "deep arguments: exit $RC: $(tail -5 "$TMP/deep-args.err")"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "done", e
res = e["turns"][0]["tool_results"][0]
assert res["malformed"] and "nested deeper than 512" in res["content"], res
print("deep arguments: malformed call:", res["content"][:120])
' "$TMP/deep-args.out"

# A replay script nested 100,000 deep (a turn, and a tool call's arguments object) is bad input
# naming the line; a deep arguments string in a replay turn is a malformed call.
"$PY" -c '
import sys
n = 100000
open(sys.argv[1], "w").write("{\"content\": \"ok\"}\n{\"content\": " + "[" * n + "]" * n + "}\n")
open(sys.argv[2], "w").write("{\"content\": \"\", \"tool_calls\": [{\"name\": \"bash\", \"arguments\": {\"command\": " + "[" * n + "]" * n + "}}]}\n")
open(sys.argv[3], "w").write("{\"content\": \"\", \"tool_calls\": [{\"name\": \"bash\", \"arguments\": \"" + "[" * n + "]" * n + "\"}]}\n{\"content\": \"Done.\"}\n")
' "$TMP/deep-replay.jsonl" "$TMP/deep-replay-args.jsonl" "$TMP/deep-replay-str.jsonl"
for f in deep-replay deep-replay-args; do
  rc=0
  "$CA_BIN/agent-run" --policy "replay:$TMP/$f.jsonl" --no-store --tasks "$TMP/task.jsonl" \
    > "$TMP/$f.out" 2> "$TMP/$f.err" || rc=$?
  [ "$rc" = 2 ] || fail "$f: exit $rc, expected 2: $(cat "$TMP/$f.err")"
  line=$([ $f = deep-replay ] && echo 2 || echo 1)
  grep -q "$f.jsonl line $line: nested deeper than 512 levels" "$TMP/$f.err" || fail "$f: not named: $(cat "$TMP/$f.err")"
done
"$CA_BIN/agent-run" --policy "replay:$TMP/deep-replay-str.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/deep-str.out" 2> "$TMP/deep-str.err" || fail "deep arguments string in a replay: $(cat "$TMP/deep-str.err")"
py 'r = recs[0]["episode"]["turns"][0]["tool_results"][0]; assert r["malformed"] and "nested deeper" in r["content"], r' "$TMP/deep-str.out"
echo "replay: a deep line is exit 2 naming it; deep arguments are a malformed call"

# 3. Answers over --max-answer-mib: by Content-Length (500 MiB announced), chunked without end, a gzip
# body inflating to 1 GiB (about 1 MB on the wire). Each ends its episode at once (no retry: it would
# be as large again) as policy_error naming the limit, the record written; agent-run stays small.
for kind in '"content_length", "mib": 500' '"chunked"' '"gzip", "mib": 1024'; do
  start_hostile '{"steps": [{"kind": '"$kind"'}], "repeat_last": true}'
  name=big-$(echo "$kind" | cut -d'"' -f2)
  run_ar "$name" --tasks "$TMP/task.jsonl" --max-answer-mib 8 --request-timeout 60
  [ "$RC" = 0 ] || fail "$name: exit $RC: $(tail -5 "$TMP/$name.err")"
  py '
e = recs[0]["episode"]
assert e["stop_reason"] == "policy_error" and "--max-answer-mib 8" in e["error"] and "larger than 8388608 bytes" in e["error"], e
print(e["error"][:150])
' "$TMP/$name.out"
  n=$(wc -l < "$TMP/hostile.log")
  [ "$n" = 1 ] || fail "$name: $n requests, expected 1 (an answer over the cap is not retried)"
  [ "$MAXRSS_MB" -lt 200 ] || fail "$name: agent-run grew to $MAXRSS_MB MB"
  awk -v t="$ELAPSED" 'BEGIN { exit !(t < 30) }' || fail "$name: took $ELAPSED s"
  echo "$name: ended in $ELAPSED s, at most $MAXRSS_MB MB resident"
done
# The default cap (64 MiB) holds against the gzip bomb too.
start_hostile '{"steps": [{"kind": "gzip", "mib": 1024}], "repeat_last": true}'
run_ar bomb-default --tasks "$TMP/task.jsonl"
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "policy_error" and "--max-answer-mib 64" in e["error"], e' "$TMP/bomb-default.out"
[ "$MAXRSS_MB" -lt 400 ] || fail "gzip bomb, default cap: agent-run grew to $MAXRSS_MB MB"
echo "gzip bomb against the default cap: at most $MAXRSS_MB MB resident"

# 4. --episode-timeout inside a turn. A server that answers after 30 s, an episode of 3 s: the
# request is given the time left and the episode ends as timeout near 3 s.
start_hostile '{"steps": [{"kind": "sleep", "s": 30}]}'
run_ar slow --tasks "$TMP/task.jsonl" --episode-timeout 3
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "timeout", e; print("slow server:", e.get("error", "")[:120])' "$TMP/slow.out"
awk -v t="$ELAPSED" 'BEGIN { exit !(t < 8) }' || fail "slow server: the episode of 3 s ran $ELAPSED s"
# A Retry-After of 100 s is not waited for when the episode has 3 s left.
start_hostile '{"steps": [{"kind": "retry_after", "s": 100}], "repeat_last": true}'
run_ar retry --tasks "$TMP/task.jsonl" --episode-timeout 3
py 'e = recs[0]["episode"]; assert e["stop_reason"] == "timeout" and "after the episode" in e["error"], e; print("Retry-After:", e["error"][:140])' "$TMP/retry.out"
awk -v t="$ELAPSED" 'BEGIN { exit !(t < 8) }' || fail "Retry-After 100 with 3 s left: ran $ELAPSED s"
echo "slow server and Retry-After: the episode ended near its 3 s"

# Commands: one turn of 20 calls of `sleep 5` against --episode-timeout 3: the first is ended at the
# deadline, the 19 others are not run (each answered, marked not_run), the episode is timeout.
command -v bwrap >/dev/null || fail "bwrap is not installed (apt-get install bubblewrap)"
"$PY" -c '
import json, sys
calls = [{"name": "bash", "arguments": {"command": "sleep 5; echo slept"}} for _ in range(20)]
open(sys.argv[1], "w").write(json.dumps({"content": "", "tool_calls": calls}) + "\n" + json.dumps({"content": "Done."}) + "\n")
' "$TMP/sleeps.jsonl"
t0=$(date +%s.%N)
"$CA_BIN/agent-run" --policy "replay:$TMP/sleeps.jsonl" --no-store --tasks "$TMP/task.jsonl" --episode-timeout 3 \
  > "$TMP/sleeps.out" 2> "$TMP/sleeps.err" || fail "sleeps: $(cat "$TMP/sleeps.err")"
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 8) }' || fail "20 x sleep 5 against 3 s ran $(echo "$t1 - $t0" | bc) s"
py '
e = recs[0]["episode"]
res = e["turns"][0]["tool_results"]
assert e["stop_reason"] == "timeout", e["stop_reason"]
assert len(res) == 20 and "slept" not in res[0]["content"] and "--episode-timeout" in res[0]["content"], res[0]
assert all(r.get("not_run") for r in res[1:]), [r.get("not_run") for r in res]
assert e["elapsed_s"] < 6, e["elapsed_s"]
print("20 x sleep 5 against 3 s: ended in %.1f s; first:" % e["elapsed_s"], res[0]["content"].strip().splitlines()[-1][:100])
' "$TMP/sleeps.out"

# 5. The record stays under the readers' line limit: a 40 MB answer (under the default cap) is cut in
# the record to fit 32 MiB, marked with its size; the next tool reads it.
start_hostile '{"steps": [{"kind": "content", "bytes": 40000000, "tool": true}, {"kind": "done"}]}'
run_ar huge --tasks "$TMP/task.jsonl"
[ "$RC" = 0 ] || fail "huge answer: exit $RC: $(tail -5 "$TMP/huge.err")"
size=$(wc -c < "$TMP/huge.out")
[ "$size" -lt $((32 << 20)) ] || fail "the record is $size bytes"
py '
e = recs[0]["episode"]
a = e["turns"][0]["assistant"]
assert a["truncated"]["content"]["bytes"] == 40000000 and len(a["content"]) == a["truncated"]["content"]["kept_bytes"], a["truncated"]
assert e["record_cut"]["values"] >= 1, e.get("record_cut")
print("40 MB answer: record of %d bytes, content cut to %d" % (len(open(sys.argv[1]).read()), len(a["content"])))
' "$TMP/huge.out"
grep -q "cut to keep the record under 32 MiB" "$TMP/huge.err" || fail "no warning for the cut record: $(cat "$TMP/huge.err")"
# The answer is held a few times at most (it was about 29 times: 40 MB made over 1 GB).
[ "$MAXRSS_MB" -lt 400 ] || fail "a 40 MB answer grew agent-run to $MAXRSS_MB MB"
echo "40 MB answer: at most $MAXRSS_MB MB resident"
"$CA_BIN/run-store" import --store "$TMP/s.db" -i "$TMP/huge.out" > /dev/null 2> "$TMP/import.err" ||
  fail "run-store import of the cut record: $(cat "$TMP/import.err")"

# A server that answers 1 MB a turn and reports 1 token of usage: the conversation bound (16 bytes a
# token of --max-context) ends the episode as context_limit after the first turn.
start_hostile '{"steps": [{"kind": "content", "bytes": 1000000, "usage_tokens": 1, "tool": true}], "repeat_last": true}'
run_ar liar --tasks "$TMP/task.jsonl" --max-context 20000
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "context_limit" and len(e["turns"]) == 1 and "per token of --max-context" in e["error"], (e["stop_reason"], len(e["turns"]))
print("usage 1 for 1 MB answers: context_limit after", len(e["turns"]), "turn")
' "$TMP/liar.out"
# A usage of 2^62 tokens is no count (the sums would overflow): the turn is estimated, the episode goes on.
start_hostile '{"steps": [{"kind": "content", "bytes": 10, "usage_tokens": 4611686018427387904, "tool": true}, {"kind": "done"}]}'
run_ar usage-huge --tasks "$TMP/task.jsonl"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "done" and e["counts"]["tokens_estimated"] and e["counts"]["prompt_tokens"] == 0, (e["stop_reason"], e["counts"])
assert 0 < e["counts"]["context_tokens"] < 100000, e["counts"]
print("usage 2^62: estimated instead; context", e["counts"]["context_tokens"])
' "$TMP/usage-huge.out"

# 6. A judge service (--judge) whose answers nest deep: 100,000 levels is an answer without a record
# (a tool error the model sees); 509 levels inside `check` parses, and the record's copy of it is cut
# where it would nest the record past what the next tool reads (marked), so run-store still imports it.
"$PY" -c '
import json, sys
calls = [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "__global__ void k() {}"}},
         {"name": "verify", "arguments": {}}]
open(sys.argv[1], "w").write(json.dumps({"content": "", "tool_calls": calls}) + "\n" + json.dumps({"content": "Done."}) + "\n")
' "$TMP/verify.jsonl"
for depth in 100000 509; do
  start_hostile '{"steps": [{"kind": "done"}], "judge_depth": '$depth'}'
  "$CA_BIN/agent-run" --policy "replay:$TMP/verify.jsonl" --no-store --tasks "$TMP/task.jsonl"     --judge "http://127.0.0.1:$PORT" > "$TMP/judge-$depth.out" 2> "$TMP/judge-$depth.err" ||
    fail "judge answering $depth deep: exit $?: $(tail -5 "$TMP/judge-$depth.err")"
  grep -q '"kind": "judge"' "$TMP/hostile.log" || fail "the hostile judge was not asked"
done
py '
e = recs[0]["episode"]
res = e["turns"][0]["tool_results"][1]
assert not res["ok"] and "without a record" in res["content"], res
print("judge 100000 deep:", res["content"][:120])
' "$TMP/judge-100000.out"
py '
def depth(v):
    d, todo = 0, [(v, 0)]
    while todo:
        x, k = todo.pop()
        if isinstance(x, (list, dict)):
            d = max(d, k + 1)
            todo += [(c, k + 1) for c in (x.values() if isinstance(x, dict) else x)]
    return d
r = recs[0]
assert depth(r) <= 511, depth(r)
assert "nested deeper than 511 levels" in json.dumps(r["episode"]["results"]), "no marker"
assert r["episode"]["record_cut"]["values"] >= 1, r["episode"].get("record_cut")
print("judge 509 deep: the record nests", depth(r), "levels, cut marked")
' "$TMP/judge-509.out"
"$CA_BIN/run-store" import --store "$TMP/s2.db" -i "$TMP/judge-509.out" > /dev/null 2> "$TMP/import2.err" ||
  fail "run-store import of the deep-cut record: $(cat "$TMP/import2.err")"

# 6. A tool call's argument longer than exec allows (one argument of 128 KiB; the kernel says E2BIG): a
# bash command and a grep pattern of 200,000 bytes are answered as not run, telling why; the episode goes
# on to its end (it ended as error, exit 4, with no turn in the record).
"$PY" -c '
import json, sys
n = 200000
calls = [{"name": "bash", "arguments": {"command": "echo " + "y" * n}}, {"name": "grep", "arguments": {"pattern": "z" * n}},
         {"name": "bash", "arguments": {"command": "echo still here"}}]
open(sys.argv[1], "w").write(json.dumps({"content": "", "tool_calls": calls}) + "\n" + json.dumps({"content": "Done."}) + "\n")
' "$TMP/long-args.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/long-args.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/long-args.out" 2> "$TMP/long-args.err" || fail "arguments over the exec limit: exit $?: $(tail -3 "$TMP/long-args.err")"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "done", (e["stop_reason"], e.get("error"))
res = e["turns"][0]["tool_results"]
for r in res[:2]:
    assert "[not run: the command (or pattern) is 200005 bytes" in r["content"] or "is 200000 bytes" in r["content"], r["content"][-300:]
    assert "one argument may be" in r["content"], r["content"][-300:]
assert "still here" in res[2]["content"], res[2]
print("200,000-byte command and pattern: not run, told why; the episode went on")
' "$TMP/long-args.out"

# 7. File tools on paths the system cannot take: 200,000 bytes (ENAMETOOLONG from the path's resolution
# ended the episode as error, exit 4) and a NUL byte: each a tool error, the episode goes on.
"$PY" -c '
import json, sys
calls = [{"name": "write_file", "arguments": {"path": "a/" * 100000 + "x", "content": "x"}},
         {"name": "read_file", "arguments": {"path": "b" * 200000}},
         {"name": "write_file", "arguments": {"path": "kernels/a\u0000b.cu", "content": "x"}},
         {"name": "bash", "arguments": {"command": "echo still here"}}]
open(sys.argv[1], "w").write(json.dumps({"content": "", "tool_calls": calls}) + "\n" + json.dumps({"content": "Done."}) + "\n")
' "$TMP/long-path.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/long-path.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/long-path.out" 2> "$TMP/long-path.err" || fail "paths the system refuses: exit $?: $(tail -3 "$TMP/long-path.err" | cut -c1-300)"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "done", (e["stop_reason"], (e.get("error") or "")[:200])
res = [r["content"] for r in e["turns"][0]["tool_results"]]
assert res[0].startswith("error: the path is 200001 bytes; at most 4095"), res[0][:200]
assert res[1].startswith("error: the path is 200000 bytes"), res[1][:200]
assert res[2].startswith("error: the path holds a NUL byte"), res[2][:200]
assert "still here" in res[3], res[3]
print("paths of 200,000 bytes and with a NUL: tool errors; the episode went on")
' "$TMP/long-path.out"

# 8. One answer of 300,000 tool calls (an unknown tool): the first 100 are run, the rest left out of the
# conversation and the record (counted, the model told); the record was past any cut (92 MB of small
# results), and the episode ended as error with nothing kept, exit 4.
"$PY" -c '
import json, sys
calls = [{"name": "nosuchtool", "arguments": {}}] * 300000
open(sys.argv[1], "w").write(json.dumps({"content": "", "tool_calls": calls}) + "\n" + json.dumps({"content": "Done."}) + "\n")
' "$TMP/many-calls.jsonl"
"$CA_BIN/agent-run" --policy "replay:$TMP/many-calls.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/many-calls.out" 2> "$TMP/many-calls.err" || fail "300,000 calls in a turn: exit $?: $(tail -3 "$TMP/many-calls.err" | cut -c1-300)"
py '
e = recs[0]["episode"]
assert e["stop_reason"] == "done", (e["stop_reason"], (e.get("error") or "")[:200])
t = e["turns"][0]
assert len(t["assistant"]["tool_calls"]) == 100 and len(t["tool_results"]) == 100, (len(t["assistant"]["tool_calls"]), len(t["tool_results"]))
assert t["assistant"]["truncated"]["tool_calls"] == {"items": 300000, "kept_items": 100}, t["assistant"].get("truncated")
assert "asked for 300000 tool calls; the first 100 were run" in t["tool_results"][-1]["content"], t["tool_results"][-1]["content"][-300:]
print("300,000 calls in one turn: 100 run, the rest left out and counted")
' "$TMP/many-calls.out"
echo "hostile: ok"
