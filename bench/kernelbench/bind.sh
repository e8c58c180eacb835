#!/usr/bin/env bash
# Does every KernelBench task of a level have a bundle whose plan binds against the task's real
# shapes? No GPU needed: make_candidates.py --specs works the shapes out on torch's meta device and
# `kernel-check --compile-only` compiles the kernels (NVRTC), binds the plan (grids, argument types,
# views, gemm and conv sizes, repeats unrolled) and applies the rules (step counts, scratch cap,
# module memory, precision).
#
# usage: bench/kernelbench/bind.sh [LEVEL...]        (default: level3)
# Environment: BIN=build/bin, KB=.kb/KernelBench, OUT=bench/kernelbench/out, PYTHON (one with torch),
#              ONLY=SUBSTR (only bundles whose level/stem contains it), BUNDLES=DIR (default: bundles/ here).
# Prints one line per task (task, status, reason) and then one JSON line:
#   {"level": ..., "tasks": N, "bundles": N, "bound": N, "failed": N, "missing": N}
# Exit 0 when every task of the levels asked has a bundle that binds, 2 otherwise, 1 on usage.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "${PYTHON:-/usr/bin/python3}" ] && PYTHON=${PYTHON:-/usr/bin/python3}
. "$HERE/env.sh"
case "${1:-}" in -h|--help) sed -n 2,14p "$0" >&2; exit 0 ;; esac
[ $# -gt 0 ] || set -- level3
status=0
for level in "$@"; do
  [ -d "$KB/$level" ] || { echo "bind.sh: no $KB/$level (set KB to the KernelBench checkout)" >&2; exit 1; }
  recs="$OUT/bind_$level.candidates.jsonl" res="$OUT/bind_$level.checked.jsonl"
  only=(--only "$level/${ONLY:-}")
  "$PYTHON" "$HERE/make_candidates.py" --kb "$KB" --bundles "${BUNDLES:-$HERE/bundles}" --specs "${only[@]}" -o "$recs" || exit 2
  "$BIN/kernel-check" --compile-only <"$recs" >"$res" 2>"$OUT/bind_$level.log" || true
  "$PYTHON" - "$KB/$level" "$level" "$res" "${ONLY:-}" "${BUNDLES:-$HERE/bundles}" <<'PY' || status=2
import json, os, sys
kbdir, level, res, only, bundles = sys.argv[1:6]
tasks = sorted(f[:-3] for f in os.listdir(kbdir) if f.endswith(".py") and only in f)
got = {}
for line in open(res):
    r = json.loads(line)
    c = r.get("check") or {}
    got[r["name"].split("/", 1)[1]] = (c.get("status", "?"), c.get("reason", ""))
n = {"bound": 0, "failed": 0, "missing": 0}
key = lambda s: (int(s.split("_")[0]) if s.split("_")[0].isdigit() else 1 << 30, s)
for t in sorted(tasks, key=key):
    st, why = got.get(t, ("missing", "no bundle %s/%s/%s" % (bundles, level, t)))
    kind = "bound" if st == "compiled" else "missing" if st == "missing" else "failed"
    n[kind] += 1
    print("%-44s %-14s %s" % (t, st, why[:160]))
print(json.dumps({"level": level, "tasks": len(tasks), "bundles": len(got), **n}))
sys.exit(0 if n["bound"] == len(tasks) else 2)
PY
done
exit $status
