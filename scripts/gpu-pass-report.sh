#!/usr/bin/env bash
# What one ctest pass of a device call left to read (device-session.sh's gpu-tests), from its log and
# JUnit file, which come back only as the call's output:
#   scripts/gpu-pass-report.sh BUILD LOG JUNIT [ctest selection args: -L gpu -R REGEX ...]
# - each failed test's last 25 lines;
# - the test ctest's --stop-time ended, named as the budget's, not a failure of its own (ctest reports
#   it "Timeout", as if it had hung: session 38's ops_synth_filter_gpu). A test started close to the
#   stop time gets the time left as its timeout ("Test timeout computed to be: 36") and ends without
#   ctest's stop-time line (session 39's worker_device_gpu), so a Timeout is the budget's whenever the
#   test ran for less than its own TIMEOUT property;
# - the selected tests ctest never started (it names none of them).
# LOG or JUNIT may be "" or missing (a pass the budget skipped: every selected test is named).
# Prints nothing for a pass that ran whole and passed.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 BUILD LOG JUNIT [ctest selection args]" >&2; exit 1; }
build=$1 log=$2 junit=$3; shift 3
listed=$(ctest --test-dir "$build" --show-only=json-v1 "$@") || { echo "gpu-pass-report.sh: ctest --show-only failed in $build" >&2; exit 3; }
exec python3 - "$log" "$junit" "$listed" <<'PY'
import json, re, sys, xml.etree.ElementTree as ET
log, junit, listed = sys.argv[1:4]
tests = json.loads(listed)["tests"]
selected = [t["name"] for t in tests]
own_timeout = {t["name"]: p["value"] for t in tests for p in t.get("properties", []) if p["name"] == "TIMEOUT"}
try:
    cases = list(ET.parse(junit).getroot().iter("testcase"))
except (OSError, ET.ParseError):
    cases = []
try:
    text = open(log, errors="replace").read()
except OSError:
    text = ""
def ran_short(case):  # ended as Timeout before its own TIMEOUT: ctest's stop time cut it
    f = case.find("failure")
    limit = own_timeout.get(case.get("name"))
    return (f is not None and f.get("message") == "Timeout" and limit is not None
            and float(case.get("time") or 0) < 0.98 * float(limit))
cut = next((c.get("name") for c in cases if ran_short(c)), None)
if cut is None and "The stop time has been passed" in text:
    ended = re.findall(r"Test\s+#\d+: (\S+) \.+\s*\*+Timeout", text)
    cut = ended[-1] if ended else None
for case in cases:
    if case.get("status") == "fail" or case.find("failure") is not None:
        out = case.find("system-out")
        how = "was ended by the budget (ctest's stop time)" if case.get("name") == cut else "failed"
        print("--- %s %s; its last lines:" % (case.get("name"), how))
        print("\n".join(((out.text or "") if out is not None else "").splitlines()[-25:]))
if cut:
    print("budget: ctest's stop time ended %s (reported as Timeout: not a hang, nor a failure of its own)" % cut)
ran = {c.get("name") for c in cases}
missing = [n for n in selected if n not in ran]
if missing:
    print("budget: not run, the stop time came first: %s" % " ".join(missing))
PY
