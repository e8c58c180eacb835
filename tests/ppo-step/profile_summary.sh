#!/usr/bin/env bash
# bench/ppo_step/profile_summary.py (issue 34's next step: where a profiled step's GPU time goes):
# two tables of ppo-step's CA_NN_CUDA_PROFILE format are added up, GEMM FLOPs come from the shapes in
# their names, attention's from --tokens and the config, the memory-bound kernels fall into their
# families; a row outside a table, or a file with no table, is exit 2 naming the line.
source "$(dirname "$0")/lib.sh"
S="$CA_SRC/bench/ppo_step/profile_summary.py"
cat > "$T/config.json" <<'J'
{"hidden_size": 1536, "num_attention_heads": 12}
J
# gemm: 2 x 4096 x 1536 x 8960 = 112.7 GFLOP a call, 10 calls in 5 ms: 225.5 TFLOP/s.
# attention forward at T = 1024, H 12, D 128: 2 x 12 x 1024^2 x 128 = 3.22 GFLOP a call, 28 calls in
# 1 ms (two tables of 14 and 0.5 ms): 90.2 TFLOP/s. dkv: 4 units, 28 calls in 4 ms: 45.1 TFLOP/s.
cat > "$T/profile.txt" <<'P'
nn_cuda profile: ppo-step grpo step 1, scoring and updates: 9.000 ms of kernels
      5.000 ms  55.6%     10 calls  gemm NT 4096x1536x8960 bf16->f32
      0.500 ms   5.6%     14 calls  attention_forward_tc<128, 32>
      3.000 ms  33.3%     28 calls  attention_backward_dkv_tc<128, 32>
      0.500 ms   5.6%     28 calls  rmsnorm_forward<__nv_bfloat16>
nn_cuda profile: ppo-step grpo step 2, scoring and updates: 2.500 ms of kernels
      0.500 ms  20.0%     14 calls  attention_forward_tc<128, 32>
      1.000 ms  40.0%     28 calls  attention_backward_dkv_tc<128, 32>
      0.250 ms  10.0%     28 calls  attention_backward_delta<__nv_bfloat16>
      0.750 ms  30.0%      4 calls  adamw_step
P
"$PY" "$S" "$T/profile.txt" --config "$T/config.json" --tokens 1024 --json > "$T/out.json" || fail "exit $?"
"$PY" - "$T/out.json" <<'PY' || fail "the summary's figures"
import json, sys
r = json.load(open(sys.argv[1]))
f = {x["family"]: x for x in r["families"]}
def near(a, b): return abs(a - b) <= 1e-3 * abs(b)
checks = [
    (len(r["tables"]) == 2, "two tables"),
    (near(r["kernel_ms"], 11.5), "kernel ms %s" % r["kernel_ms"]),
    (near(f["gemm (cuBLASLt)"]["tflops"], 2 * 4096 * 1536 * 8960 * 10 / 5e-3 / 1e12), "gemm rate"),
    (f["attention: forward"]["calls"] == 28 and near(f["attention: forward"]["ms"], 1.0), "forward summed"),
    (near(f["attention: forward"]["tflops"], 2 * 12 * 1024**2 * 128 * 28 / 1e-3 / 1e12), "forward rate"),
    (near(f["attention: backward_dkv"]["tflops"], 4 * 12 * 1024**2 * 128 * 56 / 4e-3 / 1e12), "dkv rate"),
    (f["rmsnorm"]["tflops"] is None and near(f["rmsnorm"]["ms"], 0.5), "rmsnorm time only"),
    (near(f["optimizer"]["ms"], 0.75) and near(f["attention (delta, kv sum)"]["ms"], 0.25), "families"),
    (r["families"][0]["family"] == "gemm (cuBLASLt)", "largest first"),
    (near(sum(x["share"] for x in r["families"]), 1.0), "shares add up"),
]
bad = [m for ok, m in checks if not ok]
print("summary: %s" % ("ok" if not bad else "wrong: %s" % bad))
sys.exit(1 if bad else 0)
PY
"$PY" "$S" "$T/profile.txt" --config "$T/config.json" --tokens 1024 | grep -E "^gemm \(cuBLASLt\) +5\.0 +43\.5% +10 +225\.5 +22\.8%$" > /dev/null ||
  fail "the table's gemm row: $("$PY" "$S" "$T/profile.txt" --config "$T/config.json" --tokens 1024 | grep gemm)"
# Without --tokens and --config: attention has time, no rate.
"$PY" "$S" "$T/profile.txt" --json | "$PY" -c 'import json,sys; r=json.load(sys.stdin); f={x["family"]: x for x in r["families"]}
sys.exit(0 if f["attention: forward"]["tflops"] is None and f["gemm (cuBLASLt)"]["tflops"] else 1)' || fail "no config: attention's rate should be absent"
# Bad input: a row outside any table, and no table at all.
{ echo "      1.000 ms  10.0%      3 calls  rope"; cat "$T/profile.txt"; } > "$T/bad.txt"
"$PY" "$S" "$T/bad.txt" 2> "$T/err" && fail "a row outside a table was accepted"
[ $? -eq 2 ] || fail "expected exit 2"
grep -q "line 1: not a row of an nn_cuda profile table" "$T/err" || fail "the error does not name the line: $(cat "$T/err")"
echo "nothing here" | "$PY" "$S" - 2> "$T/err2" && fail "input with no table was accepted"
grep -q "line 1" "$T/err2" || grep -q "no 'nn_cuda profile:' table" "$T/err2" || fail "no-table error: $(cat "$T/err2")"
pass "profile_summary: families, GEMM and attention rates, bad input"
