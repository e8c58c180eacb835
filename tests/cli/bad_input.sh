#!/usr/bin/env bash
# Bad input under a careless or hostile user (issue 21): a number that overflows a double and a
# line nested a million deep are exit 2 naming the line in every tool that reads records; the
# records read before a fatal line are finished and written (stdout and store) by kernel-check at
# -j 1, 2 and 4; a mistyped id is an error section (fatal under --strict), never a record filed
# under another key; -i F -o F (also via a symlink, or F on stdin) is refused and F kept.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
export CUDA_AGENT_DATA="${CUDA_AGENT_DATA:-$CA_SRC/datasets}"
export CUDA_AGENT_CACHE="$T/cache"
RS="$CA_BIN/run-store"
KC="$CA_BIN/kernel-check"
RC="$CA_BIN/reward-calc"

# expect_bad_line NAME LINE CMD...: CMD < $T/in exits 2 and its stderr names LINE.
expect_bad_line() {
  local name=$1 line=$2 rc
  shift 2
  set +e
  "$@" < "$T/in" > "$T/out" 2> "$T/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "$name: exit $rc, expected 2: $(tail -2 "$T/err")"
  grep -q "line $line" "$T/err" || fail "$name: the message does not name line $line: $(tail -2 "$T/err")"
  if grep -q "internal error" "$T/err"; then fail "$name: still an internal error: $(tail -1 "$T/err")"; fi
}

# 1. 1e999 (json's out_of_range: was exit 4 "internal error" without a line) and deep nesting.
echo '{"task_id":"0000000000000001","candidate_id":"c1","check":{"status":"passed"}}' > "$T/good_line"
"$PY" -c 'print("{\"x\": " + "[" * 1000000 + "]" * 1000000 + "}")' > "$T/deep_line"
readers=(
  "run-store|$RS import --store $T/rs.db"
  "reward-calc|$RC --no-store"
  "kernel-check|$KC --compile-only --arch sm_90 --no-store"
  "ppo-step|$CA_BIN/ppo-step advantages --no-store"
)
checked=0
for entry in "${readers[@]}"; do
  name=${entry%%|*}
  cmd=${entry#*|}
  [ -x "$CA_BIN/$name" ] || continue
  { cat "$T/good_line"; echo '{"task_id":"t2","x":1e999}'; } > "$T/in"
  # shellcheck disable=SC2086
  expect_bad_line "$name 1e999" 2 $cmd
  cp "$T/deep_line" "$T/in"
  # shellcheck disable=SC2086
  expect_bad_line "$name deep nesting" 1 $cmd
  checked=$((checked + 1))
done
[ "$checked" -ge 2 ] || fail "only $checked record readers found in $CA_BIN"

# 2. kernel-check: 8 good candidates then a bad line kept 7, 6 and 4 with -j 1, 2 and 4; now all 8
# are judged, on stdout and in the store, and the exit is still 2.
MK="$PY $CA_SRC/tests/kernel-check/make_candidate.py"
: > "$T/eight.jsonl"
for i in 1 2 3 4 5 6 7 8; do
  $MK "$CA_SRC/datasets/skill/bundles/scale_add" --replace fused.cu "the smallest bundle" "the smallest bundle ($i)" >> "$T/eight.jsonl"
done
for j in 1 2 4; do
  { cat "$T/eight.jsonl"; echo 'not json'; } > "$T/in"
  expect_bad_line "kernel-check -j $j" 9 "$KC" --compile-only --arch sm_90 -j "$j" --store "$T/kc$j.db"
  [ "$(grep -c '"status":"compiled"' "$T/out")" = 8 ] \
    || fail "kernel-check -j $j: $(wc -l < "$T/out") of 8 records before the bad line written"
  n=$("$RS" query --store "$T/kc$j.db" "SELECT COUNT(*) AS n FROM checks")
  [ "$n" = '{"n":8}' ] || fail "kernel-check -j $j: the store holds $n checks, expected 8"
  st=$("$RS" query --store "$T/kc$j.db" "SELECT exit_status AS s FROM runs WHERE ended_at IS NOT NULL")
  [ "$st" = '{"s":2}' ] || fail "kernel-check -j $j: run row not closed with exit 2: $st"
done

# 3. Mistyped ids. run-store import filed a candidate with a numeric candidate_id as a task over the
# real task's row (its code gone) and exited 0, even with --strict.
printf '%s\n' '{"task_id":"t1","code":"the real code"}' '{"task_id":"t1","candidate_id":12345,"bundle":{}}' > "$T/ids.jsonl"
"$RS" import --store "$T/ids.db" -i "$T/ids.jsonl" 2> "$T/err" || fail "import without --strict: exit $?"
grep -q "line 2: candidate_id" "$T/err" || fail "import does not name the mistyped id: $(cat "$T/err")"
code=$("$RS" query --store "$T/ids.db" "SELECT json_extract(body, '\$.code') AS code FROM tasks WHERE task_id = 't1'")
[ "$code" = '{"code":"the real code"}' ] || fail "the task row was overwritten: $code"
set +e; "$RS" import --strict --store "$T/ids2.db" -i "$T/ids.jsonl" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "line 2: candidate_id" "$T/err" || fail "import --strict: exit $rc: $(cat "$T/err")"
# reward-calc and kernel-check: an error section naming the field, exit 2 under --strict.
echo '{"task_id":"t1","candidate_id":7,"check":{"status":"passed","correct":true}}' > "$T/in"
for tool in "$RC --no-store" "$KC --compile-only --arch sm_90 --no-store"; do
  # shellcheck disable=SC2086
  $tool < "$T/in" > "$T/out" 2> "$T/err" || fail "$tool: exit $? on a mistyped id: $(tail -1 "$T/err")"
  "$PY" -c '
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["error"]["field"] == "candidate_id", r.get("error")' "$T/out" || fail "$tool: no error section for candidate_id"
  set +e
  # shellcheck disable=SC2086
  $tool --strict < "$T/in" > /dev/null 2> "$T/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "candidate_id" "$T/err" || fail "$tool --strict: exit $rc: $(tail -1 "$T/err")"
done

# 4. -i F -o F emptied F and exited 0: refused (exit 1), F unchanged; the same via a symlink and with
# F on stdin.
head -3 "$T/eight.jsonl" > "$T/same.jsonl"
sum=$(sha256sum < "$T/same.jsonl")
ln -s "$T/same.jsonl" "$T/link.jsonl"
for tool in "$RC --no-store" "$KC --compile-only --arch sm_90 --no-store"; do
  for args in "-i $T/same.jsonl -o $T/same.jsonl" "-i $T/link.jsonl -o $T/same.jsonl" "-o $T/link.jsonl"; do
    set +e
    # shellcheck disable=SC2086
    $tool $args < "$T/same.jsonl" > /dev/null 2> "$T/err"
    rc=$?
    set -e
    [ "$rc" = 1 ] || fail "$tool $args: exit $rc, expected 1"
    grep -q "same file" "$T/err" || fail "$tool $args: no clear message: $(cat "$T/err")"
    [ "$(sha256sum < "$T/same.jsonl")" = "$sum" ] || fail "$tool $args: the input file was changed"
  done
done
"$RC" --no-store -i "$T/same.jsonl" -o "$T/other.jsonl" 2>/dev/null || fail "different files must still work"
echo "bad_input: ok ($checked readers)"
