# Sourced by run.sh and import_all.sh: the repository root, the defaults both read, the toolchain's
# environment. Callers set HERE (their own directory) first.
REPO=$(cd "$HERE/../.." && pwd)
cd "$REPO" || exit 1
BIN=${BIN:-build/bin}
KB=${KB:-.kb/KernelBench}
OUT=${OUT:-bench/kernelbench/out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export CUDA_AGENT_PYTHONPATH=${CUDA_AGENT_PYTHONPATH:-$REPO/libcommon/python}
export CUDA_AGENT_DATA=${CUDA_AGENT_DATA:-$REPO/datasets}
