#!/usr/bin/env bash
# The independent judge's own CPU checks (bench/kernelbench/reference_judge.py --selftest): its YAML
# and plan reader, expressions, views and repeats, the launch paths against stand-ins, the library
# steps on small tasks, and the elementwise allowance (an exact answer passes where the fp32
# reference itself misses the gate against float64, even past the count's cap, within atol + slack;
# without the allowance it fails; elements off by more than the slack, past the count, fail).
set -u
. "$(dirname "$0")/../lib.sh"
"$PY" "$CA_SRC/bench/kernelbench/reference_judge.py" --selftest > "$T/selftest.log" 2>&1
rc=$?
grep '^FAIL' "$T/selftest.log" >&2
[ $rc -eq 0 ] || fail "reference_judge.py --selftest exited $rc: $(tail -3 "$T/selftest.log")"
# 165 checks without a KernelBench checkout (a clean clone: the level bundles' tasks are skipped, and
# the log says which), 557 with .kb/KernelBench.
n=$(grep -c '^ok' "$T/selftest.log")
[ "$n" -ge 160 ] || fail "only $n checks ran (expected 165 or more): $(tail -3 "$T/selftest.log")"
for want in "cpu cancel_exact: passed" "cpu cancel_past_cap: passed" "cpu cancel_exact with --no-elementwise-allowance: incorrect" \
  "slack: 8 x the fp32 reference's largest error" "200 wrong elements" "half the slack off on 200 elements" "atol alone: within the 1%"; do
  grep -q "^ok   $want" "$T/selftest.log" || fail "missing: $want"
done
pass "reference_judge.py --selftest: $n checks, 0 failed"
