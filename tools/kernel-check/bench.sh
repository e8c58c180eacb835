#!/usr/bin/env bash
# Benchmarks for the closing note (not a test): NVRTC compile time over the shipped example
# bundles, cold (empty cache, new process) and cached; and candidates fully checked per
# GPU-minute on a small level-1-sized task (needs a GPU; skipped with a message without one).
# usage: tools/kernel-check/bench.sh [BIN_DIR]   (prints medians, p90s and counts)
set -u
BIN=${1:-${CA_BIN:-$(dirname "$0")/../../build/bin}}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
KC="$BIN/kernel-check"
MK="python3 $SRC/tests/kernel-check/make_candidate.py"
B="$SRC/datasets/skill/bundles"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
REPS=${REPS:-5}

stats() {  # stdin: numbers, one a line -> "median X p90 Y n Z"
  python3 -c "
import sys
v = sorted(float(x) for x in sys.stdin if x.strip())
def q(p):
    k = (len(v) - 1) * p; f = int(k); c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)
print(f'median {q(0.5):.1f} ms, p90 {q(0.9):.1f} ms, min {v[0]:.1f}, max {v[-1]:.1f}, n {len(v)}')"
}
ms_of() { python3 -c "import json,sys; [print(json.loads(l)['check']['compile_ms']) for l in sys.stdin]"; }

for d in scale_add row_softmax linear_relu_gemm linear_relu_tiled; do $MK "$B/$d"; done > "$T/bundles.jsonl"
: > "$T/cold.txt"; : > "$T/cached.txt"
for r in $(seq "$REPS"); do
  while read -r line; do
    rm -rf "$T/cache"
    echo "$line" | CUDA_AGENT_CACHE="$T/cache" "$KC" --compile-only --no-store -q | ms_of >> "$T/cold.txt"
    echo "$line" | CUDA_AGENT_CACHE="$T/cache" "$KC" --compile-only --no-store -q | ms_of >> "$T/cached.txt"
  done < "$T/bundles.jsonl"
done
echo "NVRTC compile, cold (new process, empty cache), 4 example bundles x $REPS: $(stats < "$T/cold.txt")"
echo "NVRTC compile, cached (new process, cache hit):                         $(stats < "$T/cached.txt")"
# Within one process (the stream case): the library is loaded once.
for r in $(seq "$REPS"); do cat "$T/bundles.jsonl"; done > "$T/stream.jsonl"
"$KC" --compile-only --no-store --no-cache -q -j 1 < "$T/stream.jsonl" | ms_of > "$T/stream.txt"
echo "NVRTC compile, cold, in one process (-j 1):                               $(stats < "$T/stream.txt")"

if "$KC" --no-store -q < /dev/null 2>/dev/null && [ -e /dev/nvidia0 ]; then
  N=${N:-60}
  # Distinct candidates (each compiles) for a level-1-sized elementwise task.
  for i in $(seq "$N"); do $MK "$B/scale_add" --replace fused.cu "// out" "// candidate $i: out"; done > "$T/many.jsonl"
  head -1 "$T/many.jsonl" > "$T/one.jsonl"
  export CUDA_AGENT_CACHE="$T/cache2"
  t0=$(date +%s.%N); "$KC" --no-store -q < "$T/one.jsonl" > "$T/o1.jsonl"; t1=$(date +%s.%N)
  sed -i 's/candidate /variant /' "$T/many.jsonl"
  "$KC" --no-store -q < "$T/many.jsonl" > "$T/oN.jsonl"; t2=$(date +%s.%N)
  passed=$(grep -c '"status":"passed"' "$T/oN.jsonl")
  python3 -c "
one=$t1-$t0; many=$t2-$t1; n=$N
print(f'throughput: {n} candidates ({$passed} passed) in {many:.1f} s wall (1 GPU, process start and worker start {one:.1f} s included once)')
print(f'candidates fully checked per GPU-minute: {n/many*60:.0f} with start-up, {(n-1)/max(many-one,1e-9)*60:.0f} steady-state')"
else
  echo "throughput: no GPU here, not measured"
fi
