#!/usr/bin/env bash
# Red team R8 (session 19): properties of the candidate's time that only a GPU can show (label gpu).
#   cupti: a call's device time sums every kernel of it. A candidate makes the most launches a plan
#     may (16,383 one-thread launches, then the real work: relu*2 on 4096x2048); its device time must
#     not fall below the work's alone, and its relu2 must have one record per timed call, unless
#     kernel-prof voided the time (prof.no_speedup: records lost, 0df9ac4). A loss alike in every
#     call is what no count across calls can see: this looks for one.
#   same: the same work as eager must not read faster than eager. A bundle whose forward is one
#     cuBLASLt gemm (what torch.matmul runs: cuBLAS) on a 4096^3 fp32 matmul (~2 ms, compute-bound,
#     power-hungry) must not be more than 5% faster than eager (reward 2 for no work of its own).
#     The candidate's calls come one at a time after an untimed fresh draw (ms of an idle GPU), the
#     baselines' back to back: a GPU at its power limit clocks down under the latter, not the
#     former. Failing it (look at prof.sm_clock_mhz and the kernels) means the sides need the same
#     duty cycle: the baselines' calls spaced like the candidate's (fresh inputs per call there too).
# Usage: timing_probes_gpu.sh cupti|same
# (The flush's own probe, kernel_prof_gpu_flush_clears in gpu_measure_test.cpp, replaced the flush
# and last probes in session 31: a kernel's cache hints gain what they gain after any flush; what
# the flush must do is leave nothing of the call before it, which needs calls kernel-prof never makes.)
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
what=${1:?cupti or same}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export CUDA_AGENT_PYTHONPATH="${CUDA_AGENT_PYTHONPATH:-$CA_SRC/libcommon/python}"
export CUDA_AGENT_LOCK_DIR="$T/locks"
PY=$(command -v python3)
$PY "$CA_SRC/tests/kernel-prof/fixtures/make_records.py" "$T"
$PY - "$T" "$what" <<'PY'
import json, sys, hashlib
T, what = sys.argv[1], sys.argv[2]
good = json.loads(open(T + "/cands.jsonl").readline())
def cid(task_id, bundle):
    key = json.dumps({"task_id": task_id, "bundle": bundle}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:16]
def rec(name, src, plan):
    bundle = {"kernels": {"relu2.cu": src + "// " + name + "\n"}, "plan": plan}
    return dict(good, name=name, bundle=bundle, candidate_id=cid("kp-relu2", bundle))
def relu2(body):
    return ("__global__ void relu2(const float* __restrict__ x, float* __restrict__ y, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) " + body + "\n}\n")
def add_task(task_id, init, forward, inputs):
    """A task of the probe's own (a Model with `init` after super().__init__(), `forward`, and
    get_inputs returning [`inputs`]), added to the tasks file."""
    code = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n" + init + "\n" + forward + "\n\n"
            "def get_inputs():\n    return [" + inputs + "]\n\ndef get_init_inputs():\n    return []\n")
    with open(T + "/tasks.jsonl", "a") as f:
        f.write(json.dumps({"task_id": task_id, "code": code}) + "\n")
plan = good["bundle"]["plan"]
plain = relu2("y[i] = fmaxf(x[i], 0.0f) * 2.0f;")
if what == "same":
    add_task("kp-matmul", "", "    def forward(self, a, b):\n        return torch.matmul(a, b)",
             "torch.randn(4096, 4096), torch.randn(4096, 4096)")
    bundle = {"kernels": {}, "plan": {"forward": [{"gemm": {"a": "inputs.0", "b": "inputs.1", "out": "outputs.0"}}]}}
    recs = [dict(good, task_id="kp-matmul", name="same", bundle=bundle, candidate_id=cid("kp-matmul", bundle))]
elif what == "cupti":
    many = dict(plan, forward=[{"repeat": 16383, "index": "t", "steps": [{"launch": "tick", "grid": [1], "block": [1], "args": ["t"]}]}]
                + plan["forward"])
    recs = [rec("plain", plain, plan), rec("many", plain + "__global__ void tick(int unused) {}\n", many)]
else:
    sys.exit("unknown probe " + what)
with open(T + "/probe.jsonl", "w") as f:
    for r in recs:
        f.write(json.dumps(r) + "\n")
PY
rounds=1
for r in $(seq 1 $rounds); do
  "$CA_BIN/kernel-prof" --no-store --tasks "$T/tasks.jsonl" --baselines eager --budget-s 3 --baseline-budget-s 1 \
    < "$T/probe.jsonl" > "$T/out$r.jsonl" 2> "$T/err$r" || { rc=$?; tail -20 "$T/err$r"; fail "kernel-prof exit $rc"; }
done
$PY - "$T" "$what" "$rounds" <<'PY' || fail "$what"
import json, sys, statistics
T, what, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
t, profs = {}, {}
for r in range(1, rounds + 1):
    for rec in map(json.loads, open("%s/out%d.jsonl" % (T, r))):
        p = rec["prof"]
        assert p["status"] == "timed", (rec["name"], p.get("reason"))
        assert p["method"].get("flush") == "read-demote", ("candidate flush", p["method"].get("flush"))
        assert p["method"].get("persisting_l2_set_aside_bytes", 0) == 0, p["method"]
        for side, b in p.get("baselines", {}).items():
            assert b.get("method", {}).get("flush") == "read", ("baseline flush", side, b)
        profs[rec["name"]] = p
        if p.get("device_time_us"):
            t.setdefault(rec["name"], []).append(p["device_time_us"]["median"])
for k, v in t.items():
    print("%-6s device us %s" % (k, ["%.2f" % x for x in v]))
if what == "same":
    m = profs["same"]
    print("same gemm: %.1f us, eager %.1f us, speedup %.3f, sm clock %s, kernels %s" % (
        m["device_time_us"]["median"], m["baselines"]["eager"]["time_us"]["median"], m["speedup_vs_eager"],
        m["sm_clock_mhz"], [k["name"][:50] for k in m["kernels"]]))
    assert m["speedup_vs_eager"] < 1.05, "the same cuBLAS work as eager reads more than 5% faster than eager"
elif what == "cupti":
    m = profs["many"]
    for k in m["kernels"]:
        print("   ", k["name"][:30], "launches", k["launches"], "median us", k["time_us"]["median"])
    if m.get("no_speedup"):
        print("records were lost and the device time voided:", m["no_speedup"])
        sys.exit(0)
    relu = [k for k in m["kernels"] if "relu2" in k["name"]]
    assert relu and relu[0]["launches"] == m["method"]["calls"], "relu2's records lost in every call alike"
    assert t["many"][0] >= t["plain"][0], "the many-launch call reads faster than its work alone"
    print("cupti: every kernel of every call counted at 16,384 launches")
PY
echo "kernel-prof timing probe $what: ok"
