#!/usr/bin/env bash
# Red team R8 (session 19): properties of the candidate's time that only a GPU can show (label gpu).
#   cupti: a call's device time sums every kernel of it. A candidate makes the most launches a plan
#     may (16,383 one-thread launches, then the real work: relu*2 on 4096x2048); its device time must
#     not fall below the work's alone, and its relu2 must have one record per timed call, unless
#     kernel-prof voided the time (prof.no_speedup: records lost, 0df9ac4). A loss alike in every
#     call is what no count across calls can see: this looks for one.
#   last: the flush must leave nothing of what a call read in the L2 for the next call, however
#     the call marked it. Params are the same in every call (inputs are fresh), so a kernel that
#     loads the weights with an L2 evict_last policy (createpolicy + ld.L2::cache_hint, inline PTX
#     the rules allow) would find them in the L2 at its next call if neither the persisting-L2
#     reset nor the flush evicts such lines; torch's kernels load them at normal priority and read
#     them from memory every call. A matvec of a 32 MB weight (8192x1024 fp32, in the L2 of the
#     H100 and the H200) by four rows: the evict_last candidate must not be faster than the plain
#     one by more than max(1 us, 5%) (about 10 us from memory; half that or less from the L2).
#     The persisting-L2 reset did not do it (a host call, made while the calls before it are still
#     queued): plain 16.4 us, evict_last 14.9 us (9.1%), H100 at 74234c9. Since session 31 the
#     flush reads at evict_last priority itself, then demotes its own lines.
#   same: the same work as eager must not read faster than eager. A bundle whose forward is one
#     cuBLASLt gemm (what torch.matmul runs: cuBLAS) on a 4096^3 fp32 matmul (~2 ms, compute-bound,
#     power-hungry) must not be more than 5% faster than eager (reward 2 for no work of its own).
#     The candidate's calls come one at a time after an untimed fresh draw (ms of an idle GPU), the
#     baselines' back to back: a GPU at its power limit clocks down under the latter, not the
#     former. Failing it (look at prof.sm_clock_mhz and the kernels) means the sides need the same
#     duty cycle: the baselines' calls spaced like the candidate's (fresh inputs per call there too).
# Usage: timing_probes_gpu.sh cupti|same|last
# (The flush's own probe, evict-first hints after the flush against a steady stream, is
# kernel_prof_gpu_flush_hints in gpu_measure_test.cpp: it needs calls without a flush.)
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
what=${1:?cupti, same or last}
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
elif what == "last":
    add_task("kp-matvec", "        self.linear = nn.Linear(1024, 8192, bias=False)\n",
             "    def forward(self, x):\n        return self.linear(x)", "torch.randn(4, 1024)")
    # One warp per weight row, four input rows; LOAD_W is how the weights are loaded.
    matvec = r"""
__global__ void matvec(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int M, int N, int K) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (row >= N || M != 4) return;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float4* wr = reinterpret_cast<const float4*>(w + (size_t)row * K);
  for (int k4 = lane; k4 < K / 4; k4 += 32) {
    const float4 wv = LOAD_W(wr + k4);
    for (int m = 0; m < 4; ++m) {
      const float4 xv = reinterpret_cast<const float4*>(x + (size_t)m * K)[k4];
      acc[m] += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
    }
  }
  for (int m = 0; m < 4; ++m) {
    float v = acc[m];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) y[(size_t)m * N + row] = v;
  }
}
"""
    plain_w = "#define LOAD_W(p) (*(p))\n"
    last_w = r"""
__device__ __forceinline__ float4 load_evict_last(const float4* p) {
  unsigned long long policy;
  float4 v;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
  return v;
}
#define LOAD_W(p) load_evict_last(p)
"""
    mv_plan = {"dims": {"M": "inputs.0.shape[0]", "K": "inputs.0.shape[1]", "N": "params.linear.weight.shape[0]"},
               "forward": [{"launch": "matvec", "grid": ["cdiv(N * 32, 256)"], "block": [256],
                            "args": ["inputs.0", "params.linear.weight", "outputs.0", "M", "N", "K"]}]}
    recs = []
    for name, head in (("plain", plain_w), ("last", last_w)):
        bundle = {"kernels": {"matvec.cu": head + matvec + "// " + name + "\n"}, "plan": mv_plan}
        recs.append(dict(good, task_id="kp-matvec", name=name, bundle=bundle, candidate_id=cid("kp-matvec", bundle)))
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
rounds=1; [[ $what == last ]] && rounds=3
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
else:
    plain, last = (statistics.median(t[k]) for k in ("plain", "last"))
    print("evict_last weights save %.2f us (%.1f%%); eager %.2f us" %
          (plain - last, 100 * (plain - last) / plain, profs["plain"]["baselines"]["eager"]["time_us"]["median"]))
    assert plain - last <= max(1.0, 0.05 * plain), "weights loaded evict_last stay in the L2 across the flush"
PY
echo "kernel-prof timing probe $what: ok"
