#!/usr/bin/env bash
# ops-synth generate's rate with and without a store: what committing each task before it reaches
# stdout costs. Usage: bench/ops_synth/generate_rate.sh [OPS_SYNTH...] (default build/bin/ops-synth);
# REPEATS (5), N (20000) and SIZES (gpu) from the environment. Prints, per binary and mode, the
# median tasks/s over the repeats with min-max and count, from wall time (process start to exit,
# catalog load and store open included), with the store on the local disk the script runs on.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$here/build/bin/ops-synth")
REPEATS=${REPEATS:-5}
N=${N:-20000}
SIZES=${SIZES:-gpu}
export CUDA_AGENT_DATA="${CUDA_AGENT_DATA:-$here/datasets}"
T=$(mktemp -d "${TMPDIR:-/tmp}/genrate.XXXXXX")
trap 'rm -rf "$T"' EXIT

echo "ops-synth generate -n $N --sizes $SIZES --seed 1, $REPEATS runs each, tasks/s from wall time"
printf '%-40s %-10s %10s %18s %6s\n' binary mode median "min-max" runs
for bin in "${bins[@]}"; do
  for mode in no-store store; do
    rates=()
    for r in $(seq "$REPEATS"); do
      rm -f "$T"/s.db*
      args=(--no-store)
      [ "$mode" = store ] && args=(--store "$T/s.db")
      start=$(date +%s.%N)
      "$bin" -q generate -n "$N" --sizes "$SIZES" --seed 1 "${args[@]}" > "$T/out.jsonl"
      end=$(date +%s.%N)
      [ "$(wc -l < "$T/out.jsonl")" = "$N" ] || { echo "$bin: wrote $(wc -l < "$T/out.jsonl") of $N" >&2; exit 1; }
      rates+=("$(python3 -c "print($N / ($end - $start))")")
    done
    python3 - "$bin" "$mode" "${rates[@]}" <<'PY'
import statistics, sys
name, mode, rates = sys.argv[1], sys.argv[2], sorted(float(x) for x in sys.argv[3:])
print("%-40s %-10s %10.0f %18s %6d" % (name[-40:], mode, statistics.median(rates),
      "%.0f-%.0f" % (rates[0], rates[-1]), len(rates)))
PY
  done
done
