#!/usr/bin/env bash
# worker-ping (the WorkerClient driver): help, a round trip, and exit 3 with a clear message when
# the interpreter has no torch or the device is missing.
set -euo pipefail
P="$CA_BIN/worker-ping"
FX="$CA_SRC/tests/worker/fixtures"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py() { /usr/bin/python3 "$@"; }

"$P" --help | grep -q "Example" || fail "--help has no example"
set +e; "$P" --frobnicate 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] || fail "bad flag should exit 1, got $rc"

# Round trip: load from a file, inputs, reference; answers in order, one per request.
printf '%s\n' '{"op":"ping"}' \
  "{\"op\":\"load\",\"task_id\":\"lr\",\"code_file\":\"$FX/linear_relu.py\"}" \
  "{\"op\":\"inputs\",\"task_id\":\"lr\",\"seed\":3,\"out\":\"$T/in.safetensors\"}" \
  "{\"op\":\"reference\",\"task_id\":\"lr\",\"inputs\":\"$T/in.safetensors\",\"out\":\"$T/out.safetensors\"}" \
  | "$P" --write-dir "$T" > "$T/answers.jsonl"
[ "$(wc -l < "$T/answers.jsonl")" = 4 ] || fail "expected 4 answers: $(cat "$T/answers.jsonl")"
py - "$T/answers.jsonl" <<'PY' || fail "answers wrong"
import json, sys
answers = [json.loads(l) for l in open(sys.argv[1])]
assert all(a["ok"] for a in answers), answers
assert [a["id"] for a in answers] == sorted(a["id"] for a in answers)
assert answers[1]["outputs"][0]["shape"] == [16, 64]
assert answers[3]["outputs"][0]["dtype"] == "F32"
PY
# The file is plain safetensors: header length, JSON header, data of the right size.
py - "$T/out.safetensors" <<'PY' || fail "safetensors layout"
import json, struct, sys, os
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
assert n % 8 == 0
s, e = h["outputs.0"]["data_offsets"]
assert e - s == 16 * 64 * 4 and 8 + n + e == len(data)
PY

# No torch in the interpreter named by CUDA_AGENT_PYTHON: exit 3, and the message says torch.
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' > "$T/python-no-torch"; chmod +x "$T/python-no-torch"
set +e; echo '{"op":"ping"}' | CUDA_AGENT_PYTHON="$T/python-no-torch" "$P" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 3 ] || fail "no torch should exit 3, got $rc"
grep -q "torch" "$T/err" || fail "message does not mention torch: $(cat "$T/err")"
set +e; echo '{"op":"ping"}' | CUDA_AGENT_PYTHON=/nonexistent/python3 "$P" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 3 ] || fail "a missing interpreter should exit 3, got $rc"
grep -q "/nonexistent/python3" "$T/err" || fail "message does not name the interpreter: $(cat "$T/err")"

# A GPU asked for where torch sees none: exit 3 naming the device.
if ! py -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  set +e; echo '{"op":"ping"}' | "$P" --device cuda:0 2> "$T/err"; rc=$?; set -e
  [ "$rc" = 3 ] || fail "cuda:0 without a GPU should exit 3, got $rc"
  grep -q "no_device" "$T/err" || fail "message does not say no_device: $(cat "$T/err")"
fi
# warm on a CPU worker: an answer, nothing warmed (the profiler and torch.compile are started on GPUs).
echo '{"op":"warm"}' | "$P" > "$T/warm.jsonl"
py - "$T/warm.jsonl" <<'PY' || fail "warm on the CPU"
import json, sys
a = json.loads(open(sys.argv[1]).readline())
assert a["ok"] is True and a["warmed"] == {}, a
PY

# The baselines' warm-up (timing.warm_up) on a virtual clock: a GPU whose calls speed up as its
# clocks ramp is warmed until its time per call is steady, a busy one stops after the minimum, and
# one that never settles stops at warmup_s.
PYTHONPATH="$CA_SRC/libcommon/python" py - <<'PY' || fail "warm-up rule"
from cuda_agent_worker import timing as T
def run(cost, warmup_s=1.0):
    now = [0.0]
    def fn():
        now[0] += cost(now[0])
    calls, why = T.warm_up(fn, [()], 3, warmup_s, lambda: None, clock=lambda: now[0])
    return calls, why, now[0]
calls, why, t = run(lambda t: 0.002 + 0.002 * max(0.0, 1 - t / 0.3))  # clocks ramp for 0.3 s
assert why == "steady" and 0.35 <= t <= 0.5, (calls, why, t)
calls, why, t = run(lambda t: 0.002)                                 # already at its clocks
assert why == "steady" and T.WARM_MIN_S <= t <= T.WARM_MIN_S + 3 * T.WARM_BATCH_S, (calls, why, t)
calls, why, t = run(lambda t: 0.002 if int(t / T.WARM_BATCH_S) % 2 else 0.003)   # never steady
assert why == "warmup_s" and 1.0 <= t <= 1.1, (calls, why, t)
calls, why, t = run(lambda t: 0.5, warmup_s=0.0)                     # slow calls: the warmup calls only
assert calls == 3 and why == "warmup_s", (calls, why, t)
PY
# The baselines' device time (timing.range_busy_times) on Kineto-like raw events: a call's kernels
# found through the ops that launched them, their overlap counted once, the flush's kernel (outside
# the range) and another thread's op left out, a kernel launched by no op (a graph replay,
# torch.cuda._sleep: torch counts it nowhere) counted in the call during which it started, a GPU
# user annotation left out, and a kernel set that does not match torch's own sum refused.
PYTHONPATH="$CA_SRC/libcommon/python" py - <<'PY' || fail "busy time"
from cuda_agent_worker import timing as T
CPU, GPU = "cpu", "cuda"
class Ev:
    def __init__(self, name, dev, start, end, corr=0, link=0, thread=1, note=False):
        self.v = (name, dev, start, end, corr, link, thread)
        if note:
            self.is_user_annotation = lambda: True
    def name(self): return self.v[0]
    def device_type(self): return self.v[1]
    def start_ns(self): return self.v[2]
    def end_ns(self): return self.v[3]
    def correlation_id(self): return self.v[4]
    def linked_correlation_id(self): return self.v[5]
    def start_thread_id(self): return self.v[6]
R = T.TIMED_RANGE
ev = [
    Ev("aten::amax", CPU, 0, 900, corr=1), Ev("reduce", GPU, 1000, 2000, link=1),      # the flush
    Ev(R, CPU, 3000, 90000, corr=2),
    Ev("aten::_cudnn_rnn", CPU, 4000, 20000, corr=3),
    Ev("fwd", GPU, 10000, 50000, link=3), Ev("bwd", GPU, 10000, 60000, link=3),         # at once: 50 us busy
    Ev("triton_poi", GPU, 61000, 63000, link=2),                                        # launched by no op
    Ev("aten::mm", CPU, 5000, 6000, corr=4, thread=2), Ev("other", GPU, 70000, 71000, link=4),  # another thread
    Ev(R, GPU, 10000, 63000, link=2),                                                  # the range mirrored on the GPU
    Ev(R, CPU, 100000, 200000, corr=5),
    Ev("aten::mm", CPU, 101000, 102000, corr=6), Ev("gemm", GPU, 110000, 113000, link=6),
    Ev("my_range", GPU, 101000, 200000, link=6, note=True),                           # an annotation
]
busy = T.range_busy_times(ev, R, CPU, (GPU,), [92.0, 3.0])
assert [round(b, 6) for b in busy] == [52.0, 3.0], busy
# Kernels that name no op: one before the first call (no call's), two on two streams at once in
# the second call's window (counted once, beside its gemm), one linked to nothing known.
unl = ev + [Ev("early", GPU, 100, 500, link=0),
            Ev("sleep", GPU, 120000, 170000, link=0), Ev("sleep", GPU, 121000, 171000, link=0),
            Ev("graph_k", GPU, 180000, 182000, link=77)]
busy = T.range_busy_times(unl, R, CPU, (GPU,), [92.0, 3.0])
assert [round(b, 6) for b in busy] == [52.0, 3.0 + 51.0 + 2.0], busy
assert T.busy_us([(0, 10), (5, 20), (30, 31)]) == 21 and T.busy_us([]) == 0
try:
    T.range_busy_times(ev, R, CPU, (GPU,), [93.0, 3.0])   # torch counted a kernel not found here
    raise SystemExit("a kernel set unlike torch's was accepted")
except ValueError as e:
    assert "sum to 92.000 us" in str(e), e
try:
    T.range_busy_times(ev, R, CPU, (GPU,), [92.0])
    raise SystemExit("a range count unlike torch's was accepted")
except ValueError as e:
    assert "2 timed ranges" in str(e), e
# And the caller fails closed: no busy time is no device time (a RuntimeError, which time_task
# reports as device_time_error), never torch's sum, which would count an overlap twice.
import torch
torch.cuda.synchronize = lambda: None
x = torch.ones(8, 8)
assert T.profiled_device_times(lambda a: a @ a, [(x,)], None, 2) == [0.0, 0.0]   # CPU: no kernels, busy 0
# The flush (kernel-prof's read method) runs before every profiled call: none for 0 bytes, else a
# read of a buffer of that size (its max is the fill value: read, never written).
assert T.read_flush(0, torch.device("cpu")) is None
flushed = []
flush = T.read_flush(64, torch.device("cpu"))
assert int(flush()) == 0x5A5A5A5A
assert T.profiled_device_times(lambda a: a @ a, [(x,)], lambda: flushed.append(int(flush())), 3) == [0.0] * 3
assert flushed == [0x5A5A5A5A] * 3, flushed
def refuse(*a):
    raise ValueError("kernels unlike torch's")
T.range_busy_times = refuse
try:
    T.profiled_device_times(lambda a: a @ a, [(x,)], None, 2)
    raise SystemExit("a failed busy time fell back to something")
except RuntimeError as e:
    assert "no busy time" in str(e) and "kernels unlike torch's" in str(e), e
PY
# A CUDA context that finds no memory (other workers' tasks hold the device): the hello says
# out_of_memory (the client starts the worker again when no other request runs); another error at
# the device's opening is raised as before. torch's CUDA calls stood in for by a fake.
PYTHONPATH="$CA_SRC/libcommon/python" py - <<'PY' || fail "the hello of a device without memory"
import io, json
from cuda_agent_worker import worker
class Cuda:
    def __init__(self, error): self.error = error
    def is_available(self): return True
    def device_count(self): return 1
    def set_device(self, i): raise RuntimeError(self.error)
    def synchronize(self): pass
class Torch:
    __version__ = "fake"
    def __init__(self, error): self.cuda = Cuda(error)
worker.PROTOCOL_OUT = io.StringIO()
oom = "CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com for more information."
assert worker._open_device(Torch(oom), "cuda:0", 0) is None
h = json.loads(worker.PROTOCOL_OUT.getvalue())
assert h["ok"] is False and h["op"] == "hello" and h["error"] == "out_of_memory", h
assert "cuda:0" in h["detail"] and "CUDA error: out of memory" in h["detail"], h
try:
    worker._open_device(Torch("CUDA error: an illegal memory access was encountered"), "cuda:0", 0)
    raise SystemExit("another error at the opening was not raised")
except RuntimeError as e:
    assert "illegal memory access" in str(e)
PY
echo "worker_cli: ok"
