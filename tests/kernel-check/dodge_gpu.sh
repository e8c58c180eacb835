#!/usr/bin/env bash
# On the device (session 18, red team R6): a wrong kernel cannot earn "no verdict" (node_error,
# reference_error: correct null, no reward, no -1) instead of its -1 by asking for more memory than
# the GPU has. The driver holds a launch's per-thread local memory for every thread the GPU can run
# (2048 per SM) for the rest of the process: a wrong kernel whose init launched a kernel with a
# 512 KiB frame (141 GB on a 132-SM H100) failed the runner's load with out of memory, which was
# node_error. Cases, each through kernel-check | reward-calc --allow-unprofiled:
#   1. default rules: that bundle is a policy violation (max_stack_bytes), -1;
#   2. rules lifting max_stack_bytes to 1 MiB: the same bundle's out of memory (or, where the GPU
#      holds 141 GB, its wrong answer) is the candidate's: runtime_error or incorrect, -1, never null;
#   3. lifted: a right kernel whose forward launches a 64 KiB-frame kernel (17.8 GB kept by the
#      runner): judged (passed on an 80 GB GPU), never reference_error;
#   4. lifted, in the same runner after them: the honest control passes (the runner sets the
#      context's stack limit back after every candidate, so the hogs' local memory is not kept);
#   5. default rules: an honest kernel with an 8 KiB frame (the most the rule allows: 2.3 GB) passes;
#   6. lifted: a kernel right on the warm call's randn inputs and wrong on outliers past 10, whose
#      forward also launches a hog, swept from 0 to 504 KiB per thread: one size leaves the reference
#      worker too little memory for the next trial's draw, which was reference_error (no verdict).
#      The draw is made again with the candidate's runner ended (check.redrawn_alone) and the
#      candidate loaded again: every record of the sweep has a verdict (correct true or false).
#      Since the load grows the context's stack to the module's largest frame (session 34, the local
#      scrub), sizes past what the GPU holds fail at load: runtime_error, the candidate's (session 35).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
fails=0
python3 - "$T" <<'PY'
import json, sys
T = sys.argv[1]
task = {"task_id": "r6-dodge-scale", "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n    def forward(self, x):\n        return x * 2.0\n\n"
        "def get_inputs():\n    return [torch.randn(256, 1024)]\n\ndef get_init_inputs():\n    return []\n",
        "inputs": [{"name": "x", "shape": [256, 1024], "dtype": "F32"}], "outputs": [{"shape": [256, 1024], "dtype": "F32"}],
        "params": [], "init_inputs": []}
scale = r"""
__global__ void scale(const float* x, float* y, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * a;
}
"""
hog = r"""
__global__ void hog(float* s, int k) {
  volatile float buf[@N@];
  for (int j = 0; j < @N@; j += 1024) buf[j] = j + k;
  s[threadIdx.x] = buf[(k * 977) % @N@];
}
"""
head = "dims:\n  R: inputs.0.shape[0]\n  C: inputs.0.shape[1]\nscratch:\n  s: {dtype: float32, shape: [32]}\n"
hog_step = "  - launch: hog\n    grid: [1]\n    block: [32]\n    args: [scratch.s, 3]\n"
fwd = "forward:\n  - launch: scale\n    grid: [cdiv(R * C, 256)]\n    block: [256]\n    args: [inputs.0, outputs.0, R * C, @A@]\n"


def rec(name, floats, init_hog, factor):
    plan = head + ("init:\n" + hog_step if init_hog else "") + fwd.replace("@A@", factor) + ("" if init_hog else hog_step)
    return {"task_id": task["task_id"], "candidate_id": "r6-" + name, "task": task,
            "bundle": {"kernels": {"k.cu": scale + hog.replace("@N@", str(floats))}, "plan": plan}}


wrong_init = rec("wrong-init-512k", 131072, True, "3.0")
with open(T + "/default.jsonl", "w") as f:
    for r in [wrong_init, rec("honest-8k", 2048, False, "2.0")]:
        f.write(json.dumps(r) + "\n")
starve = r"""
__global__ void scale(const float* x, float* y, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 10.0f ? 0.0f : x[i] * a;   // right on randn, wrong on outliers
}
"""
with open(T + "/sweep.jsonl", "w") as f:
    for kib in [0, 64, 128, 192, 224, 240, 248, 256, 264, 272, 280, 288, 320, 384, 448, 480, 496, 504]:
        r = rec("sweep-%dk" % kib, max(1024, kib * 256), False, "2.0")
        r["bundle"]["kernels"]["k.cu"] = starve + hog.replace("@N@", str(max(1024, kib * 256)))
        f.write(json.dumps(r) + "\n")
with open(T + "/lifted.jsonl", "w") as f:
    for r in [wrong_init, rec("right-forward-64k", 16384, False, "2.0"), rec("control-after", 16, False, "2.0")]:
        f.write(json.dumps(r) + "\n")
PY
printf 'max_stack_bytes: 1048576\n' > "$T/lift.yaml"
for run in default lifted; do
  extra=()
  [ $run = lifted ] && extra=(--rules "$T/lift.yaml")
  "$CA_BIN/kernel-check" --no-store -v "${extra[@]}" < "$T/$run.jsonl" > "$T/$run.checked.jsonl" 2> "$T/$run.err"
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 1 ] || { echo "FAIL kernel-check ($run) exit $rc"; tail -20 "$T/$run.err"; fails=$((fails + 1)); }
  "$CA_BIN/reward-calc" --no-store --allow-unprofiled < "$T/$run.checked.jsonl" > "$T/$run.rewarded.jsonl" 2> "$T/$run.reward.err"
done
"$CA_BIN/kernel-check" --no-store -v --rules "$T/lift.yaml" < "$T/sweep.jsonl" > "$T/sweep.checked.jsonl" 2> "$T/sweep.err"
python3 - "$T/sweep.checked.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
bad = n = 0
for line in open(sys.argv[1]):
    r = json.loads(line); c = r.get("check") or {}
    n += 1
    ok = c.get("correct") in (True, False)
    bad += not ok
    print("%s sweep   %-22s %-16s correct=%-5s redrawn=%s %s" % ("ok  " if ok else "FAIL", r["candidate_id"], c.get("status"),
                                                                 c.get("correct"), c.get("redrawn_alone", 0), c.get("reason", "")[:120]))
if n != 18:
    print("FAIL sweep: %d records of 18" % n)
    bad += 1
sys.exit(1 if bad else 0)
PY
python3 - "$T" <<'PY' || fails=$((fails + 1))
import json, sys
T = sys.argv[1]
want = {("default", "r6-wrong-init-512k"): ({"policy_violation"}, -1),
        ("default", "r6-honest-8k"): ({"passed"}, 1),
        ("lifted", "r6-wrong-init-512k"): ({"runtime_error", "incorrect"}, -1),
        ("lifted", "r6-right-forward-64k"): ({"passed"}, 1),
        ("lifted", "r6-control-after"): ({"passed"}, 1)}
bad = 0
for run in ("default", "lifted"):
    for line in open("%s/%s.rewarded.jsonl" % (T, run)):
        r = json.loads(line)
        c, w = r.get("check") or {}, r.get("reward") or {}
        key = (run, r["candidate_id"])
        statuses, reward = want.pop(key)
        ok = c.get("status") in statuses and w.get("value") == reward
        bad += not ok
        print("%s %-7s %-22s %-16s reward %-5s %s" % ("ok  " if ok else "FAIL", run, r["candidate_id"], c.get("status"),
                                                    w.get("value"), c.get("reason", "")[:160]))
for key in want:
    print("FAIL %s %s: no record" % key)
    bad += 1
sys.exit(1 if bad else 0)
PY
[ $fails -eq 0 ] && echo "dodge_gpu: pass" || { echo "dodge_gpu: FAIL"; exit 1; }
