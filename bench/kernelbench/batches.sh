#!/usr/bin/env bash
# Bundles through both judges in batches, inside one time budget (one device call): for each batch,
# run.sh cands, then toolchain (with STAGE_TIMEOUT = TOOLCHAIN_SHARE% of the seconds left), then
# judge and compare (with what is left, less a margin). The stages share torch.compile's caches
# (KB_SHARED_COMPILE_CACHE=1, one TORCHINDUCTOR_CACHE_DIR/TRITON_CACHE_DIR for every batch), so the
# judge reuses the graphs the toolchain's worker compiled. The level-3 results in README.md
# ("Results") come from batches like these.
#
# usage: OUT=DIR BUDGET=560 bench/kernelbench/batches.sh "level3/33_ level3/37_" "level3/9_" ...
#   each argument: one batch, ONLY words as run.sh takes them; batch k writes to $OUT/kbk, which must
#   not hold an earlier run's records (exit 2)
#   BUDGET (seconds, default 560): a batch starts only with more than MIN_LEFT (default 60) left
#   TOOLCHAIN_SHARE (percent, default 60)
# Other variables (BIN, KB, PYTHON, JUDGE_ARGS, ...) go to run.sh as they are (KB_RUN_SH: another
# run.sh, for tests). stdout: one line per stage and the compare table of each batch; the records
# stay under $OUT/kbk.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || { echo "usage: OUT=DIR [BUDGET=560] $0 \"BATCH WORDS\" ..." >&2; exit 1; }
: "${OUT:?set OUT to the folder for the records}"
BUDGET=${BUDGET:-560}
MIN_LEFT=${MIN_LEFT:-60}
SHARE=${TOOLCHAIN_SHARE:-60}
RUN=${KB_RUN_SH:-$HERE/run.sh}
ROOT=$OUT
t0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - t0))); }
# A batch folder that holds an earlier run's records is refused before anything runs: run.sh would
# overwrite some of its files and leave others (a stage that fails writes no compare.txt, and the old
# one would be printed as this batch's).
k=0
for batch in "$@"; do
  k=$((k + 1))
  if [ -d "$ROOT/kb$k" ] && [ -n "$(ls -A "$ROOT/kb$k")" ]; then
    echo "batches.sh: $ROOT/kb$k holds an earlier run's records: give a fresh OUT (nothing was run)" >&2
    exit 2
  fi
done
export KB_SHARED_COMPILE_CACHE=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$ROOT/compile-cache/inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$ROOT/compile-cache/triton}
mkdir -p "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"
k=0
for batch in "$@"; do
  k=$((k + 1))
  l=$(left)
  if [ "$l" -le "$MIN_LEFT" ]; then echo "batch $k [$batch]: skipped, $l s left"; continue; fi
  K=$ROOT/kb$k
  mkdir -p "$K"
  OUT=$K ONLY="$batch" bash "$RUN" cands > "$K/run.log" 2>&1 || { echo "batch $k [$batch]: cands failed ($K/run.log)"; continue; }
  OUT=$K STAGE_TIMEOUT=$(( $(left) * SHARE / 100 )) bash "$RUN" toolchain >> "$K/run.log" 2>&1
  echo "batch $k [$batch]: toolchain rc=$? $(cat "$K/toolchain.wall" 2>/dev/null) s; $(tail -1 "$K/reward.err" 2>/dev/null | cut -c1-200)"
  l=$(left)
  if [ "$l" -le 15 ]; then echo "batch $k [$batch]: judge skipped, $l s left"; continue; fi
  OUT=$K STAGE_TIMEOUT=$((l - 15)) bash "$RUN" judge compare >> "$K/run.log" 2>&1
  echo "batch $k [$batch]: judge rc=$? $(cat "$K/judge.wall" 2>/dev/null) s, $(( $(date +%s) - t0 )) s in all"
  grep -v '^ ' "$K/compare.txt" 2>/dev/null
done
