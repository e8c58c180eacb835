#!/usr/bin/env bash
# Every KernelBench task of levels 1-3 (250 files) through `ops-synth import` on one GPU with
# -j 8 workers: each worker loads the task, builds its Model, draws its inputs and runs the
# reference once on the GPU, and the record gets its specs. Counts imported vs failed, lists every
# failure with its reason, and ends with one JSON summary line on stdout.
#
# usage: bench/kernelbench/import_all.sh          (from the repository root)
# Environment: BIN=build/bin, KB=.kb/KernelBench, OUT=bench/kernelbench/out, JOBS=8, DEVICE=cuda:0,
#              IMPORT_TIMEOUT=570 (seconds before the import is stopped), IMPORT_ARGS (more options)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
JOBS=${JOBS:-8}
DEVICE=${DEVICE:-cuda:0}
[ -x "$BIN/ops-synth" ] || { echo "import_all.sh: $BIN/ops-synth missing (build first, or set BIN)" >&2; exit 1; }
levels=()
for l in level1 level2 level3; do
  [ -d "$KB/$l" ] || { echo "import_all.sh: no $KB/$l (set KB to the KernelBench checkout)" >&2; exit 1; }
  levels+=("$KB/$l")
done
files=$(find "${levels[@]}" -name '*.py' | wc -l)
echo "import_all.sh: $files task files, ops-synth import --device $DEVICE -j $JOBS (log: $OUT/import.err)" >&2
t0=$(date +%s.%N)
# shellcheck disable=SC2086
timeout "${IMPORT_TIMEOUT:-570}" "$BIN/ops-synth" import --no-store --device "$DEVICE" -j "$JOBS" ${IMPORT_ARGS:-} \
  "${levels[@]}" > "$OUT/imported.jsonl" 2> "$OUT/import.err"
rc=$?
t1=$(date +%s.%N)
tail -n 3 "$OUT/import.err" >&2
"$PYTHON" - "$OUT/imported.jsonl" "$OUT/import.err" "$files" "$rc" "$t0" "$t1" <<'PY'
import json, re, sys
path, err, files, rc, t0, t1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
imported, failures, by_reason, by_level = 0, [], {}, {}
for line in open(path):
    if not line.strip():
        continue
    r = json.loads(line)
    src = r.get("source", {})
    lvl = str(src.get("level", "?"))
    by_level.setdefault(lvl, {"imported": 0, "failed": 0})
    if "error" in r or not r.get("inputs"):
        reason = (r.get("error") or {}).get("reason", "no specs in the record")
        failures.append({"path": src.get("path", r.get("task_id")), "reason": reason})
        # the kind of failure: the text before the first detail (numbers and names dropped)
        kind = re.sub(r"\d+(\.\d+)?", "N", reason.split("\n")[0])[:90]
        by_reason[kind] = by_reason.get(kind, 0) + 1
        by_level[lvl]["failed"] += 1
    else:
        imported += 1
        by_level[lvl]["imported"] += 1
seen = imported + len(failures)
for f in failures:
    print("FAILED %s: %s" % (f["path"], f["reason"][:400]))
summary = {"kind": "kernelbench-import", "files": files, "records": seen, "imported": imported,
           "failed": len(failures), "missing": files - seen, "by_level": by_level, "failure_kinds": by_reason,
           "wall_s": round(t1 - t0, 2), "exit": rc, "stopped_by_timeout": rc == 124}
print(json.dumps(summary))
sys.exit(0 if imported == files else 1)
PY
