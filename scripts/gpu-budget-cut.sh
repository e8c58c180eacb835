#!/usr/bin/env bash
# What a device call's budget left out of a ctest pass, said as such (device-session.sh's gpu-tests):
#   scripts/gpu-budget-cut.sh BUILD LOG JUNIT [ctest selection args: -L gpu -R REGEX ...]
# ctest's --stop-time ends the running test and reports it "Timeout", as if it had hung (session 38's
# ops_synth_filter_gpu), and names none of the tests it never started. LOG is the pass's ctest output
# and JUNIT its --output-junit file ("" for a pass that never ran: then every selected test is named).
# Prints nothing when the pass ran whole.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 BUILD LOG JUNIT [ctest selection args]" >&2; exit 1; }
build=$1 log=$2 junit=$3; shift 3
listed=$(ctest --test-dir "$build" -N "$@") || { echo "gpu-budget-cut.sh: ctest -N failed in $build" >&2; exit 3; }
exec python3 - "$log" "$junit" "$listed" <<'PY'
import re, sys, xml.etree.ElementTree as ET
log, junit, listed = sys.argv[1:4]
selected = re.findall(r"Test\s+#\d+: (\S+)", listed)
try:
    ran = {c.get("name") for c in ET.parse(junit).getroot().iter("testcase")}
except (OSError, ET.ParseError):
    ran = set()
try:
    text = open(log, errors="replace").read()
except OSError:
    text = ""
if "The stop time has been passed" in text:
    cut = re.findall(r"Test\s+#\d+: (\S+) \.+\s*\*+Timeout", text)
    if cut:
        print("budget: ctest's stop time ended %s (reported as Timeout: not a hang, nor a failure of its own)" % cut[-1])
missing = [n for n in selected if n not in ran]
if missing:
    print("budget: not run, the stop time came first: %s" % " ".join(missing))
PY
