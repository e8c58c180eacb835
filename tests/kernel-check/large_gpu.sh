#!/usr/bin/env bash
# On the device: a task whose input and output are over 2 GiB each (KernelBench's level-1 sizes; the
# worker once failed them with "Negative size passed to PyBytes_FromStringAndSize"), judged passed
# with an honest kernel and failed with a kernel that skips the tail past 2^31 bytes.
set -u
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
python3 - > "$T/in.jsonl" <<'PY'
import json
code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return torch.relu(x)\n\nbatch_size = 16384\ndim = 40960\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n")
task = {"task_id": "large-relu", "code": code}
honest = r"""
__global__ void relu4(const float4* x, float4* y, long long n4) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
    float4 v = x[i];
    y[i] = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
  }
}
"""
plan = ("dims: {N: inputs.0.numel}\nforward:\n  - launch: relu4\n    grid: [4224]\n    block: [256]\n"
        "    args: [inputs.0, outputs.0, N / 4]\n")
# The classic 32-bit index bug: elements past 2^31 bytes (2^29 floats) are never written.
short = honest.replace("i < n4;", "i < n4 && i < (1LL << 27);")
for cid, src in (("large-honest", honest), ("large-int32-tail", short)):
    print(json.dumps({"task_id": task["task_id"], "candidate_id": cid, "task": task,
                      "bundle": {"kernels": {"relu.cu": src}, "plan": plan}}))
PY
start=$(date +%s)
"$CA_BIN/kernel-check" --no-store -v < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
rc=$?
echo "kernel-check exit $rc in $(( $(date +%s) - start )) s"
tail -4 "$T/err.txt"
python3 - "$T/out.jsonl" <<'PY'
import json, sys
got = {json.loads(l)["candidate_id"]: json.loads(l)["check"] for l in open(sys.argv[1])}
ok = got["large-honest"]["status"] == "passed" and got["large-int32-tail"]["status"] == "incorrect"
for k, c in got.items():
    print("%s: %s (%s)" % (k, c["status"], c.get("reason", "")[:200]))
print("ok   2.7 GB input and output judged" if ok else "FAIL large tensors")
sys.exit(0 if ok else 1)
PY
