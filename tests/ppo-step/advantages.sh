#!/usr/bin/env bash
# The bar of issue 9: `ppo-step advantages` on a fixed batch of four sequences in two groups, with masked
# tool tokens, matches an independent numpy reference of GAE (gamma 1, lambda 0.95, --no-whiten) and of
# GRPO to 1e-6; also whitened GAE, the schema, and the bad-input rules.
source "$(dirname "$0")/lib.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }

$PPO advantages --estimator gae --gamma 1 --lam 0.95 --no-whiten -i "$HERE/batch4.jsonl" > "$tmp/gae.jsonl"
$PY "$HERE/advantages_reference.py" gae "$HERE/batch4.jsonl" "$tmp/gae.jsonl" --gamma 1 --lam 0.95 --tol 1e-6

$PPO advantages --estimator grpo < "$HERE/batch4.jsonl" > "$tmp/grpo.jsonl"
$PY "$HERE/advantages_reference.py" grpo "$HERE/batch4.jsonl" "$tmp/grpo.jsonl" --tol 1e-6

$PPO advantages < "$HERE/batch4.jsonl" > "$tmp/white.jsonl"   # default: gae, whitened
$PY "$HERE/advantages_reference.py" gae "$HERE/batch4.jsonl" "$tmp/white.jsonl" --whiten --tol 1e-6

$PPO advantages --gamma 0.9 --lam 0.8 --no-whiten < "$HERE/batch4.jsonl" > "$tmp/g09.jsonl"
$PY "$HERE/advantages_reference.py" gae "$HERE/batch4.jsonl" "$tmp/g09.jsonl" --gamma 0.9 --lam 0.8 --tol 1e-6

# The reference must be able to fail: a perturbed output is caught.
sed 's/"advantages":\[/"advantages":[0.5,/' "$tmp/grpo.jsonl" | $PY -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l); r["advantages"]=r["advantages"][1:]; r["advantages"][0]+=1e-5; print(json.dumps(r))' > "$tmp/bad.jsonl"
if $PY "$HERE/advantages_reference.py" grpo "$HERE/batch4.jsonl" "$tmp/bad.jsonl" --tol 1e-6 2>/dev/null; then
  fail "the reference accepted a perturbed output"
fi

# Records keep their keys; the schema validates.
validate ppo-batch "$tmp/gae.jsonl"
head -1 "$tmp/gae.jsonl" | grep -q '"id":"a","group":"g1","response_mask"' || fail "keys not kept in order"

# Bad input: a record missing a field passes with an error section; --strict makes it fatal; a line that
# is not JSON breaks the stream (exit 2, naming the line).
printf '%s\n' '{"id":"x","response_mask":[1,1],"reward":1}' >> "$tmp/in.jsonl"
cat "$HERE/batch4.jsonl" >> "$tmp/in.jsonl"
$PPO advantages -i "$tmp/in.jsonl" > "$tmp/out.jsonl" 2> "$tmp/err"
[ "$(wc -l < "$tmp/out.jsonl")" -eq 5 ] || fail "expected 5 records"
head -1 "$tmp/out.jsonl" | grep -q '"error":{"tool":"ppo-step","field":"values"' || fail "no error section"
grep -q "values: missing" "$tmp/err" || fail "no warning"
set +e
$PPO advantages --strict -i "$tmp/in.jsonl" > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] || fail "--strict: exit $rc, want 2"
printf 'not json\n' | $PPO advantages > /dev/null 2> "$tmp/err"; rc=$?
[ $rc -eq 2 ] || fail "not JSON: exit $rc, want 2"
grep -q "line 1" "$tmp/err" || fail "the bad line is not named"
$PPO advantages --estimator nope < /dev/null > /dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "usage: exit $rc, want 1"
set -e
$PPO --help | grep -q "Example:" || fail "--help has no example"
$PPO advantages --help | grep -q -- "--no-whiten" || fail "advantages --help"
echo "advantages: ok"
