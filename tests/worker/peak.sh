#!/usr/bin/env bash
# The reference's peak memory (cuda_agent_worker/peak.py), the measure kernel-check's scratch cap
# follows: the device-independent counter against live sets worked out by hand (a conv net, in-place
# ops and views of inputs and params that add nothing), the same count on the meta device, and the
# worker's load answer carrying it as peak_bytes. CPU torch (1.13 on Debian); the CUDA measurement
# against the counter is tests/kernel-check/tolerance_gpu.sh's (label gpu).
set -euo pipefail
. "$CA_SRC/tests/lib.sh"
FX="$CA_SRC/tests/worker/fixtures"

PYTHONPATH="$CA_SRC/libcommon/python" "$PY" - <<'PY' || fail "counter"
import torch
import torch.nn as nn
from cuda_agent_worker.peak import measure_peak

F32 = 4


class ConvNet(nn.Module):
    """conv -> relu -> batchnorm (train) -> add -> conv; every intermediate kept by a local."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        a = self.c1(x)            # A = 2*8*16*16 floats
        a = torch.relu(a)         # A more; the conv's output dies when `a` is rebound: A live
        b = self.bn(a)            # 2A (its batch statistics die inside batch_norm)
        s = a + b                 # 3A
        return self.c2(s)         # + 2*4*16*16: the peak, with a, b, s and the output live


def hand_conv_net(n):
    act = n * 8 * 16 * 16 * F32
    return 3 * act + n * 4 * 16 * 16 * F32


torch.manual_seed(0)
net = ConvNet()
for n in (2, 5):
    x = torch.randn(n, 3, 16, 16)
    with torch.no_grad():
        peak, out = measure_peak(lambda: net(x), "cpu")
    want = hand_conv_net(n)
    assert abs(peak - want) <= 0.01 * want, ("conv net", n, peak, want)
    assert out.shape == (n, 4, 16, 16)


class InPlace(nn.Module):
    """In-place on the input and views of a param: nothing new until the matmul's output."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 32))

    def forward(self, x):
        x.relu_()                   # the input's storage: resident
        wt = self.w.t()             # a view of the param: resident
        y = x.view(-1, 64) @ self.w  # 8 x 32 floats, new
        y.mul_(2.0)                 # in place on its own storage: nothing new
        return y, wt


x = torch.randn(8, 64)
m = InPlace()
with torch.no_grad():
    peak, _ = measure_peak(lambda: m(x), "cpu")
assert peak == 8 * 32 * F32, ("in place", peak)

# The meta device: no memory at all, the same count (make_candidates.py --specs measures there).
net_meta = ConvNet().to("meta")
x_meta = torch.empty(5, 3, 16, 16, device="meta")
with torch.no_grad():
    peak, out = measure_peak(lambda: net_meta(x_meta), "meta")
assert abs(peak - hand_conv_net(5)) <= 0.01 * hand_conv_net(5), ("meta", peak, hand_conv_net(5))
assert out.device.type == "meta"

# Memory freed in the middle: a chain of 4 MiB tensors, each dropped once the next exists.
class Chain(nn.Module):
    def forward(self, x):
        for _ in range(10):
            x = x * 1.5
        return x


x = torch.randn(1 << 20)
with torch.no_grad():
    peak, _ = measure_peak(lambda: Chain()(x), "cpu")
assert peak == 2 * (1 << 20) * F32, ("chain", peak)
print("counter ok, torch", torch.__version__)
PY
pass "the counter matches the hand-worked live sets (conv net, in place, views, meta, a chain)"

# The worker's load answers peak_bytes: linear(16x32 -> 64) then relu, both outputs live at the
# relu (2 x 16 x 64 floats).
printf '%s\n' "{\"op\":\"load\",\"task_id\":\"lr\",\"code_file\":\"$FX/linear_relu.py\"}" \
  "{\"op\":\"load\",\"task_id\":\"cb\",\"code_file\":\"$FX/conv_bn.py\"}" \
  | "$CA_BIN/worker-ping" --write-dir "$T" > "$T/answers.jsonl"
"$PY" - "$T/answers.jsonl" <<'PY' || fail "load answer's peak_bytes"
import json, sys
lr, cb = [json.loads(l) for l in open(sys.argv[1])]
assert lr["ok"] and cb["ok"], (lr, cb)
assert lr["peak_bytes"] == 2 * 16 * 64 * 4, lr["peak_bytes"]
# conv (4x8x16x16) then batchnorm's output, both live at the end of batch_norm.
act = 4 * 8 * 16 * 16 * 4
assert abs(cb["peak_bytes"] - 2 * act) <= 0.01 * act, cb["peak_bytes"]
# Its params say which are module buffers (BatchNorm's running statistics, kernel-check's
# params_unread leaves them out) and which are Parameters.
flag = {p["name"]: p.get("buffer", False) for p in cb["params"]}
assert flag == {"conv.weight": False, "conv.bias": False, "bn.weight": False, "bn.bias": False,
                "bn.running_mean": True, "bn.running_var": True, "bn.num_batches_tracked": True}, flag
PY
pass "the worker's load answers peak_bytes and which params are module buffers"
