#!/usr/bin/env bash
# scripts/gpu-pass-report.sh says what a device call's ctest pass left to read: each failed test's
# last lines, the test ctest's --stop-time ended (which ctest reports as Timeout) named as the
# budget's, and the selected tests it never started. Fixtures shaped as session 38's part 3+4 pass and
# session 39's cut worker_device_gpu
# (ctest 3.25's log lines and JUnit file), on this build's gpu label (the tests are registered
# without a GPU; ctest -N only lists them).
set -u
. "$(dirname "$0")/../lib.sh"
BUILD=$(cd "$CA_BIN/.." && pwd)
REP="$CA_SRC/scripts/gpu-pass-report.sh"
SEL=(-L gpu -R '^(kernel_check_adversarial_gpu|worker_device_gpu|ops_synth_filter_gpu)$')
# adversarial failed on its own, the filter test ran and was cut, worker_device_gpu never started.
cat > "$T/cut.log" <<'LOG'
1/3 Test  #37: kernel_check_adversarial_gpu ..........***Failed   54.81 sec
      Start  75: ops_synth_filter_gpu
2/3 Test  #75: ops_synth_filter_gpu ..................***Timeout 105.82 sec

The stop time has been passed. Stopping all tests.
LOG
cat > "$T/cut.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="(empty)" tests="2" failures="2" disabled="0" skipped="0" hostname="" time="161">
  <testcase name="kernel_check_adversarial_gpu" classname="kernel_check_adversarial_gpu" time="54.8" status="fail">
    <failure message="Failed"/><system-out>ok   honest-gather: passed
FAIL allowance-spent-on-zeros: incorrect
1 failure(s)</system-out>
  </testcase>
  <testcase name="ops_synth_filter_gpu" classname="ops_synth_filter_gpu" time="105.8" status="fail">
    <failure message="Timeout"/><system-out>filter: 12 of 24 tasks</system-out>
  </testcase>
</testsuite>
XML
out=$(bash "$REP" "$BUILD" "$T/cut.log" "$T/cut.xml" "${SEL[@]}") || fail "exit $? on the cut pass"
echo "$out"
grep -qx -- "--- kernel_check_adversarial_gpu failed; its last lines:" <<< "$out" || fail "the failure is not reported"
grep -qx "FAIL allowance-spent-on-zeros: incorrect" <<< "$out" || fail "the failure's last lines are not printed"
grep -qx -- "--- ops_synth_filter_gpu was ended by the budget (ctest's stop time); its last lines:" <<< "$out" ||
  fail "the cut test is reported as a failure of its own"
grep -qx "budget: ctest's stop time ended ops_synth_filter_gpu (reported as Timeout: not a hang, nor a failure of its own)" <<< "$out" ||
  fail "the cut test is not named"
grep -qx "budget: not run, the stop time came first: worker_device_gpu" <<< "$out" || fail "the test never started is not named"
# A pass that ran whole, one test timing out on its own (after its own TIMEOUT, 900 s, no stop time): a
# failure, no budget line.
sed '/stop time/d' "$T/cut.log" > "$T/hang.log"
sed -e 's#</testsuite>#  <testcase name="worker_device_gpu" status="run" time="80"/>\n</testsuite>#' \
  -e 's#name="ops_synth_filter_gpu" classname="ops_synth_filter_gpu" time="105.8"#name="ops_synth_filter_gpu" classname="ops_synth_filter_gpu" time="900.1"#' \
  "$T/cut.xml" > "$T/whole.xml"
out=$(bash "$REP" "$BUILD" "$T/hang.log" "$T/whole.xml" "${SEL[@]}") || fail "exit $? on the whole pass"
grep -qx -- "--- ops_synth_filter_gpu failed; its last lines:" <<< "$out" || fail "a test that timed out on its own is not a failure: $out"
! grep -q "^budget:" <<< "$out" || fail "a pass that ran whole was said to be cut: $out"
# Session 39's shape: a test started close to the stop time gets the time left as its timeout (36 s of its
# own 600) and ctest prints no stop-time line; its Timeout is still the budget's.
cat > "$T/late.log" <<'LOG'
119: Test timeout computed to be: 36
3/3 Test #119: worker_device_gpu ................***Timeout  36.86 sec
LOG
printf '<?xml version="1.0"?>\n<testsuite><testcase name="kernel_check_adversarial_gpu" status="run" time="46"/><testcase name="ops_synth_filter_gpu" status="run" time="110"/><testcase name="worker_device_gpu" time="36.8577" status="fail"><failure message="Timeout"/><system-out></system-out></testcase></testsuite>\n' > "$T/late.xml"
out=$(bash "$REP" "$BUILD" "$T/late.log" "$T/late.xml" "${SEL[@]}") || fail "exit $? on the late pass"
grep -qx "budget: ctest's stop time ended worker_device_gpu (reported as Timeout: not a hang, nor a failure of its own)" <<< "$out" ||
  fail "a test cut at a timeout ctest computed from the stop time is reported as its own failure: $out"
# A pass that passed whole: nothing.
printf '<?xml version="1.0"?>\n<testsuite><testcase name="kernel_check_adversarial_gpu" status="run"/><testcase name="worker_device_gpu" status="run"/><testcase name="ops_synth_filter_gpu" status="run"/></testsuite>\n' > "$T/ok.xml"
out=$(bash "$REP" "$BUILD" "$T/hang.log" "$T/ok.xml" "${SEL[@]}") || fail "exit $? on the passing pass"
[ -z "$out" ] || fail "a pass that passed whole printed: $out"
# A pass the budget skipped (no log, no JUnit file): every selected test is named, in ctest's order.
out=$(bash "$REP" "$BUILD" "" "" "${SEL[@]}") || fail "exit $? on the skipped pass"
grep -qx "budget: not run, the stop time came first: kernel_check_adversarial_gpu ops_synth_filter_gpu worker_device_gpu" <<< "$out" ||
  fail "a skipped pass does not name its three tests: $out"
bash "$REP" "$BUILD" 2> /dev/null && fail "too few arguments were accepted"
pass "gpu-pass-report.sh: failures, the cut test, the tests never started, nothing for a passing pass"
