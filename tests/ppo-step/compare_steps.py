"""Compares two ppo-step runs of the same step (say CPU and CUDA): each named metric within a relative
tolerance, and each checkpoint's weight update (out - start) by its relative L2 error, read with an
independent safetensors reader (F32 tensors). Exit 1 naming what differs.
usage: compare_steps.py TOL METRICS_A METRICS_B [START OUT_A OUT_B ...]"""
import array
import json
import math
import os
import struct
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from safetensors_f32 import read


def tensors(path):
    return {name: values for name, (shape, values) in read(path).items()}


def get(m, path):
    for k in path.split("."):
        m = m[k]
    return m


tol = float(sys.argv[1])
ma, mb = (json.loads(open(p).readline()) for p in sys.argv[2:4])
bad = []
for key in ["losses.pg_loss", "losses.vf_loss", "losses.kl_loss", "losses.sft_loss", "approx_kl", "entropy",
            "grad_norm.actor", "grad_norm.critic", "explained_variance", "value_mean"]:
    try:
        a, b = get(ma, key), get(mb, key)
    except KeyError:
        continue
    if a is None and b is None:
        continue
    err = abs(a - b) / max(abs(a), 1e-3)
    print("  %-20s %12.6g %12.6g  rel %.2e" % (key, a, b, err))
    if not err <= tol:
        bad.append(key)
for key in ["pg_clipfrac_high", "pg_clipfrac_low", "vf_clipfrac"]:
    if key in ma and ma[key] is not None and abs(ma[key] - mb[key]) > max(0.02, 10 * tol):
        bad.append(key)
rest = sys.argv[4:]
for i in range(0, len(rest), 3):
    start, out_a, out_b = (tensors(p + "/model.safetensors") for p in rest[i:i + 3])
    num = den = 0.0
    for name, w0 in start.items():
        for x0, xa, xb in zip(w0, out_a[name], out_b[name]):
            da, db = xa - x0, xb - x0
            num += (da - db) ** 2
            den += da * da
    err = math.sqrt(num / den) if den > 0 else float("inf")
    print("  update %s vs %s: relative L2 error %.2e (|update| %.3g)" % (rest[i + 1], rest[i + 2], err, math.sqrt(den)))
    if not err <= tol:
        bad.append("weights of " + rest[i + 1])
if bad:
    print("FAIL: differ beyond %g: %s" % (tol, ", ".join(bad)))
    sys.exit(1)
