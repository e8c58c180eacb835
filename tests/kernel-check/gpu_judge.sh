#!/usr/bin/env bash
# On the device: a stream of good and bad candidates through one kernel-check process. Each bad
# bundle gets its status, the process survives faults and hangs, and the next candidate is judged
# correctly. Numerics are the worker's PyTorch reference (atol = rtol = 1e-2).
set -u
KC="$CA_BIN/kernel-check"
HERE=$(cd "$(dirname "$0")" && pwd)  # CA_TESTS is this folder under ctest, tests/ by hand: use our own
MK="python3 $HERE/make_candidate.py"
B="$CA_SRC/datasets/skill/bundles"
TB="$HERE/bundles"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
fails=0
S=$B/scale_add
{
  echo "passed|elementwise";            $MK $S
  echo "passed|row softmax";            $MK $B/row_softmax
  echo "passed|gemm step";              $MK $B/linear_relu_gemm
  echo "passed|tiled gemm kernel";      $MK $B/linear_relu_tiled
  echo "passed|two outputs";            $MK $TB/two_outputs
  echo "passed|conv step (cuDNN)";      $MK $TB/conv_bias
  # Convs that write and read a concatenation's channel slices for the whole batch: staged through
  # packed buffers by the executor (man kernel-check, conv); also among the graph replays below.
  echo "passed|conv chain through staged x and out views"; $MK $TB/conv_chain_views
  # Issue 33's worked bundles (SKILL.md): a recurrence as a repeat with views, a cooperative
  # persistent kernel with grid.sync(), a cluster with distributed shared memory, a channel concat
  # of two convs written through views.
  echo "passed|repeat: RNN recurrence";  $MK $B/rnn_recurrence
  echo "passed|cooperative grid sync";   $MK $B/global_l1_norm_coop
  echo "passed|cluster of 8, DSMEM";     $MK $B/row_sum_cluster
  echo "passed|conv views (concat)";     $MK $B/inception_concat_views
  echo "passed|conv strided views";      $MK $B/concat_strided
  echo "passed|repeat over numbered layers";  $MK $B/mlp_layers_repeat
  echo "incorrect|repeat reads the wrong layer"; $MK $B/mlp_layers_repeat --plan-replace "params.network.{2 * l + 2}.weight" "params.network.{2 * l}.weight"
  echo "passed|gemm on a column slice (lda)"; $MK $TB/gemm_slice
  echo "passed|gemm with a shared b (stride_b 0)"; $MK $TB/gemm_shared_batch
  echo "incorrect|column slice read with the wrong lda"; $MK $TB/gemm_slice --plan-replace "lda: 2 * F" "lda: F"
  # A view one element in (4-byte aligned) with an odd row stride: cuBLASLt's heuristic is told the
  # operands' real alignment (it assumes 256 bytes unless told); reading from x[:, 0] must be wrong.
  echo "passed|gemm on x[:, 1:] (a 4-byte-aligned view)"; $MK $TB/gemm_odd_offset
  echo "incorrect|x[:, 1:] read one element early"; $MK $TB/gemm_odd_offset --plan-replace '"inputs.0[1]"' '"inputs.0[0]"'
  echo "passed|gemm with the GELU_BIAS epilogue (fp32)"; $MK $TB/gemm_gelu
  echo "incorrect|strided view, wrong channel offset"; $MK $B/concat_strided --plan-replace "outputs.0[K1 * H * W]" "outputs.0[(K1 - 1) * H * W]"
  echo "incorrect|staged out view one channel off"; $MK $TB/conv_chain_views --plan-replace 'out: "outputs.0[0]"' 'out: "outputs.0[H * W]"'
  echo "incorrect|repeat one step short"; $MK $B/rnn_recurrence --plan-replace "repeat: T - 1" "repeat: T - 2"
  echo "incorrect|writes zeros";        $MK $S --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = 0.0f;"
  echo "incorrect|skips one element";   $MK $S --replace fused.cu "if (i < n)" "if (i < n && i != 4097)"
  echo "incorrect|one past the end";    $MK $S --replace fused.cu "if (i < n)" "if (i == n - 1) out[n] = 0.0f; if (i < n)"
  echo "incorrect|one before the start"; $MK $S --replace fused.cu "if (i < n)" "if (i == 0) out[-1] = 0.0f; if (i < n)"
  echo "incorrect|modifies an input";   $MK $S --replace fused.cu "out[i] = a[i] * alpha + b[i];" "{ out[i] = a[i] * alpha + b[i]; ((float*)b)[i] = 0.0f; }"
  echo "incorrect|previous call";       $MK $S --replace fused.cu "__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * alpha + b[i];" "__global__ void set_flag(int* flag) { *flag = 1; }
__global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha, float* memo, const int* flag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { if (*flag == 0) memo[i] = a[i] * alpha + b[i]; out[i] = memo[i]; }" \
      --plan-replace "forward:" "scratch:
  memo: {dtype: float32, shape: [N]}
  flag: {dtype: int32, shape: [1]}
forward:" --plan-replace "N, 2.0]" "N, 2.0, scratch.memo, scratch.flag]
  - launch: set_flag
    grid: [1]
    block: [1]
    args: [scratch.flag]"
  echo "timeout|loops forever";         $MK $S --replace fused.cu "if (i < n)" "while (a[0] == a[0]) { __nanosleep(100); } if (i < n)"
  echo "passed|after a timeout";        $MK $S --replace fused.cu "// out" "// variant 2: out"
  echo "runtime_error|illegal address"; $MK $S --replace fused.cu "out[i] = a[i]" "out[i + (1 << 30)] = a[i]"
  echo "passed|after a fault";          $MK $S --replace fused.cu "// out" "// variant 3: out"
  echo "policy_violation|big module array"; $MK $S --replace fused.cu "__global__" "__device__ float state[1 << 20];
__global__" --replace fused.cu "if (i < n) out" "state[i & 1023] += 1.0f; if (i < n) out"
  echo "passed|last";                   $MK $S --replace fused.cu "// out" "// variant 4: out"
} > "$T/cases.txt"
grep -v '^{' "$T/cases.txt" > "$T/expected.txt"
grep '^{' "$T/cases.txt" > "$T/in.jsonl"
start=$(date +%s.%N)
"$KC" --no-store --timeout 2 -v < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err.txt"
rc=$?
end=$(date +%s.%N)
echo "kernel-check exit $rc, $(wc -l < "$T/out.jsonl") records in $(python3 -c "print(round($end - $start, 1))") s"
[ $rc -eq 0 ] || { fails=$((fails + 1)); tail -20 "$T/err.txt"; }
i=0
while IFS='|' read -r want name; do
  i=$((i + 1))
  line=$(sed -n "${i}p" "$T/out.jsonl")
  got=$(echo "$line" | python3 -c "import json,sys; c=json.loads(sys.stdin.read())['check']; print(c['status'] + '|' + c['reason'][:200] + '|' + str(len(c.get('trials', []))) + '|' + str(max([t.get('max_abs_err', 0) for t in c.get('trials', [])] or [0])))")
  status=${got%%|*}
  if [ "$status" = "$want" ]; then echo "ok   $name: $got"; else echo "FAIL $name: expected $want, got $got"; fails=$((fails + 1)); fi
done < "$T/expected.txt"
# Every passed record ran the warm call plus >= 5 fresh trials.
python3 - "$T/out.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
for line in open(sys.argv[1]):
    c = json.loads(line)["check"]
    if c["status"] == "passed":
        assert len(c["trials"]) >= 6 and c["trials"][0]["warm"], c
        assert len({t["seed"] for t in c["trials"]}) == len(c["trials"]), "seeds repeat"
print("ok   passed records have a warm call and >= 5 fresh trials with distinct seeds")
PY
# The same good bundles as CUDA graph replays (how kernel-prof runs them).
head -7 "$T/in.jsonl" > "$T/graph_in.jsonl"
"$KC" --no-store --graph < "$T/graph_in.jsonl" > "$T/graph_out.jsonl" 2>> "$T/err.txt"
g=$(python3 -c "import json,sys; print(' '.join(json.loads(l)['check']['status'] for l in open(sys.argv[1])))" "$T/graph_out.jsonl")
[ "$g" = "passed passed passed passed passed passed passed" ] && echo "ok   --graph: $g" || { echo "FAIL --graph: $g"; fails=$((fails + 1)); }
if python3 -c "import jsonschema" 2>/dev/null; then
  CA_SRC="$CA_SRC" python3 "$CA_SRC/tests/validate_schema.py" check "$T/out.jsonl" && echo "ok   schema" || { echo "FAIL schema"; fails=$((fails + 1)); }
else
  echo "note: schema not validated here (this python3 has no jsonschema); \$OUT/gpu_judge_out.jsonl can be validated with tests/validate_schema.py check"
fi
[ -n "${OUT:-}" ] && cp "$T/out.jsonl" "$OUT/gpu_judge_out.jsonl" && cp "$T/err.txt" "$OUT/gpu_judge_err.txt"
echo "$fails failure(s)"
[ $fails -eq 0 ]
