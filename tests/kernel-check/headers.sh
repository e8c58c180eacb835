#!/usr/bin/env bash
# Every header the shipped bundle rules allow compiles (CUDA 13 keeps cooperative_groups, cuda/std and the
# C headers under include/cccl): one candidate per header, compile-only, each must be `compiled`. And the
# macros of <cfloat>/<float.h> are there (libcu++'s cfloat is empty under NVRTC: FLT_MAX "is undefined").
set -u
source "$(dirname "$0")/../lib.sh"
KC="$CA_BIN/kernel-check"
export CUDA_AGENT_CACHE="$T/cache"
"$PY" - "$CA_SRC/datasets/skill/rules.yaml" > "$T/in.jsonl" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
block = text.split("allowed_headers:", 1)[1].split("\n\n", 1)[0]
headers = re.findall(r"^\s*-\s*(\S+)\s*$", block, re.M)
assert len(headers) >= 20, headers
body = "__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = a[i] * alpha + b[i];\n}\n"
plan = "dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n"
for h in headers:
    print(json.dumps({"task_id": "hdr", "candidate_id": h, "bundle": {"kernels": {"fused.cu": "#include <%s>\n%s" % (h, body)}, "plan": plan}}))
macros = ("float x = FLT_MAX * FLT_EPSILON + FLT_MIN + FLT_TRUE_MIN; double y = DBL_MAX * DBL_EPSILON + DBL_MIN;\n"
          "static_assert(FLT_MANT_DIG == 24 && DBL_MANT_DIG == 53 && FLT_RADIX == 2 && FLT_MAX_EXP == 128, \"float.h\");\n")
for h in ("cfloat", "float.h"):
    src = "#include <%s>\n__device__ float ca_use() { %s return x + (float)y; }\n%s" % (h, macros, body)
    print(json.dumps({"task_id": "hdr", "candidate_id": h + " macros", "bundle": {"kernels": {"fused.cu": src.replace("ca_use", "use_limits")}, "plan": plan}}))
PY
"$KC" --compile-only --arch sm_90 --no-store < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt" || { echo "FAIL kernel-check exit $?"; tail "$T/err.txt"; exit 1; }
"$PY" - "$T/out.jsonl" <<'PY'
import json, sys
bad = 0
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    c = r["check"]
    n += 1
    ok = c["status"] == "compiled"
    bad += not ok
    print("%s #include <%s>: %s %s" % ("ok  " if ok else "FAIL", r["candidate_id"], c["status"], "" if ok else c.get("reason", "")[:200]))
print("headers: %d, %d failed" % (n, bad))
sys.exit(1 if bad or n == 0 else 0)
PY
