#!/usr/bin/env python3
"""Write planted task records for the filter test: each is bad in one known way (or good), with
the reason the filter must give in `expect`. usage: make_planted.py FIXTURE_DIR > planted.jsonl"""
import hashlib
import json
import os
import sys

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
TAIL = "\n\nbatch_size = 4\nfeatures = 32\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, features)]\n\n\ndef get_init_inputs():\n    return []\n"


def task(name, forward, expect):
    code = HEAD + ("class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n\n"
                   "    def forward(self, x):\n" + forward + TAIL)
    return {"task_id": hashlib.sha256(code.encode()).hexdigest()[:16], "name": name, "code": code, "expect": expect}


def main():
    fixtures = sys.argv[1]
    rows = [
        task("good_gelu_scale", "        return F.gelu(x) * 2.0\n", None),
        task("stochastic_dropout", "        return F.dropout(x, p=0.5, training=True)\n", "deterministic"),
        task("constant_output", "        return torch.zeros_like(x) + 3.0\n", "not_constant"),
        task("raises_shape", "        return torch.matmul(x, torch.ones(7, 5))\n", "runs_eager"),
        task("nan_output", "        return torch.log(x - 1000.0)\n", "no_nan_inf"),
        task("input_independent", "        return torch.arange(x.numel(), dtype=x.dtype).reshape(x.shape) * 1.0\n",
             "input_dependent"),
        # A constant computed once would pass every check under the published bound (not bit-equal across
        # draws: input_dependent passes it); the judge calls it task_insensitive.
        task("insensitive_bias", "        return x * 1e-5 + 100.0 + torch.arange(x.shape[-1], dtype=x.dtype)\n",
             "input_sensitive"),
        # Catastrophic cancellation: the fp32 reference is ~0.14 (relative L2) from float64, over every bound.
        task("ill_conditioned", "        return (x * 16.0 + 1e8) - 1e8\n", "well_conditioned"),
    ]
    # A near copy of a fixture problem: identifiers and sizes changed, the structure kept.
    with open(os.path.join(fixtures, "level2", "10_Conv2d_GroupNorm_Tanh_HardSwish.py")) as f:
        src = f.read()
    near = (src.replace("batch_size = 4", "batch_size = 2").replace("out_channels = 16", "out_channels = 8")
               .replace("self.conv", "self.c1").replace("self.group_norm", "self.gn").replace("groups = 4", "groups = 2"))
    rows.append({"task_id": "00000000000000aa", "name": "near_copy_of_fixture", "code": near,
                 "expect": "contaminated"})
    for r in rows:
        r["schema"] = "cuda-agent/task/v1"
        r["data_source"] = "planted#1"
        print(json.dumps(r))


if __name__ == "__main__":
    main()
