set -u
bash scripts/unpack-on-device.sh 2>/dev/null
export CUDA_AGENT_CACHE=$PWD/build/cache CUDA_AGENT_PYTHONPATH=$PWD/libcommon/python
B=build/bin
python3 tests/kernel-check/make_candidate.py datasets/skill/bundles/scale_add > /tmp/c.jsonl
$B/kernel-check --no-store < /tmp/c.jsonl > /tmp/checked.jsonl 2>/tmp/kc.err; echo "kc rc=$?"; tail -2 /tmp/kc.err
which cuda-gdb; CG=$(which cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb)
timeout 200 $CG -batch -ex "set pagination off" -ex "run < /tmp/checked.jsonl" -ex bt -ex "info threads" --args $B/kernel-prof --no-store --budget-s 0.5 --baseline-budget-s 0.5 --baselines eager -v > /tmp/gdb.out 2>&1; echo "gdb rc=$?"
grep -v "^\[New Thread\|^\[Thread" /tmp/gdb.out | tail -60
