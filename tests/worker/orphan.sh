#!/usr/bin/env bash
# kill -9 of the tool that started a reference worker, while the worker is busy (task code that
# runs for a minute): the worker exits within a few seconds on its own and removes the tool's
# private work dir under /dev/shm, so nothing is left computing (or holding GPU memory) under PID 1.
set -u
: "${CA_BIN:?}" "${CA_SRC:?}"
export CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
T=$(mktemp -d)
trap 'rm -rf "$T"; [ -n "${wp:-}" ] && kill -9 "$wp" 2>/dev/null' EXIT
printf 'import time\nimport torch\nimport torch.nn as nn\ntime.sleep(60)\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\ndef get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n' > "$T/busy.py"
mkfifo "$T/in"
"$CA_BIN/worker-ping" --device cpu --timeout-ms 120000 < "$T/in" > "$T/out" 2> "$T/err" &
wp=$!
exec 3> "$T/in"
echo "{\"op\":\"load\",\"task_id\":\"busy\",\"code_file\":\"$T/busy.py\"}" >&3
# The worker: worker-ping's child running cuda_agent_worker.
worker=""
for _ in $(seq 100); do
  worker=$(pgrep -P "$wp" -f cuda_agent_worker | head -1)
  [ -n "$worker" ] && break
  sleep 0.1
done
[ -n "$worker" ] || { echo "FAIL: no worker started: $(cat "$T/err")"; exit 1; }
dir=$(tr '\0' '\n' < "/proc/$worker/cmdline" | grep -A1 -- '--work-dir' | tail -1)
[ -d "$dir" ] || { echo "FAIL: the worker's work dir '$dir' is not there"; exit 1; }
sleep 2  # busy in the task's code now
kill -9 "$wp"
wait "$wp" 2>/dev/null
exec 3>&-
gone=""
for _ in $(seq 50); do
  if ! kill -0 "$worker" 2>/dev/null; then gone=1; break; fi
  sleep 0.1
done
[ -n "$gone" ] || { echo "FAIL: worker $worker still running 5 s after its tool was killed"; kill -9 "$worker"; exit 1; }
echo "ok   the busy worker exited after its tool's kill -9"
for _ in $(seq 20); do [ -d "$dir" ] || break; sleep 0.1; done
[ ! -d "$dir" ] || { echo "FAIL: $dir left behind"; exit 1; }
echo "ok   its work dir $dir was removed"
