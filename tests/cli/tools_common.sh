#!/usr/bin/env bash
# Every tool in bin/: --help exits 0 with an example, --version names the git revision, a bad flag
# exits 1, and its man page renders without warnings.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
tools=(run-store ops-synth agent-run kernel-check kernel-prof reward-calc ppo-step)
found=0
for t in "${tools[@]}"; do
  exe="$CA_BIN/$t"
  [ -x "$exe" ] || continue
  found=$((found + 1))
  "$exe" --help > /tmp/help.$$ || fail "$t --help exit $?"
  grep -q "Example" /tmp/help.$$ || fail "$t --help has no example"
  "$exe" --version | grep -q "git" || fail "$t --version lacks the git revision"
  set +e; "$exe" --no-such-flag >/dev/null 2>&1; rc=$?; set -e
  [ "$rc" = 1 ] || fail "$t with a bad flag should exit 1, got $rc"
  page="$CA_SRC/man/$t.1"
  [ -f "$page" ] || fail "$t has no man page man/$t.1"
  warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null || true)
  [ -z "$warnings" ] || fail "man/$t.1 renders with warnings: $warnings"
done
rm -f /tmp/help.$$
[ "$found" -ge 1 ] || fail "no tools found in $CA_BIN"
MANWIDTH=80 man -l "$CA_SRC/man/cuda-agent.7" | grep -q "RECORDS" || fail "cuda-agent(7)"
echo "tools_common: $found tools ok"
