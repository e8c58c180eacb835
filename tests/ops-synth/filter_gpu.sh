#!/usr/bin/env bash
# ops-synth filter on the GPU (label gpu): 24 gpu-sized tasks through every filter (eager,
# torch.compile, determinism, degenerate outputs, eager time 1-100 ms) with N workers on cuda:0.
# Asserts every verdict ran (none skipped), kept tasks' measured eager times are in range, and
# prints the drop counts by reason and the time per task (for the 6,000-tasks-per-hour figure).
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch"
export CUDA_AGENT_PYTHON="$PY"
"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || fail "no GPU visible to torch"
# 24: three rounds of the 8 workers (each task about 30 s of one worker on an H100, its torch.compile
# most of it); 50 took about 220 s of a session's 1,800 device seconds. bench/ops_synth measures the
# throughput at scale.
N=${OPS_SYNTH_GPU_TASKS:-24}
J=${OPS_SYNTH_GPU_JOBS:-8}
"$OS" generate -n "$N" --seed 2026 --gpu-profile h200 --no-store > "$T/gen.jsonl" 2>/dev/null
start=$(date +%s.%N)
"$OS" filter --device cuda:0 -j "$J" --keep-rejected --timeout 240 --no-store -i "$T/gen.jsonl" \
  > "$T/out.jsonl" 2> "$T/err" || fail "filter: $(grep -m3 -iE 'error|refus|stopp' "$T/err" | cut -c1-800; tail -2 "$T/err")"
end=$(date +%s.%N)
tail -1 "$T/err" >&2
if [ -n "${OPS_SYNTH_KEEP:-}" ]; then cp "$T/gen.jsonl" "$T/out.jsonl" "$T/err" "$OPS_SYNTH_KEEP/"; fi
python3 - "$T/out.jsonl" "$N" "$start" "$end" "$J" <<'PY' || fail "gpu filter"
import collections, json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
n, secs, jobs = int(sys.argv[2]), float(sys.argv[4]) - float(sys.argv[3]), int(sys.argv[5])
assert len(recs) == n, len(recs)
reasons = collections.Counter(r["filter"]["reason"] or "kept" for r in recs)
problems = []
for r in recs:
    f = r["filter"]
    v = f.get("verdicts")
    if v is None:
        continue  # timeout / worker death: counted by reason
    if v["runs_eager"]["pass"] and f["reason"] not in ("runs_compile",):
        for name in ("runs_compile", "eager_time_ms"):
            if v[name]["pass"] is None and f["reason"] is None:
                problems.append("%s: %s skipped on GPU: %s" % (r["name"], name, v[name]["detail"]))
    if f["kept"]:
        ms = v["eager_time_ms"].get("value")
        if ms is None or not (1 <= ms <= 100):
            problems.append("%s kept with eager %s ms" % (r["name"], ms))
eager = sorted(r["filter"]["verdicts"]["eager_time_ms"]["value"] for r in recs
               if r["filter"].get("verdicts") and r["filter"]["verdicts"]["eager_time_ms"].get("value") is not None)
est_vs_real = sorted(r["filter"]["verdicts"]["eager_time_ms"]["value"] / r["estimates"]["eager_ms"] for r in recs
                     if r["filter"].get("verdicts") and r["filter"]["verdicts"]["eager_time_ms"].get("value") is not None)
q = lambda xs, p: round(xs[int(p * (len(xs) - 1))], 3) if xs else None
print(json.dumps({"eager_ms_p10_p50_p90": [q(eager, .1), q(eager, .5), q(eager, .9)],
                  "measured_over_estimate_p10_p50_p90": [q(est_vs_real, .1), q(est_vs_real, .5), q(est_vs_real, .9)]}))
print(json.dumps({"tasks": n, "jobs": jobs, "seconds": round(secs, 1), "s_per_task": round(secs / n, 2),
                  "tasks_per_hour_one_gpu": int(3600 * n / secs), "by_reason": dict(reasons)}))
for p in problems:
    print("PROBLEM " + p, file=sys.stderr)
assert reasons["kept"] >= n // 5, "fewer than 20% kept"
sys.exit(1 if problems else 0)
PY
echo "ops-synth filter (gpu): ok"
