#!/bin/bash
# The demo on a GPU machine (issue 18's bar): examples/pipeline.sh runs the replay episodes through
# kernel-check, kernel-prof and reward-calc, then the loop: a tiny native policy (4 layers, width
# 256) warmed up by RFT on the replay episodes that earned a reward, sampling greedily on the GPU,
# three iterations (rft, rft, ppo). Asserts: every iteration is in the store (one reward-calc run each,
# after the pipeline's own), the warm-up policy's episodes include bundles that pass (it memorized the
# passing replay episodes; that shows the loop closes, not that a model learned CUDA), and the report
# page plots those iterations.
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
PY=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
nvidia-smi -L >/dev/null 2>&1 || fail "no GPU visible (this test has label gpu)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
CA_BIN=$CA_BIN CA_OUT=$tmp/demo bash "$CA_SRC/examples/pipeline.sh" 2> "$tmp/demo.err" || { tail -40 "$tmp/demo.err"; fail "the demo"; }
grep "rl-loop: iter-" "$tmp/demo.err" || fail "no iteration lines"
echo "demo: $(( $(date +%s) - start )) s"
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
