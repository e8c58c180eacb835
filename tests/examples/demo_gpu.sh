#!/bin/bash
# The demo on a GPU machine (issue 18's bar): examples/pipeline.sh runs the replay episodes through
# kernel-check, kernel-prof and reward-calc, then the loop: a tiny native policy (4 layers, width
# 256) warmed up by RFT on the replay episodes that earned a reward, sampling greedily on the GPU,
# three iterations (rft, rft, ppo). Asserts: each demo bundle gets the verdict it was written for and
# the rewards follow DESIGN.md §7 (failures -1, the slow one 1, the fused elementwise one at least 2:
# one pass against eager's three kernels); every iteration is in the store (one reward-calc run each,
# after the pipeline's own), the warm-up policy's episodes include bundles that pass (it memorized the
# passing replay episodes; that shows the loop closes, not that a model learned CUDA), and the report
# page plots those iterations. One run of the pipeline for both (it was two tests, each running it whole).
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
PY=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
nvidia-smi -L >/dev/null 2>&1 || fail "no GPU visible (this test has label gpu)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# Where the demo's time goes, printed as each stage ends (so a test that ctest times out still says
# how far it got), with the seconds since the start.
CA_BIN=$CA_BIN CA_OUT=$tmp/demo bash "$CA_SRC/examples/pipeline.sh" \
  2> >(tee "$tmp/demo.err" | grep --line-buffered -E "^pipeline: ([a-z]+: [0-9.]+ s|[a-z0-9-]+: seconds: .*)$|rl-loop: .*seconds" |
       while IFS= read -r l; do echo "[$(( $(date +%s) - start )) s] $l"; done) || { sleep 1; tail -40 "$tmp/demo.err"; fail "the demo"; }
sleep 1  # the stage lines' reader ends with the pipeline's stderr
grep "rl-loop: iter-" "$tmp/demo.err" || fail "no iteration lines"
echo "demo: $(( $(date +%s) - start )) s"
# The pipeline's own verdicts and rewards (its kernel-check run, the newest in the pipeline's store).
CUDA_AGENT_STORE="$tmp/demo/run.db" "$CA_BIN/run-store" query \
  "SELECT json_extract(t.body, '\$.name') AS task, c.status, CAST(w.value AS INTEGER) AS reward
   FROM checks c JOIN tasks t ON t.task_id = c.task_id LEFT JOIN rewards w ON w.candidate_id = c.candidate_id
   WHERE c.run_id = (SELECT run_id FROM runs WHERE tool = 'kernel-check' ORDER BY started_at DESC, rowid DESC LIMIT 1)
   ORDER BY task" | sed 's/[{}"]//g' > "$tmp/verdicts"
cat "$tmp/verdicts"
expect() { grep -qxE "$1" "$tmp/verdicts" || { tail -20 "$tmp/demo.err"; fail "expected a line '$1'"; }; }
expect 'task:gelu,status:policy_violation,reward:-1'
expect 'task:silu,status:compile_error,reward:-1'
expect 'task:tanh_scale,status:plan_error,reward:-1'
expect 'task:row_mean,status:incorrect,reward:-1'
expect 'task:layernorm,status:passed,reward:1'
expect 'task:relu_scale_add,status:passed,reward:[23]'
expect 'task:row_softmax,status:passed,reward:[123]'
expect 'task:linear_relu,status:passed,reward:[123]'
[ "$(wc -l < "$tmp/verdicts")" -eq 8 ] || fail "expected 8 verdicts, got $(wc -l < "$tmp/verdicts")"
"$PY" - "$tmp/demo" <<'PY' || { tail -40 "$tmp/demo.err"; fail "demo assertions"; }
import json, re, sqlite3, sys
out = sys.argv[1]
def reward_runs(db):
    return sqlite3.connect(db).execute(
        "SELECT COUNT(DISTINCT w.run_id) FROM rewards w JOIN runs r USING (run_id) WHERE r.tool = 'reward-calc'").fetchone()[0]
assert reward_runs(out + "/run.db") == 1        # the pipeline's reward stage (the warm-up's rewards)
assert reward_runs(out + "/loop/run.db") == 3   # the loop's store: three iterations
def load(f):
    return [json.loads(l) for l in open(out + "/loop/" + f)]
for i in (1, 2, 3):
    recs = load("iter-%02d.rewarded.jsonl" % i)
    passed = sum(1 for r in recs if (r.get("check") or {}).get("correct") is True)
    vals = [r["reward"]["value"] for r in recs if isinstance(r.get("reward"), dict)]
    print("iteration %d: %d of %d passed, mean reward %.3f" % (i, passed, len(recs), sum(vals) / max(1, len(vals))))
    if i == 1:
        assert passed >= 1, "the warmed-up policy wrote no bundle that passes"
m = [json.loads(l) for l in open(out + "/loop/iter-03.metrics.jsonl")]
assert [x["mode"] for x in m] == ["value-pretrain", "ppo"], [x["mode"] for x in m]
page = open(out + "/report.html").read()
points = re.findall(r"\(reward-calc, [^)]*\), (\d+) rewards: mean reward (-?[0-9.]+)", page)
assert len(points) == 4, points   # the report reads both stores
print("report: reward-calc runs %s" % points)
PY
echo "demo on the GPU: ok"
