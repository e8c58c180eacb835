#!/usr/bin/env bash
# One call's worth of GPU work on a machine that got this checkout and .devcarry/ (see
# scripts/pack-for-device.sh): unpack the build, then run the parts asked for, each under its own
# time limit, within a total budget, and put every log into one archive (device runners often
# return only a few files).
#   OUT=/results BUDGET_S=560 bash scripts/device-session.sh gpu-tests nn-bench filter-throughput
# Parts: gpu-tests (ctest -L gpu, the 50-task filter test excluded unless GPU_TESTS names it:
# filter-throughput measures it;
# the gpu_shared ones first, GPU_SHARED_J at once (default 4), then the rest one at a time;
# GPU_TESTS=REGEX runs only the tests it matches, GPU_PART=N the tests of part N of
# scripts/gpu-parts.txt; GPU_TESTS_VERBOSE=1 keeps every test's output),
# nn-tests (the native transformer's ops, model and Hugging Face parity), nn-bench (its benchmark
# against PyTorch, with the per-kernel profile), ppo-bench (bench/ppo_step: ppo-step's own tokens/s
# on the ~100M config), ppo-large (bench/ppo_step/large.sh's LARGE_CASES, default lora-32b:4096 on a
# dummy base), judge-bench (bench/judge_latency.sh: verify and profile latency through the
# judge services against a process per call), filter-throughput (bench/ops_synth, -j 16 on cuda:0
# for what time is left), ipc-probe (bench/ipc_probe.py), state-probe (bench/state_probe.cu), kb (bench/kernelbench/run.sh, stages
# $KB_STAGES), worker-ops (bench/worker_ops.py: the worker's requests of a verify, profiled), kb-import (all 250 KernelBench tasks imported with -j 8). The archive is
# $OUT/results.tgz; a summary is printed.
set -u
cd "$(dirname "$0")/.."
t0=$(date +%s)
OUT=${OUT:?set OUT to the folder that comes back}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-560}
R=$(mktemp -d)
left() { echo $((BUDGET_S - ($(date +%s) - t0))); }
if [ -n "${GPU_PART:-}" ]; then  # one part of scripts/gpu-parts.txt, as a GPU_TESTS regex
  GPU_TESTS=$(bash scripts/gpu-part-regex.sh "$GPU_PART") || exit 1
fi
bash scripts/unpack-on-device.sh
export CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-$PWD/build/cache}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
# HMM: can a kernel reach the process's ordinary host memory? (recorded in kernel-prof's gpu section)
nvidia-smi -q 2>/dev/null | grep -i 'addressing mode' || true
for part in "$@"; do
  l=$(left)
  [ "$l" -gt 30 ] || { echo "== $part skipped: $l s left"; continue; }
  echo "== $part ($l s left)"
  case $part in
    gpu-tests)
      # --stop-time: ctest itself ends a test that would run past the budget, and then still prints
      # its output (--output-on-failure); the outer timeout, which kills ctest and leaves nothing of
      # the running test, is only the backstop.
      # --output-junit keeps every test's output, a passed one's too (its figures, for the note).
      # Two passes: the gpu_shared tests (numbers only, little memory: tests/CMakeLists.txt) share the
      # GPU, GPU_SHARED_J at a time (default 4; 1 runs them alone); then every other gpu test alone.
      # Tests that keep files for the note write them under $OUT: here that is inside results.tgz,
      # since at most 8 files come back from a call (session 30 lost results.tgz behind eight).
      stop_at() { date -d "+$(( $1 > 40 ? $1 - 20 : $1 / 2 )) seconds" +%H:%M:%S; }
      # After each pass, what it left to read (scripts/gpu-pass-report.sh): its failures' last lines,
      # the test the budget's stop time ended (ctest says "Timeout") and the tests it never started.
      report() { bash scripts/gpu-pass-report.sh build "$@" || true; }
      mkdir -p "$R/files"
      timeout "$l" env OUT="$R/files" ctest --test-dir build -L gpu_shared -j "${GPU_SHARED_J:-4}" ${GPU_TESTS:+-R "$GPU_TESTS"} --output-on-failure ${GPU_TESTS_VERBOSE:+-V} \
        --output-junit "$R/gpu-tests-shared.junit.xml" --stop-time "$(stop_at "$l")" > "$R/gpu-tests-shared.log" 2>&1
      rc=$?; echo "rc=$rc (gpu_shared, -j ${GPU_SHARED_J:-4})"; grep -E "tests passed|Failed|Passed" "$R/gpu-tests-shared.log" | tail -12
      report "$R/gpu-tests-shared.log" "$R/gpu-tests-shared.junit.xml" -L gpu_shared ${GPU_TESTS:+-R "$GPU_TESTS"}
      l=$(left)
      # The filter test is left out of a whole run (filter-throughput measures it), not out of one
      # that names its tests.
      excl=(-E ops_synth_filter_gpu); [ -n "${GPU_TESTS:-}" ] && excl=()
      [ "$l" -gt 30 ] || { echo "== the rest of gpu-tests skipped: $l s left"
        report "" "" -L gpu -LE gpu_shared "${excl[@]}" ${GPU_TESTS:+-R "$GPU_TESTS"}; continue; }
      timeout "$l" env OUT="$R/files" ctest --test-dir build -L gpu -LE gpu_shared "${excl[@]}" ${GPU_TESTS:+-R "$GPU_TESTS"} --output-on-failure ${GPU_TESTS_VERBOSE:+-V} \
        --output-junit "$R/gpu-tests.junit.xml" --stop-time "$(stop_at "$l")" > "$R/gpu-tests.log" 2>&1
      rc=$?; echo "rc=$rc (the rest, one at a time)"; grep -E "tests passed|Failed|Passed" "$R/gpu-tests.log" | tail -20
      report "$R/gpu-tests.log" "$R/gpu-tests.junit.xml" -L gpu -LE gpu_shared "${excl[@]}" ${GPU_TESTS:+-R "$GPU_TESTS"} ;;
    nn-tests)
      BIN=build/bin OUT=$R/nn bash tests/nn_cuda/run_device.sh ops model hf 2>&1 | grep -E "^==|SUCCESS|FAIL|hf_parity" ;;
    nn-bench)
      BIN=build/bin OUT=$R/nn bash tests/nn_cuda/run_device.sh bench profile 2>&1 | grep -E "^==|tokens_per_s" | cut -c1-300
      grep -A12 "nn_cuda profile" "$R/nn/profile_native.log" 2>/dev/null | head -30 ;;
    ppo-bench)
      timeout "$l" env BIN=build/bin OUT="$R/ppo" bash bench/ppo_step/throughput.sh > "$R/ppo-bench.log" 2>&1
      echo "rc=$?"; grep '^{' "$R/ppo-bench.log"; tail -3 "$R/ppo-bench.log" | grep -v '^{'
      rm -rf "$R/ppo/policy" "$R/ppo/critic" "$R"/ppo/ep_* ;;
    judge-bench)
      timeout "$l" env WORK="$R/judge" ${JUDGE_PROCESS_N:+PROCESS_N=$JUDGE_PROCESS_N} bash bench/judge_latency.sh build "${JUDGE_N:-20}" > "$R/judge-bench.log" 2>&1
      echo "rc=$?"; grep '^{' "$R/judge-bench.log"; grep -v '^{' "$R/judge-bench.log" | tail -3
      rm -rf "$R/judge/cache" ;;
    filter-throughput)
      s=$(( $(left) - 20 ))
      BIN=build/bin JOBS=${JOBS:-16} DEVICES=${DEVICES:-cuda:0} SECONDS_MAX=$s N=${N:-4000} \
        bash bench/ops_synth/filter_throughput.sh "$R/filter"
      rm -f "$R/filter/gen.jsonl" ;;
    worker-ops)
      timeout 120 python3 bench/worker_ops.py --n "${WORKER_OPS_N:-20}" > "$R/worker-ops.log" 2>&1; echo "rc=$?"; head -60 "$R/worker-ops.log" | cut -c1-300 ;;
    ipc-probe)
      timeout 120 python3 bench/ipc_probe.py > "$R/ipc-probe.log" 2>&1; echo "rc=$?"; cat "$R/ipc-probe.log" | cut -c1-400 ;;
    state-probe)
      # bench/state_probe.cu (built here with nvcc): kernel parameters written between graph replays,
      # pageable host memory from a kernel (HMM), the cooperative grid workspace behind %envreg1/2,
      # module variables, predicate and uniform registers, every %envreg (probes 1-8; STATE_PROBES picks).
      cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
      { timeout 120 nvcc -arch="sm_$cc" -o "$R/state_probe" bench/state_probe.cu -L"$(dirname "$(command -v nvcc)")/../lib64/stubs" -lcuda -lnvrtc && for p in ${STATE_PROBES:-5 6 8 7 1 1b 4 2 3}; do echo "== probe $p"; timeout 30 "$R/state_probe" "$p"; echo "== probe $p: exit $?"; done; } > "$R/state-probe.log" 2>&1
      echo "rc=$?"; cut -c1-400 "$R/state-probe.log"
      # The probes' SASS (which physical, predicate and uniform registers their reads landed on).
      cuobjdump -sass "$R/state_probe" > "$R/state_probe.sass" 2>&1 || echo "no cuobjdump: $(command -v nvcc)"
      # And executor_gpu's register probe (bench/register_probe.cu): do look's reads land on 48 registers?
      { nvcc -arch="sm_$cc" -cubin -Xptxas -v -o "$R/register_probe.cubin" bench/register_probe.cu && cuobjdump -sass "$R/register_probe.cubin"; } > "$R/register_probe.sass" 2>&1 || echo "register_probe.cu: no SASS" ;;
    ppo-large)
      # bench/ppo_step/large.sh, LARGE_CASES (default: the 32B LoRA step at 4k on a dummy base), one run
      # each; its bases and checkpoints stay out of the archive, its rows and the step's stderr tail go in
      # (LARGE_PROFILE=1: the GPU time by kernel of each step, large.sh's PROFILE; LARGE_EPOCHS: its EPOCHS).
      w=$(mktemp -d); mkdir -p "$R/ppo-large"
      timeout "$(left)" env BIN=build/bin OUT="$w" CASES="${LARGE_CASES:-lora-32b:4096}" REPS=${LARGE_REPS:-1} KEEP=0 PROFILE=${LARGE_PROFILE:-0} EPOCHS=${LARGE_EPOCHS:-1} \
        bash bench/ppo_step/large.sh > "$R/ppo-large/large.log" 2>&1
      echo "rc=$?"; cat "$w/results.jsonl" 2>/dev/null | cut -c1-400
      cp "$w/results.jsonl" "$w"/profile_*.txt "$R/ppo-large/" 2>/dev/null; tail -c 4000 "$w/err" > "$R/ppo-large/err.tail" 2>/dev/null
      cat "$R"/ppo-large/profile_*_summary.txt 2>/dev/null | head -40
      tail -3 "$R/ppo-large/err.tail"; rm -rf "$w" ;;
    kb)
      # bench/kernelbench (KB_STAGES, default: cands toolchain), task files from .kb/ (carried). The
      # stages share one torch.compile cache (KB_SHARED_COMPILE_CACHE, default 1 here): the judge then
      # reuses the toolchain worker's compiled graphs (session 26: its stage took 23-65 s a level-3
      # batch instead of about as long as the toolchain's); 0 gives each stage its own, for wall times.
      mkdir -p "$R/kb"
      timeout "$(left)" env BIN=build/bin OUT="$R/kb" KB_SHARED_COMPILE_CACHE=${KB_SHARED_COMPILE_CACHE:-1} STAGE_TIMEOUT=${KB_STAGE_TIMEOUT:-$(( $(left) - 15 ))} bash bench/kernelbench/run.sh ${KB_STAGES:-cands toolchain} \
        > "$R/kb.log" 2>&1
      echo "rc=$?"; tail -25 "$R/kb.log" | cut -c1-400; rm -rf "$R"/kb/compile-cache-* ;;
    kb-import)
      mkdir -p "$R/kb-import"
      timeout "$(left)" env BIN=build/bin OUT="$R/kb-import" bash bench/kernelbench/import_all.sh > "$R/kb-import.log" 2>&1
      echo "rc=$?"; tail -30 "$R/kb-import.log" | cut -c1-400 ;;
    *) echo "unknown part $part (gpu-tests nn-tests nn-bench ppo-bench ppo-large judge-bench filter-throughput worker-ops ipc-probe kb kb-import)" ;;
  esac
done
tar czf "$OUT/results.tgz" -C "$R" .
echo "results: $OUT/results.tgz ($(du -h "$OUT/results.tgz" | cut -f1)), $(( $(date +%s) - t0 )) s"
