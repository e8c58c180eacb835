#!/usr/bin/env python3
"""Where the reference worker's time goes in a verify: N rounds of the requests kernel-check sends
per trial (inputs kept on the device, then the reference on them), in-process (no pipe), with the
median and spread of each and a cProfile of the rounds. On a CPU worker the inputs go through a file
instead (device tensors need CUDA).

usage: worker_ops.py [--device cuda:0] [--shape 4096,2048] [--n 20] [--profile 25]
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "libcommon", "python"))
import torch  # noqa: E402
from cuda_agent_worker import worker as W  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
p.add_argument("--shape", default="4096,2048")
p.add_argument("--n", type=int, default=20)
p.add_argument("--profile", type=int, default=25, help="cProfile lines to print (0: none)")
a = p.parse_args()
code = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0
def get_inputs():
    return [torch.randn(%s)]
def get_init_inputs():
    return []
""" % a.shape
work = tempfile.mkdtemp(prefix="worker-ops.")
w = W.Worker(torch, a.device, work, 0)
gpu = a.device.startswith("cuda")
w.handle({"op": "load", "task_id": "t", "code": code})
times = {}


def timed(name, req):
    t0 = time.perf_counter()
    ans = w.handle(req)
    if gpu:
        w.give_back_cache()  # as the serving loop does after every answer
    times.setdefault(name, []).append(time.perf_counter() - t0)
    assert ans.get("ok"), ans
    return ans


def round_(seed):
    if gpu:
        timed("inputs", {"op": "inputs", "task_id": "t", "seed": seed, "keep": "in"})
        timed("reference", {"op": "reference", "task_id": "t", "inputs_key": "in", "keep": "ref"})
    else:
        f = os.path.join(work, "in.safetensors")
        timed("inputs", {"op": "inputs", "task_id": "t", "seed": seed, "out": f})
        timed("reference", {"op": "reference", "task_id": "t", "inputs": f, "out": os.path.join(work, "ref.safetensors")})


round_(0)  # one-time costs
times.clear()
prof = cProfile.Profile()
prof.enable()
for i in range(a.n):
    round_(i + 1)
prof.disable()
for name, xs in times.items():
    print(json.dumps({"bench": "worker_ops", "device": a.device, "shape": a.shape, "op": name, "n": len(xs),
                      "p50_ms": round(statistics.median(xs) * 1e3, 3), "min_ms": round(min(xs) * 1e3, 3),
                      "max_ms": round(max(xs) * 1e3, 3)}))
print(json.dumps({"bench": "worker_ops", "build_on_device": bool(getattr(w.tasks["t"], "build_on_device", False))}))
if a.profile:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(a.profile)
    sys.stderr.write(s.getvalue())
