#!/usr/bin/env bash
# examples/pipeline.sh on the demo set on a GPU: every stage runs, and each bundle gets the verdict
# it was written for; the rewards follow DESIGN.md §7 (failures -1, the slow one 1, the fused
# elementwise one at least 2: one pass against eager's three kernels).
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
nvidia-smi -L >/dev/null 2>&1 || fail "no GPU visible (this test has label gpu)"

(cd "$tmp" && CA_OUT="$tmp/run" CA_BIN="$CA_BIN" bash "$CA_SRC/examples/pipeline.sh") \
  > "$tmp/stdout" 2> "$tmp/stderr" || { tail -40 "$tmp/stderr" >&2; fail "pipeline.sh failed"; }
cat "$tmp/stdout" "$tmp/stderr" | tail -30 >&2
CUDA_AGENT_STORE="$tmp/run/run.db" "$CA_BIN/run-store" query \
  "SELECT json_extract(t.body, '\$.name') AS task, c.status, CAST(w.value AS INTEGER) AS reward
   FROM checks c JOIN tasks t ON t.task_id = c.task_id LEFT JOIN rewards w ON w.candidate_id = c.candidate_id
   WHERE c.run_id = (SELECT run_id FROM runs WHERE tool = 'kernel-check' ORDER BY started_at DESC, rowid DESC LIMIT 1)
   ORDER BY task" | sed 's/[{}"]//g' > "$tmp/verdicts"
cat "$tmp/verdicts" >&2
expect() { grep -qx "$1" "$tmp/verdicts" || fail "expected a line '$1'"; }
expect 'task:gelu,status:policy_violation,reward:-1'
expect 'task:silu,status:compile_error,reward:-1'
expect 'task:tanh_scale,status:plan_error,reward:-1'
expect 'task:row_mean,status:incorrect,reward:-1'
expect 'task:layernorm,status:passed,reward:1'
grep -qE '^task:relu_scale_add,status:passed,reward:[23]$' "$tmp/verdicts" || fail "relu_scale_add: passed with reward 2 or 3"
grep -qE '^task:row_softmax,status:passed,reward:[123]$' "$tmp/verdicts" || fail "row_softmax should pass"
grep -qE '^task:linear_relu,status:passed,reward:[123]$' "$tmp/verdicts" || fail "linear_relu should pass"
echo "pipeline (GPU): ok" >&2
