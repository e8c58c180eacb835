#!/bin/bash
# A stand-in for kernel-check/kernel-prof in agent-run's CPU tests: it reads candidate records and
# adds a check section (or, named kernel-prof, a prof section), and logs the argv and input it got.
# FAKE_LOG: file the calls are appended to. FAKE_SPEEDUP: speedup_vs_compile to report.
name=$(basename "$0")
while IFS= read -r line; do
  [ -n "$FAKE_LOG" ] && printf '%s\t%s\n' "$name $*" "$line" >> "$FAKE_LOG"
  /usr/bin/python3 - "$name" "$*" "$line" <<'PY'
import json, os, sys
name, args, rec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
b = rec["bundle"]
if "prof" in name:
    s = float(os.environ.get("FAKE_SPEEDUP", "1.5"))
    rec["prof"] = {"time_us": {"median": 10.0 / s}, "speedup_vs_eager": 2 * s, "speedup_vs_compile": s}
else:
    ok = all("__global__" in src for src in b["kernels"].values()) and "forward" in str(b["plan"])
    rec["check"] = {"compiled": ok, "correct": ok and "--compile-only" not in args,
                    "status": ("passed" if ok else "compile_error"), "reason": "" if ok else "no kernel or plan",
                    "compile_ms": 1.0, "files": sorted(b["kernels"])}
print(json.dumps(rec))
PY
done
