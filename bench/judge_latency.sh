#!/usr/bin/env bash
# bench/judge_latency.sh: on a GPU, N verify and N profile calls through the judge services
# (kernel-check --serve, kernel-prof --serve) and the same as a process per call, for an L1-sized
# task with cached baselines; JSON lines with p10/p50/p90 (issue 17's goal: verify p50 <= 0.5 s,
# profile p50 <= 2 s). A benchmark, not a test: it prints numbers, exits 0 unless a call failed.
#   bench/judge_latency.sh [BUILD_DIR] [N]      # default build, 20; PROCESS_N=0: services only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
build=${1:-$src/build}
n=${2:-20}
exec python3 "$here/judge_latency.py" --bin "$build/bin" --src "$src" --n "$n" --gpu "${GPU:-0}" ${PROCESS_N:+--process-n "$PROCESS_N"} ${WORK:+--work "$WORK"}
