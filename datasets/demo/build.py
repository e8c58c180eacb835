#!/usr/bin/env python3
"""Builds the demo set from its sources: tasks.jsonl (8 KernelBench-format tasks), candidates.jsonl
(one candidate record per task, bundle from bundles/<name>/) and replay.jsonl (agent-run's
replay:FILE script per task: write the files, compile, verify, stop). Rerun after editing a
bundle or a task here; the outputs are committed so the demo needs no Python.

Ids follow libcommon/ids.cpp: sha256 over canonical JSON (sorted keys, compact separators, UTF-8
as is), first 16 hex digits; task_id over {code, init_inputs, inputs}, candidate_id over
{task_id, bundle}.
usage: python3 datasets/demo/build.py [--check]   (--check: exit 1 if the committed files differ)
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"


def f32(name, shape):
    return {"name": name, "shape": shape, "dtype": "F32"}


def out(shape):
    return {"shape": shape, "dtype": "F32"}


# name, ops, forward code (Model), globals, get_inputs body, init inputs, inputs, params, outputs,
# and what the candidate is meant to show (expected check status on a GPU; with --compile-only).
TASKS = [
    dict(name="relu_scale_add", ops=["torch.mul", "torch.add", "torch.relu"],
         init="", forward="def forward(self, a, b):\n        return torch.relu(a * 2.0 + b)",
         globals="N = 1 << 22", get_inputs="[torch.randn(N), torch.randn(N)]", init_inputs=[],
         inputs=[f32("a", [4194304]), f32("b", [4194304])], params=[], outputs=[out([4194304])],
         bundle="relu_scale_add", kind="correct and fast (one fused float4 pass against three eager kernels)",
         expect_gpu="passed", expect_cpu="compiled"),
    dict(name="row_softmax", ops=["torch.softmax"],
         init="", forward="def forward(self, x):\n        return torch.softmax(x, dim=1)",
         globals="ROWS, COLS = 4096, 1024", get_inputs="[torch.randn(ROWS, COLS)]", init_inputs=[],
         inputs=[f32("x", [4096, 1024])], params=[], outputs=[out([4096, 1024])],
         bundle="row_softmax", kind="correct (online softmax, one block per row, shuffle reductions)",
         expect_gpu="passed", expect_cpu="compiled"),
    dict(name="linear_relu", ops=["nn.Linear", "torch.relu"],
         init="def __init__(self, in_features, out_features):\n        super().__init__()\n"
              "        self.fc = nn.Linear(in_features, out_features)",
         forward="def forward(self, x):\n        return torch.relu(self.fc(x))",
         globals="", get_inputs="[torch.randn(1024, 2048)]", init_inputs=[2048, 1024],
         inputs=[f32("x", [1024, 2048])], params=[f32("fc.weight", [1024, 2048]), f32("fc.bias", [1024])],
         outputs=[out([1024, 1024])],
         bundle="linear_relu", kind="correct (cuBLASLt gemm step, bias and ReLU in the epilogue)",
         expect_gpu="passed", expect_cpu="compiled"),
    dict(name="layernorm", ops=["nn.LayerNorm"],
         init="def __init__(self, normalized_shape):\n        super().__init__()\n"
              "        self.ln = nn.LayerNorm(normalized_shape)",
         forward="def forward(self, x):\n        return self.ln(x)",
         globals="", get_inputs="[torch.randn(4096, 1024)]", init_inputs=[1024],
         inputs=[f32("x", [4096, 1024])], params=[f32("ln.weight", [1024]), f32("ln.bias", [1024])],
         outputs=[out([4096, 1024])],
         bundle="layernorm_naive", kind="correct and slow (one thread per row, uncoalesced)",
         expect_gpu="passed", expect_cpu="compiled"),
    dict(name="row_mean", ops=["torch.mean"],
         init="", forward="def forward(self, x):\n        return x.mean(dim=1)",
         globals="", get_inputs="[torch.randn(4096, 1024)]", init_inputs=[],
         inputs=[f32("x", [4096, 1024])], params=[], outputs=[out([4096])],
         bundle="row_mean_wrong", kind="wrong (writes the row sum, not the mean)",
         expect_gpu="incorrect", expect_cpu="compiled"),
    dict(name="gelu", ops=["F.gelu"],
         init="", forward="def forward(self, x):\n        return F.gelu(x)",
         globals="", get_inputs="[torch.randn(2048, 2048)]", init_inputs=[],
         inputs=[f32("x", [2048, 2048])], params=[], outputs=[out([2048, 2048])],
         bundle="gelu_clock", kind="policy violation (reads clock64)",
         expect_gpu="policy_violation", expect_cpu="policy_violation"),
    dict(name="silu", ops=["torch.sigmoid", "torch.mul"],
         init="", forward="def forward(self, x):\n        return x * torch.sigmoid(x)",
         globals="N = 1 << 22", get_inputs="[torch.randn(N)]", init_inputs=[],
         inputs=[f32("x", [4194304])], params=[], outputs=[out([4194304])],
         bundle="silu_typo", kind="compile error (undefined identifier)",
         expect_gpu="compile_error", expect_cpu="compile_error"),
    dict(name="tanh_scale", ops=["torch.tanh", "torch.mul"],
         init="", forward="def forward(self, x):\n        return 0.5 * torch.tanh(x)",
         globals="N = 1 << 22", get_inputs="[torch.randn(N)]", init_inputs=[],
         inputs=[f32("x", [4194304])], params=[], outputs=[out([4194304])],
         bundle="tanh_scale_arity", kind="plan error (an argument left out)",
         expect_gpu="plan_error", expect_cpu="plan_error"),
]


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_id(value):
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()[:16]


def task_code(t):
    init = t["init"] or "def __init__(self):\n        super().__init__()"
    code = HEADER + "class Model(nn.Module):\n    " + init + "\n\n    " + t["forward"] + "\n\n"
    if t["globals"]:
        code += t["globals"] + "\n\n"
    code += "def get_inputs():\n    return " + t["get_inputs"] + "\n\n"
    code += "def get_init_inputs():\n    return " + json.dumps(t["init_inputs"]) + "\n"
    return code


def read_bundle(name):
    folder = os.path.join(HERE, "bundles", name)
    kernels = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith((".cu", ".cuh")):
            with open(os.path.join(folder, f)) as fh:
                kernels[f] = fh.read()
    with open(os.path.join(folder, "plan.yaml")) as fh:
        plan = fh.read()
    return {"kernels": kernels, "plan": plan}


def build():
    tasks, candidates, replays = [], [], []
    for k, t in enumerate(TASKS):
        code = task_code(t)
        task = {"schema": "cuda-agent/task/v1", "name": t["name"], "ops": t["ops"],
                "data_source": "cuda-agent-demo#%d" % len(t["ops"]), "code": code,
                "init_inputs": t["init_inputs"], "inputs": t["inputs"], "outputs": t["outputs"]}
        if t["params"]:
            task["params"] = t["params"]
        task_id = content_id({"code": code, "init_inputs": t["init_inputs"], "inputs": t["inputs"]})
        task = {"task_id": task_id, **task}
        tasks.append(task)
        bundle = read_bundle(t["bundle"])
        candidate_id = content_id({"task_id": task_id, "bundle": bundle})
        candidates.append({"schema": "cuda-agent/candidate/v1", "task_id": task_id, "candidate_id": candidate_id,
                           "demo": {"case": t["bundle"], "kind": t["kind"], "expect_check_status": t["expect_gpu"],
                                    "expect_compile_only_status": t["expect_cpu"]},
                           "bundle": bundle, "task": task})
        # The agent's turns, scripted: write each file, compile, verify, then stop.
        turns = []
        for fname, src in bundle["kernels"].items():
            turns.append({"content": "Writing kernels/%s." % fname, "tool_calls": [
                {"name": "write_file", "arguments": {"path": "kernels/" + fname, "content": src}}]})
        turns.append({"content": "Writing the plan.", "tool_calls": [
            {"name": "write_file", "arguments": {"path": "plan.yaml", "content": bundle["plan"]}}]})
        turns.append({"content": "Compiling.", "tool_calls": [{"name": "compile", "arguments": {}}]})
        turns.append({"content": "Verifying.", "tool_calls": [{"name": "verify", "arguments": {}}]})
        turns.append({"content": "Done: submitting the workspace as it is."})
        replays.append({"task_id": task_id, "turns": turns})
    return {"tasks.jsonl": tasks, "candidates.jsonl": candidates, "replay.jsonl": replays}


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, records in build().items():
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        path = os.path.join(HERE, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(name)
            if not check:
                with open(path, "w") as fh:
                    fh.write(text)
    if check and stale:
        print("demo: stale, rerun datasets/demo/build.py: " + ", ".join(stale), file=sys.stderr)
        return 1
    print("demo: " + ("checked" if check else "wrote") + " tasks.jsonl, candidates.jsonl, replay.jsonl"
          + (" (updated: " + ", ".join(stale) + ")" if stale and not check else ""), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
