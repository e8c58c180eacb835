#!/usr/bin/env bash
# examples/pipeline.sh on the demo set without a GPU (CA_FORCE_CPU=1): it must exit 0, say what
# it skipped and why, and give the compile-only verdict each demo bundle was written for; the CPU
# loop runs its iteration and the report ends the run.
# Also: the demo's generated files are up to date with their sources, and validate.
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=${CUDA_AGENT_PYTHON:-/usr/bin/python3}
for b in kernel-check run-store; do [[ -x $CA_BIN/$b ]] || fail "$CA_BIN/$b not built"; done

"$py" "$CA_SRC/datasets/demo/build.py" --check || fail "datasets/demo is stale (run datasets/demo/build.py)"
"$py" "$CA_SRC/tests/validate_schema.py" candidate "$CA_SRC/datasets/demo/candidates.jsonl" || fail "demo candidates"

(cd "$tmp" && CA_FORCE_CPU=1 CA_OUT="$tmp/run" CA_BIN="$CA_BIN" bash "$CA_SRC/examples/pipeline.sh") \
  > "$tmp/stdout" 2> "$tmp/stderr" || { cat "$tmp/stderr" >&2; fail "pipeline.sh exited $?"; }
for want in "so these were skipped" "prof: timing needs a GPU" "reward: a reward needs" "check: correctness runs"; do
  grep -qF "$want" "$tmp/stderr" || { cat "$tmp/stderr" >&2; fail "stderr lacks '$want'"; }
done
[[ $(wc -l < "$tmp/run/checked.jsonl") == 8 ]] || fail "expected 8 checked records"
# The loop ran on the CPU (a proxy reward, said so) and the report ended the run, with its iterations.
for want in "loop: rewards are a compile-only proxy" "rl-loop: iter-01: 8 episodes" "the loop's iterations" "report: $tmp/run/report.html"; do
  grep -qF "$want" "$tmp/stderr" || { tail -30 "$tmp/stderr" >&2; fail "stderr lacks '$want'"; }
done
[[ $(grep -c '"scheme":"compile-proxy"' "$tmp/stderr") == 2 ]] || fail "expected two iteration rows (warm-up and iteration 1)"
# Each stage says its seconds, in the order run.
[[ $(grep -oE '^pipeline: [a-z]+: [0-9]+\.[0-9] s$' "$tmp/stderr" | cut -d' ' -f2 | tr -d ':' | tr '\n' ' ') == \
   "tasks candidates check prof reward loop summary report " ]] || fail "stage seconds: $(grep -E '^pipeline: [a-z]+: ' "$tmp/stderr")"

# The verdict per task, from the store the pipeline wrote.
CUDA_AGENT_STORE="$tmp/run/run.db" "$CA_BIN/run-store" query \
  "SELECT json_extract(t.body, '\$.name') AS task, c.status FROM checks c JOIN tasks t ON t.task_id = c.task_id
   WHERE c.run_id = (SELECT run_id FROM runs WHERE tool = 'kernel-check' ORDER BY started_at DESC, rowid DESC LIMIT 1)
   ORDER BY task" | sed 's/[{}"]//g' > "$tmp/verdicts"
cat > "$tmp/expected" <<'V'
task:gelu,status:policy_violation
task:layernorm,status:compiled
task:linear_relu,status:compiled
task:relu_scale_add,status:compiled
task:row_mean,status:compiled
task:row_softmax,status:compiled
task:silu,status:compile_error
task:tanh_scale,status:plan_error
V
diff "$tmp/expected" "$tmp/verdicts" >&2 || fail "compile-only verdicts differ from what the bundles were written for"
echo "pipeline (CPU part): ok" >&2
