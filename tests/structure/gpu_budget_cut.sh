#!/usr/bin/env bash
# scripts/gpu-budget-cut.sh says what a device call's budget left out of a ctest pass: the test
# ctest's --stop-time ended (which ctest reports as Timeout) and the selected tests it never started.
# Fixtures shaped as session 38's part 3+4 pass (ctest 3.25's log lines and JUnit file), on this
# build's gpu label (the tests are registered without a GPU; ctest -N only lists them).
set -u
. "$(dirname "$0")/../lib.sh"
BUILD=$(cd "$CA_BIN/.." && pwd)
CUT="$CA_SRC/scripts/gpu-budget-cut.sh"
P4=$(bash "$CA_SRC/scripts/gpu-part-regex.sh" 4) || fail "no part 4"
# Part 4 is worker_device_gpu and ops_synth_filter_gpu: the filter test ran and was cut, the other never started.
cat > "$T/cut.log" <<'LOG'
      Start  75: ops_synth_filter_gpu
1/2 Test  #75: ops_synth_filter_gpu ..................***Timeout 105.82 sec

The stop time has been passed. Stopping all tests.
LOG
cat > "$T/cut.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="1" failures="1" disabled="0" skipped="0" hostname="" time="106">
  <testcase name="ops_synth_filter_gpu" classname="ops_synth_filter_gpu" time="105.8" status="fail">
    <failure message="Timeout"/><system-out></system-out>
  </testcase>
</testsuite>
XML
out=$(bash "$CUT" "$BUILD" "$T/cut.log" "$T/cut.xml" -L gpu -R "$P4") || fail "exit $? on the cut pass"
echo "$out"
grep -qx "budget: ctest's stop time ended ops_synth_filter_gpu (reported as Timeout: not a hang, nor a failure of its own)" <<< "$out" ||
  fail "the cut test is not named"
grep -qx "budget: not run, the stop time came first: worker_device_gpu" <<< "$out" || fail "the test never started is not named"
# A test that timed out on its own (its TIMEOUT, no stop time): nothing is said of the budget.
sed '/stop time/d' "$T/cut.log" > "$T/hang.log"
sed 's/tests="1"/tests="2"/; s#</testsuite>#  <testcase name="worker_device_gpu" status="run" time="80"/>\n</testsuite>#' "$T/cut.xml" > "$T/whole.xml"
out=$(bash "$CUT" "$BUILD" "$T/hang.log" "$T/whole.xml" -L gpu -R "$P4") || fail "exit $? on the whole pass"
[ -z "$out" ] || fail "a pass that ran whole, one test timing out on its own, was said to be cut: $out"
# A pass the budget skipped (no log, no JUnit file): every selected test is named.
out=$(bash "$CUT" "$BUILD" "" "" -L gpu -R "$P4") || fail "exit $? on the skipped pass"
grep -qx "budget: not run, the stop time came first: worker_device_gpu ops_synth_filter_gpu" <<< "$out" ||
  grep -qx "budget: not run, the stop time came first: ops_synth_filter_gpu worker_device_gpu" <<< "$out" ||
  fail "a skipped pass does not name its tests: $out"
bash "$CUT" "$BUILD" 2> /dev/null && fail "too few arguments were accepted"
pass "gpu-budget-cut.sh: the cut test, the tests never started, and nothing for a whole pass"
