#!/usr/bin/env bash
# GPU (device) test of the reference worker: eager and torch.compile times of a fixture are positive
# and repeatable within 5%, the compile answer records torch version and mode, the GPU reference
# matches the CPU one (TF32 off), and the filters judge compile and eager time on the GPU.
# Needs: a GPU and a python3 with CUDA torch 2.x. Answers are kept in $WORKER_GPU_OUT if set.
set -euo pipefail
P="$CA_BIN/worker-ping"
FX="$CA_TESTS/worker/fixtures"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
OUTDIR="${WORKER_GPU_OUT:-$T}"
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=$(command -v python3)

{
  echo "{\"op\":\"load\",\"task_id\":\"gg\",\"code_file\":\"$FX/gemm_gelu.py\"}"
  for mode in eager eager compile compile; do
    echo "{\"op\":\"time\",\"task_id\":\"gg\",\"mode\":\"$mode\",\"precision\":\"fp32\",\"metric\":\"device\",\"budget_s\":4,\"rel_ci\":0.01}"
  done
  echo "{\"op\":\"time\",\"task_id\":\"gg\",\"mode\":\"eager\",\"precision\":\"tf32\",\"budget_s\":2}"
  echo "{\"op\":\"time\",\"task_id\":\"gg\",\"mode\":\"eager\",\"precision\":\"bf16\",\"budget_s\":2}"
  echo "{\"op\":\"load\",\"task_id\":\"lr\",\"code_file\":\"$FX/linear_relu.py\"}"
  echo "{\"op\":\"inputs\",\"task_id\":\"lr\",\"seed\":4,\"out\":\"$T/in.safetensors\"}"
  echo "{\"op\":\"reference\",\"task_id\":\"lr\",\"inputs\":\"$T/in.safetensors\",\"out\":\"$T/gpu_out.safetensors\",\"params_out\":\"$T/params.safetensors\"}"
  echo "{\"op\":\"filters\",\"code_file\":\"$FX/linear_relu.py\",\"check_compile\":true}"
  echo "{\"op\":\"filters\",\"code_file\":\"$FX/gemm_gelu.py\",\"check_compile\":true}"
} > "$T/requests.jsonl"
# code_file for filters too: worker-ping reads it for any op.
start=$(date +%s)
"$P" --device cuda:0 --timeout-ms 300000 < "$T/requests.jsonl" > "$OUTDIR/gpu_answers.jsonl"
echo "worker_gpu: answers in $(( $(date +%s) - start )) s"

# The CPU reference of the same inputs, for the numerics check.
printf '%s\n' "{\"op\":\"load\",\"task_id\":\"lr\",\"code_file\":\"$FX/linear_relu.py\"}" \
  "{\"op\":\"reference\",\"task_id\":\"lr\",\"inputs\":\"$T/in.safetensors\",\"out\":\"$T/cpu_out.safetensors\"}" \
  | "$P" --device cpu > "$OUTDIR/cpu_answers.jsonl"

"$PY" - "$OUTDIR/gpu_answers.jsonl" "$T" <<'PY'
import json, sys, struct
import numpy as np
answers = [json.loads(l) for l in open(sys.argv[1])]
T = sys.argv[2]
for a in answers:
    assert a["ok"], a
load, e1, e2, c1, c2, tf, bf, lr, inp, ref, f_lr, f_gg = answers
for t in (e1, e2, c1, c2, tf, bf):
    assert t["time_us"]["median"] > 0, t
    print("%-7s %-4s median %.1f us (events), device %s us, n=%d rel_ci=%.4f stop=%s" % (
        t["mode"], t["precision"]["name"], t["time_us"]["median"],
        "%.1f" % t["device_time_us"]["median"] if t["device_time_us"] else None,
        t["time_us"]["n"], t["time_us"]["rel_ci"] or -1, t["method"]["stop"]))
def close(a, b, what):
    r = abs(a - b) / min(a, b)
    print("%s: %.1f vs %.1f us (%.2f%%)" % (what, a, b, 100 * r))
    assert r < 0.05, "%s not repeatable within 5%%" % what
close(e1["time_us"]["median"], e2["time_us"]["median"], "eager repeat")
close(c1["time_us"]["median"], c2["time_us"]["median"], "compile repeat")
assert e1["device_time_us"] and e1["device_time_us"]["median"] > 0, e1
close(e1["device_time_us"]["median"], e2["device_time_us"]["median"], "eager device-time repeat")
for c in (c1, c2):
    assert c["mode"] == "compile" and c["torch_version"] and c["torch_version"][0] >= "2", c
    assert c["precision"] == {"name": "fp32", "matmul_tf32": False, "cudnn_tf32": False, "autocast": None}, c
assert c1["compile_s"] > 0 and c2["compile_cached"] is True
assert tf["precision"]["matmul_tf32"] is True and bf["precision"]["autocast"] == "bf16"
assert tf["time_us"]["median"] < e1["time_us"]["median"], "tf32 should beat fp32 on a 4096 GEMM"
assert ref["precision"]["matmul_tf32"] is False
v = f_lr["verdicts"]
assert v["runs_compile"]["pass"] is True, v
assert v["eager_time_ms"]["pass"] is False and f_lr["reason"] == "eager_time_ms", f_lr  # ~0.02 ms < 1 ms
v = f_gg["verdicts"]
assert f_gg["kept"] is True, f_gg
assert 1 <= v["eager_time_ms"]["value"] <= 100
def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8]); h = json.loads(data[8:8 + n])
    s, e = h["outputs.0"]["data_offsets"]
    return np.frombuffer(data[8 + n + s:8 + n + e], dtype=np.float32)
g, c = read(T + "/gpu_out.safetensors"), read(T + "/cpu_out.safetensors")
nmse = float(((g - c) ** 2).sum() / (c ** 2).sum())
print("linear_relu GPU vs CPU reference: nmse %.3g, max abs %.3g" % (nmse, float(np.abs(g - c).max())))
assert nmse < 1e-10, nmse
print("worker_gpu: ok")
PY
