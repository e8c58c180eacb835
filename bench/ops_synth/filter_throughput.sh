#!/usr/bin/env bash
# Filtered tasks per hour on one GPU node: generates gpu-sized tasks, runs `ops-synth filter -j JOBS`
# on them for at most SECONDS of wall time, then counts what came out (every record is flushed as it
# is written, so a stopped run keeps them) and extrapolates to 6,000 kept tasks. A benchmark for the
# note, not a test.
#   BIN=build/bin JOBS=16 DEVICES=cuda:0 SECONDS_MAX=300 N=3000 bash bench/ops_synth/filter_throughput.sh OUTDIR
set -u
BIN=${BIN:-build/bin}
JOBS=${JOBS:-16}
DEVICES=${DEVICES:-cuda:0}
SECONDS_MAX=${SECONDS_MAX:-300}
N=${N:-3000}
OUT=${1:-/tmp/filter_throughput}
mkdir -p "$OUT"
"$BIN/ops-synth" generate -n "$N" --seed 2026 --gpu-profile h200 --no-store > "$OUT/gen.jsonl"
start=$(date +%s.%N)
timeout -s INT "$SECONDS_MAX" "$BIN/ops-synth" filter --device "$DEVICES" -j "$JOBS" --keep-rejected --timeout 240 \
  --no-store -i "$OUT/gen.jsonl" > "$OUT/out.jsonl" 2> "$OUT/err"
rc=$?
end=$(date +%s.%N)
python3 - "$OUT/out.jsonl" "$start" "$end" "$JOBS" "$rc" <<'PY'
import collections, json, os, sys
recs = []
for line in open(sys.argv[1]):
    try:
        recs.append(json.loads(line))
    except ValueError:
        pass  # a line cut by the stop
secs = float(sys.argv[3]) - float(sys.argv[2])
reasons = collections.Counter((r.get("filter") or {}).get("reason") or "kept" for r in recs)
kept = reasons.get("kept", 0)
compile_s = sorted(r["filter"]["verdicts"]["runs_compile"]["seconds"] for r in recs
                   if "seconds" in (((r.get("filter") or {}).get("verdicts") or {}).get("runs_compile") or {}))
# The steady rate: every worker busy, each task taking its measured worker time (the first task of
# each worker also pays torch's and inductor's start-up; the median leaves it out).
task_s = sorted(r["filter"]["seconds"] for r in recs if "seconds" in (r.get("filter") or {}))
jobs = int(sys.argv[4])
steady = None
if task_s and recs:
    med = task_s[len(task_s) // 2]
    steady = {"task_s_median": med, "task_s_mean": round(sum(task_s) / len(task_s), 2),
              "kept_fraction": round(kept / len(recs), 3),
              "kept_per_hour_at_median": int(jobs * 3600 / med * kept / len(recs)),
              "kept_per_hour_at_mean": int(jobs * 3600 / (sum(task_s) / len(task_s)) * kept / len(recs))}
print(json.dumps({"steady": steady}))
print(json.dumps({"jobs": int(sys.argv[4]), "cpus": os.cpu_count(), "filter_rc": int(sys.argv[5]), "seconds": round(secs, 1),
                  "judged": len(recs), "kept": kept, "judged_per_s": round(len(recs) / secs, 3),
                  "kept_per_hour": int(3600 * kept / secs),
                  "hours_for_6000_kept": round(6000 / (kept / secs) / 3600, 2) if kept else None,
                  "compile_s_median": compile_s[len(compile_s) // 2] if compile_s else None,
                  "by_reason": dict(reasons)}))
PY
tail -3 "$OUT/err" >&2
