#!/usr/bin/env bash
# Golden triples for reward-calc (input, command, expected output), like jq's and samtools' suites.
# Each golden/<case>/ holds in.jsonl, cmd (one shell line, run in the case's folder with the tools
# on PATH and in.jsonl on stdin), out.jsonl (expected stdout, exact), and optionally rc (expected
# exit code, default 0) and stderr (a fixed string stderr must contain).
# UPDATE_GOLDEN=1 rewrites out.jsonl from the current output (review the diff before committing).
set -u
: "${CA_BIN:?CA_BIN must point at the bin folder of a build}" "${CA_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
export PATH="$CA_BIN:$PATH"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 ran=0
for dir in "$CA_SRC"/tests/reward-calc/golden/*/; do
  name=$(basename "$dir")
  ran=$((ran + 1))
  want_rc=0
  [[ -f $dir/rc ]] && want_rc=$(<"$dir/rc")
  (cd "$dir" && bash ./cmd < in.jsonl > "$tmp/out" 2> "$tmp/err")
  rc=$?
  if [[ ${UPDATE_GOLDEN:-0} == 1 ]]; then cp "$tmp/out" "$dir/out.jsonl"; fi
  problem=""
  [[ $rc == "$want_rc" ]] || problem+=" exit $rc, expected $want_rc;"
  nl=$'\n'
  if ! cmp -s "$tmp/out" "$dir/out.jsonl"; then
    problem+=" stdout differs:$nl$(diff "$dir/out.jsonl" "$tmp/out" | head -20)"
  fi
  if [[ -f $dir/stderr ]]; then
    want_err=$(<"$dir/stderr")
    grep -qF -- "$want_err" "$tmp/err" || problem+=" stderr lacks [$want_err]:$nl$(head -5 "$tmp/err")"
  fi
  if [[ -n $problem ]]; then
    echo "FAIL $name:$problem" >&2
    failed=$((failed + 1))
  else
    echo "ok   $name" >&2
  fi
done
echo "golden: $ran cases, $failed failed" >&2
[[ $ran -gt 0 && $failed == 0 ]]
