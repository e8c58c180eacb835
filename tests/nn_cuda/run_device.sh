#!/usr/bin/env bash
# Runs the nn_cuda GPU tests, the Hugging Face parity and the benchmark on the device from a carried
# folder of stripped binaries (BIN), each under its own time limit, logging to OUT.
#   BIN=build-nncuda/devbin OUT=/tmp/out bash tests/nn_cuda/run_device.sh [ops model hf bench profile]
set -u
BIN=$(cd "${BIN:?}" && pwd)
OUT=${OUT:-/tmp/nn_cuda_out}
mkdir -p "$OUT"
export CA_SRC=$PWD CA_BIN=$BIN CA_TESTS=$PWD/tests PYTHONUNBUFFERED=1
export CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-$PWD/build-nncuda/devbin/cache}
parts=${*:-ops model hf bench}
status=0
run() {  # name limit command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name rc=$rc $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  tail -n 25 "$OUT/$name.log"
  [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
for p in $parts; do
  case $p in
    ops) run ops 45 "$BIN/nn_cuda_ops" ;;
    model) run model 45 "$BIN/nn_cuda_model" ;;
    hf) run hf 150 bash tests/nn_cuda/hf_parity.sh ;;
    bench) run bench_native 60 "$BIN/nn-cuda-bench" --steps 5
           run bench_torch 60 python3 bench/nn_cuda/bench_torch.py --steps 5 ;;
    profile) CA_NN_CUDA_PROFILE=1 run profile_native 60 "$BIN/nn-cuda-bench" --steps 3 ;;
  esac
done
exit $status
