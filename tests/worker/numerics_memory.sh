#!/usr/bin/env bash
# The worker's error measures over gigabyte outputs (cuda_agent_worker/numerics.py): _errors (every
# calibration, the load's ill_conditioned) and _rel_diff (the load's stochastic check) work in chunks,
# as published_close does, so their temporaries are bounded by the chunk, not by the output. Whole-
# tensor float64 temporaries came to about 9 times an fp32 output's bytes beside the float64 outputs:
# at level 1's 8.6 GB outputs, more than an 80 GB H100 has (the calibration then failed on every trial,
# and the load's stochastic check failed the load). Checked on CPU torch with the storage counter of
# peak.py (what ops return), against the whole-tensor formulas for the values (NaN and Inf included).
# And an out-of-memory error in the load's insensitivity measure leaves the load standing.
set -euo pipefail
. "$CA_SRC/tests/lib.sh"

PYTHONPATH="$CA_SRC/libcommon/python" "$PY" - <<'PY' || fail "chunked error measures"
import math

import torch

from cuda_agent_worker import numerics
from cuda_agent_worker.peak import measure_peak


def errors_whole(out, out64):
    """The whole-tensor formulas _errors had (the values the chunks must give)."""
    a, b = out.double(), out64.double()
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    both = fa & fb
    mismatched = int((fa != fb).sum())
    n = int(both.sum())
    if n == 0:
        return 0.0, 0.0, mismatched
    d = torch.where(both, a - b, torch.zeros_like(a))
    ref = torch.where(both, b, torch.zeros_like(b))
    ref2, diff2 = float((ref * ref).sum()), float((d * d).sum())
    rms = math.sqrt(ref2 / n)
    return math.sqrt(diff2 / ref2), float(d.abs().max()) / rms, mismatched


def close(x, y):
    return x == y or abs(x - y) <= 1e-12 * max(abs(x), abs(y))


torch.manual_seed(0)
n = 100003                       # not a multiple of the chunk: a short last chunk
out64 = torch.randn(n, dtype=torch.float64) * 3
out = (out64 + 1e-4 * torch.randn(n, dtype=torch.float64)).float()
out[17] = float("nan")           # finite in float64, not here
out64[99999] = float("inf")      # and the other way
out[5] += 1.0                    # three elements off by more than 1e-2 + 1e-2 |float64|, across chunks
out[2500] -= 1.0
out[99000] += 1.0
numerics._CHUNK = 1000
got, want = numerics._errors(out, out64), errors_whole(out, out64)
assert got[2] == want[2] == 2, (got, want)
assert close(got[0], want[0]) and close(got[1], want[1]), (got, want)
both = torch.isfinite(out.double()) & torch.isfinite(out64)
misses_whole = int(((out.double() - out64).abs() > 1e-2 + 1e-2 * out64.abs())[both].sum())
assert got[3] == misses_whole == 3, (got, misses_whole)
abs_whole = float((out.double() - out64).abs()[both].max())
assert got[4] == abs_whole, (got, abs_whole)  # the largest absolute error, in the output's units
assert numerics._errors(out[:0], out64[:0]) == (0.0, 0.0, 0, 0, 0.0)
# _rel_diff: equal to the whole-tensor value; inf where finiteness differs.
a = torch.randn(n)
b = a + 1e-3 * torch.randn(n)
whole = math.sqrt(float((a.double() - b.double()).pow(2).sum()) / float(b.double().pow(2).sum()))
assert close(numerics._rel_diff([a], [b]), whole), (numerics._rel_diff([a], [b]), whole)
c = b.clone()
c[n - 1] = float("nan")
assert numerics._rel_diff([a], [c]) == float("inf")
assert numerics._rel_diff([a], [b.reshape(1, n)]) == float("inf")

# The temporaries: with 2^16-element chunks, what the ops make at once stays under a quarter of the
# fp32 output (the whole-tensor formulas made about nine times it).
numerics._CHUNK = 1 << 16
big = 1 << 22                    # 16 MiB of fp32
o64 = torch.randn(big, dtype=torch.float64)
o32 = o64.float()
for what, fn in (("_errors", lambda: numerics._errors(o32, o64)),
                 ("_rel_diff", lambda: numerics._rel_diff([o32], [o32 * 1.001]))):
    peak, _ = measure_peak(fn, "cpu")
    assert peak is not None, what
    limit = o32.numel() * 4 // 4 + (o32.numel() * 4 if what == "_rel_diff" else 0)  # + the o32 * 1.001 argument
    assert peak < limit, (what, peak, limit)
    print("%s: peak %.1f MiB of temporaries for a %.0f MiB output" % (what, peak / 2**20, o32.numel() * 4 / 2**20))
PY
pass "numerics: _errors and _rel_diff in chunks (values as whole; temporaries bounded by the chunk)"

# Out of memory in the load's insensitivity measure, outside the task's code (the seed-1 draw's copy
# to the device, a variant's temporaries, the comparison): the measure is missing (insensitive None,
# with the error), the load is not lost with it. Simulated on the CPU by a comparison that raises
# what torch raises when a GPU runs out (torch.cuda.OutOfMemoryError is a RuntimeError).
PYTHONPATH="$CA_SRC/libcommon/python" "$PY" - "$T" <<'PY' || fail "load survives an out-of-memory insensitivity measure"
import sys

from cuda_agent_worker import numerics, tasks

code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x) * 2\n\ndef get_inputs():\n    return [torch.randn(64, 32)]\n")


def oom(*args, **kwargs):
    raise RuntimeError("CUDA out of memory. Tried to allocate 8.00 GiB (simulated)")


numerics.published_close = oom
t = tasks.Task("oom-insensitive", code, "cpu", sys.argv[1])
s = t.load_answer()
assert s["insensitive"] is None, s["insensitive"]
assert "RuntimeError: CUDA out of memory" in s["insensitive_evidence"]["error"], s["insensitive_evidence"]
assert s["ill_conditioned"] is False, s["ill_conditioned"]  # the other measures still made
assert s["stochastic"] is False and s["outputs"][0]["shape"] == [64, 32]
print("load answer with insensitive None: %s" % s["insensitive_evidence"]["error"])
PY
pass "tasks: an out-of-memory insensitivity measure leaves the load standing (insensitive None)"
