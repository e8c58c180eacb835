#!/bin/bash
# A number that overflows a double (1e999) in agent-run's input is bad input (issue 21): exit 2 naming
# the line, after the episode of the line before it is written; never an abort (134) or exit 4. The
# same in a replay script and in --request-extra (a usage error there).
source "$CA_SRC/tests/agent-run/lib.sh"
echo '{"content": "Done."}' > "$TMP/done.jsonl"
{ cat "$TMP/task.jsonl"; echo '{"task_id": "t-big", "code": "x", "scale": 1e999}'; } > "$TMP/big.jsonl"
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/done.jsonl" --no-store --tasks "$TMP/big.jsonl" --workspace-dir "$TMP" \
  > "$TMP/big.out" 2> "$TMP/big.err" || rc=$?
[ "$rc" = 2 ] || { cat "$TMP/big.err"; fail "1e999 in the tasks: exit $rc, expected 2"; }
grep -q "line 2" "$TMP/big.err" || fail "the error does not name line 2: $(cat "$TMP/big.err")"
[ "$(wc -l < "$TMP/big.out")" = 1 ] || fail "the episode of line 1 was not written"
py 'assert recs[0]["task_id"] == "t-scale-add" and recs[0]["episode"]["stop_reason"] == "done"' "$TMP/big.out"
# The same on stdin, with -j 3: still exit 2, never an abort of a worker thread.
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/done.jsonl" --no-store -j 3 --workspace-dir "$TMP" < "$TMP/big.jsonl" \
  > "$TMP/big3.out" 2> "$TMP/big3.err" || rc=$?
[ "$rc" = 2 ] || { cat "$TMP/big3.err"; fail "1e999 on stdin with -j 3: exit $rc, expected 2"; }
grep -q "line 2" "$TMP/big3.err" || fail "-j 3: the error does not name line 2"
# In a replay script: exit 2 naming the script's line.
printf '%s\n' '{"content": "a"}' '{"content": "b", "n": -1e999}' > "$TMP/bigscript.jsonl"
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/bigscript.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  > /dev/null 2> "$TMP/bigscript.err" || rc=$?
[ "$rc" = 2 ] || fail "1e999 in a replay script: exit $rc, expected 2"
grep -q "bigscript.jsonl line 2" "$TMP/bigscript.err" || fail "the error does not name the script's line 2"
rc=0
"$CA_BIN/agent-run" --policy "replay:$TMP/done.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --request-extra '{"x": 1e999}' > /dev/null 2> "$TMP/extra.err" || rc=$?
[ "$rc" = 1 ] || fail "1e999 in --request-extra: exit $rc, expected 1"
grep -q -- "--request-extra" "$TMP/extra.err" || fail "the error does not name --request-extra"
ls "$TMP" | grep -q '^agent-run\.' && fail "a workspace was left in $TMP"
echo "bad_number: ok"
