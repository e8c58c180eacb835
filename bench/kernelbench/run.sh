#!/usr/bin/env bash
# The KernelBench benchmark on a GPU machine: the same candidate set judged and timed by
#   (a) the toolchain:        kernel-check --no-store | kernel-prof --no-store | reward-calc --no-store
#   (b) the reference judge:  bench/kernelbench/reference_judge.py (one process, torch + CuPy)
#   (c) a table of both, per candidate, and one JSON line with both wall times.
#
#   (d) with the services stage: the toolchain again, through long-lived judge services
#       (kernel-check --serve, kernel-prof --serve, started and warmed before the clock starts;
#       via_services.py posts each record, check and profile overlapping as in the pipe)
#
# usage: bench/kernelbench/run.sh [STAGE...]      stages: cands toolchain services judge compare
#                                                 (default: cands toolchain judge compare)
# Run from the repository root. Each stage is its own command, so each fits a 10-minute limit:
#   bench/kernelbench/run.sh cands toolchain && bench/kernelbench/run.sh judge compare
# Environment:
#   BIN=build/bin          the toolchain's binaries
#   KB=.kb/KernelBench     the KernelBench checkout (level1..3 of .py task files)
#   OUT=bench/kernelbench/out   where records and logs go (on the device machine: $OUT is the
#                          folder that comes back)
#   PYTHON=python3         the interpreter with torch (and CuPy, for the judge)
#   ONLY="19_ReLU 1_MLP"   only bundles whose level/stem contains one of these words
#   STAGE_TIMEOUT=570      seconds each stage may take before it is stopped (and says so)
#   JUDGE_ARGS=...         more options for the judge (e.g. --runs 100 --budget-s 8)
#   TC_CHECK_ARGS, TC_PROF_ARGS, TC_REWARD_ARGS   more options for each tool
#   KB_SHARED_COMPILE_CACHE=1   let the stages share torch.compile's on-disk caches (inductor,
#                          Triton: $TORCHINDUCTOR_CACHE_DIR and $TRITON_CACHE_DIR, by default under
#                          $OUT/compile-cache-shared), so the judge reuses the graphs the toolchain's
#                          worker compiled (minutes on large CNNs). By default each timed stage starts
#                          from empty ones of its own, so the stage that runs second does not get the
#                          first one's compiled graphs (which matters to the wall times, not the rewards).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
STAGE_TIMEOUT=${STAGE_TIMEOUT:-570}
export CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-$OUT/cache}
export CUDA_AGENT_LOCK_DIR=${CUDA_AGENT_LOCK_DIR:-$OUT/locks}
die() { echo "run.sh: $*" >&2; exit 1; }
now() { date +%s.%N; }
stages=("$@")
fresh_compile_cache() {  # $1: the stage; a fresh inductor and Triton cache for it (see above)
  if [ "${KB_SHARED_COMPILE_CACHE:-0}" = 1 ]; then
    # One pair of folders for every stage. Unset, the worker would use one of its own per process
    # and the judge torch's default, and nothing would be shared.
    export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$OUT/compile-cache-shared/inductor}
    export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$OUT/compile-cache-shared/triton}
    mkdir -p "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"
    return 0
  fi
  rm -rf "$OUT/compile-cache-$1"; mkdir -p "$OUT/compile-cache-$1"
  export TORCHINDUCTOR_CACHE_DIR="$OUT/compile-cache-$1/inductor" TRITON_CACHE_DIR="$OUT/compile-cache-$1/triton"
}
[ ${#stages[@]} -eq 0 ] && stages=(cands toolchain judge compare)

need_bins() {
  for t in kernel-check kernel-prof reward-calc; do
    [ -x "$BIN/$t" ] || die "$BIN/$t missing: build first (cmake --build build) or set BIN"
  done
}
need_gpu() {  # KB_NO_GPU_CHECK=1: for trying the plumbing on a CPU machine (with --compile-only)
  [ "${KB_NO_GPU_CHECK:-0}" = 1 ] && return 0
  if ! nvidia-smi -L >/dev/null 2>&1; then die "no GPU visible (nvidia-smi -L fails): this benchmark needs one"; fi
}

for stage in "${stages[@]}"; do
  case "$stage" in
  cands)
    [ -d "$KB/level1" ] || die "no KernelBench at $KB (set KB=DIR with level1..3)"
    only=()
    for w in ${ONLY:-}; do only+=(--only "$w"); done
    "$PYTHON" "$HERE/make_candidates.py" --kb "$KB" "${only[@]}" -o "$OUT/cands.jsonl" || die "make_candidates failed"
    echo "run.sh: $(wc -l < "$OUT/cands.jsonl") candidates in $OUT/cands.jsonl"
    ;;
  toolchain)
    need_bins; need_gpu
    [ -s "$OUT/cands.jsonl" ] || die "no $OUT/cands.jsonl: run the cands stage first"
    echo "run.sh: toolchain pipe (logs: $OUT/check.err $OUT/prof.err $OUT/reward.err)"
    rm -f "$OUT/toolchain.rc"
    fresh_compile_cache toolchain
    t0=$(now)
    # shellcheck disable=SC2086
    timeout "$STAGE_TIMEOUT" bash -c '
      "$0/kernel-check" --no-store ${TC_CHECK_ARGS:-} -i "$1/cands.jsonl" 2> "$1/check.err" \
        | "$0/kernel-prof" --no-store ${TC_PROF_ARGS:-} 2> "$1/prof.err" \
        | "$0/reward-calc" --no-store ${TC_REWARD_ARGS:-} 2> "$1/reward.err" > "$1/toolchain.jsonl"
      echo "${PIPESTATUS[*]}" > "$1/toolchain.rc"' "$BIN" "$OUT"
    rc=$?
    codes=$(cat "$OUT/toolchain.rc" 2>/dev/null || echo "?")
    t1=$(now)
    wall=$("$PYTHON" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$t1")
    echo "$wall" > "$OUT/toolchain.wall"
    for f in check prof reward; do echo "--- $f.err (tail)"; tail -n 4 "$OUT/$f.err"; done
    if [ "$rc" = 124 ]; then
      echo "run.sh: the toolchain pipe was stopped after ${STAGE_TIMEOUT}s (STAGE_TIMEOUT): $(wc -l < "$OUT/toolchain.jsonl") records came out" >&2
    elif [ "$codes" != "0 0 0" ]; then
      echo "run.sh: the toolchain pipe's exit codes (check, prof, reward): $codes" >&2
    fi
    echo "run.sh: toolchain wall ${wall}s, $(wc -l < "$OUT/toolchain.jsonl") records in $OUT/toolchain.jsonl"
    ;;
  services)
    need_bins; need_gpu
    [ -s "$OUT/cands.jsonl" ] || die "no $OUT/cands.jsonl: run the cands stage first"
    fresh_compile_cache services
    rm -f "$OUT"/svc-*.port
    # Started as the docs start a node's services: the tasks from --tasks (no client's task code is
    # run), a shared secret every request carries; SVC_ADDR=0.0.0.0 adds --public.
    "$PYTHON" -c 'import json, sys
seen = set()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("task") and r["task_id"] not in seen:
        seen.add(r["task_id"]); print(json.dumps(r["task"]))' "$OUT/cands.jsonl" > "$OUT/svc-tasks.jsonl" || die "writing svc-tasks.jsonl"
    (umask 077; "$PYTHON" -c 'import secrets; print(secrets.token_hex(32))' > "$OUT/svc.secret")
    addr=${SVC_ADDR:-127.0.0.1}
    public=(); [ "$addr" = 127.0.0.1 ] || public=(--public)
    ts=$(now)
    # shellcheck disable=SC2086
    "$BIN/kernel-check" --serve "$addr:0" "${public[@]}" --secret-file "$OUT/svc.secret" --tasks "$OUT/svc-tasks.jsonl" \
      --port-file "$OUT/svc-check.port" --no-store ${TC_CHECK_ARGS:-} > /dev/null 2> "$OUT/svc-check.err" &
    pc=$!
    # shellcheck disable=SC2086
    "$BIN/kernel-prof" --serve "$addr:0" "${public[@]}" --secret-file "$OUT/svc.secret" --tasks "$OUT/svc-tasks.jsonl" \
      --port-file "$OUT/svc-prof.port" --no-store ${TC_PROF_ARGS:-} > /dev/null 2> "$OUT/svc-prof.err" &
    pp=$!
    for _ in $(seq 1200); do
      [ -s "$OUT/svc-check.port" ] && [ -s "$OUT/svc-prof.port" ] && break
      kill -0 "$pc" 2>/dev/null && kill -0 "$pp" 2>/dev/null || break
      sleep 0.1
    done
    if ! [ -s "$OUT/svc-check.port" ] || ! [ -s "$OUT/svc-prof.port" ]; then
      kill "$pc" "$pp" 2>/dev/null; tail -5 "$OUT"/svc-*.err >&2; die "the services did not start"
    fi
    t0=$(now)
    start=$("$PYTHON" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$ts" "$t0")
    echo "run.sh: services listening after ${start}s (check $(cat "$OUT/svc-check.port"), prof $(cat "$OUT/svc-prof.port"))"
    timeout "$STAGE_TIMEOUT" bash -c '
      "$2" "$3/via_services.py" --check "http://$(cat "$1/svc-check.port")" --profile "http://$(cat "$1/svc-prof.port")" --secret-file "$1/svc.secret" \
        < "$1/cands.jsonl" 2> "$1/via.err" | "$0/reward-calc" --no-store ${TC_REWARD_ARGS:-} 2> "$1/svc-reward.err" > "$1/services.jsonl"
      echo "${PIPESTATUS[*]}" > "$1/services.rc"' "$BIN" "$OUT" "$PYTHON" "$HERE"
    t1=$(now)
    kill -TERM "$pc" "$pp" 2>/dev/null; wait "$pc" "$pp" 2>/dev/null
    wall=$("$PYTHON" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$t1")
    echo "$wall" > "$OUT/services.wall"; echo "$start" > "$OUT/services.start"
    codes=$(cat "$OUT/services.rc" 2>/dev/null || echo "?")
    [ "$codes" != "0 0" ] && { echo "run.sh: the services pipe's exit codes (client, reward): $codes" >&2; tail -5 "$OUT/via.err" >&2; }
    echo "run.sh: services wall ${wall}s (started in ${start}s), $(wc -l < "$OUT/services.jsonl") records in $OUT/services.jsonl"
    ;;
  judge)
    need_gpu
    [ -s "$OUT/cands.jsonl" ] || die "no $OUT/cands.jsonl: run the cands stage first"
    "$PYTHON" -c "import torch, cupy; assert torch.cuda.is_available(), 'torch sees no GPU'" \
      || die "$PYTHON needs torch with CUDA and CuPy (pip install cupy-cuda13x)"
    echo "run.sh: reference judge (log: $OUT/judge.err)"
    fresh_compile_cache judge
    t0=$(now)
    # shellcheck disable=SC2086
    timeout "$STAGE_TIMEOUT" "$PYTHON" "$HERE/reference_judge.py" ${JUDGE_ARGS:-} -i "$OUT/cands.jsonl" \
      -o "$OUT/judge.jsonl" 2> >(tee "$OUT/judge.err" >&2)
    rc=$?
    t1=$(now)
    wall=$("$PYTHON" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$t1")
    echo "$wall" > "$OUT/judge.wall"
    [ "$rc" = 124 ] && echo "run.sh: the judge was stopped after ${STAGE_TIMEOUT}s (STAGE_TIMEOUT)" >&2
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && echo "run.sh: the judge exited $rc" >&2
    echo "run.sh: judge wall ${wall}s, $(wc -l < "$OUT/judge.jsonl") records in $OUT/judge.jsonl"
    ;;
  compare)
    rm -f "$OUT/compare.txt"   # a compare that cannot run leaves none, never an earlier one
    for f in toolchain judge; do [ -s "$OUT/$f.jsonl" ] || die "no $OUT/$f.jsonl: run the $f stage first"; done
    "$PYTHON" "$HERE/compare.py" "$OUT/toolchain.jsonl" "$OUT/judge.jsonl" --cands "$OUT/cands.jsonl" \
      --toolchain-wall "$(cat "$OUT/toolchain.wall" 2>/dev/null || echo 0)" \
      --judge-wall "$(cat "$OUT/judge.wall" 2>/dev/null || echo 0)" | tee "$OUT/compare.txt"
    if [ -s "$OUT/services.jsonl" ]; then
      echo "--- the toolchain through the judge services (tc columns), started in $(cat "$OUT/services.start")s before the clock"
      "$PYTHON" "$HERE/compare.py" "$OUT/services.jsonl" "$OUT/judge.jsonl" --cands "$OUT/cands.jsonl" \
        --toolchain-wall "$(cat "$OUT/services.wall" 2>/dev/null || echo 0)" \
        --judge-wall "$(cat "$OUT/judge.wall" 2>/dev/null || echo 0)" | tee -a "$OUT/compare.txt"
    fi
    ;;
  *) die "unknown stage '$stage' (cands toolchain services judge compare)" ;;
  esac
done
