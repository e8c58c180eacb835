#!/usr/bin/env bash
# The CI toy RL task of issue 9: a tiny native policy (19k parameters, vocabulary 8) must learn to emit
# the pattern 1 2 3 4 5 after the prompt 0, rewarded by a scorer with the fraction of positions right.
# 30 PPO steps of 32 responses (GAE with a critic, clip-higher, 2 epochs of 4 mini-batches each) must clearly raise
# the mean reward: the mean of the last 5 steps at least 0.3 above the first 5 (random: 1/8).
source "$(dirname "$0")/lib.sh"
cd "$tmp"
echo '{"task_id":"toy","prompt_token_ids":[0]}' > prompts.jsonl
# TOY_MODEL and TOY_TRAIN_ARGS let gpu_trainer.sh run the same task on a GPU.
model=${TOY_MODEL:-$HERE/toy_model.json}
$PPO init --model-config "$model" --out ck/0 --seed 1 -q
$PPO init --model-config "$model" --critic --out ck/0/critic --seed 2 -q
start=$(date +%s)
for i in $(seq 0 29); do
  $PPO sample --policy ck/$i -n 32 --max-new-tokens 5 --seed $((1000 + i)) -q < prompts.jsonl \
    | $PY "$HERE/toy_scorer.py" 1,2,3,4,5 > ep.jsonl
  $PPO --mode ppo --policy ck/$i --critic ck/$i/critic --out ck/$((i + 1)) --config "$HERE/toy_ppo.yaml" \
       ${TOY_TRAIN_ARGS:-} --seed $i --store store.db -q < ep.jsonl >> metrics.jsonl
  rm -rf ck/$((i - 1))   # keep the disk small; the chain needs only the latest
done
echo "30 PPO steps in $(( $(date +%s) - start )) s"
validate ppo-metrics metrics.jsonl
$PY - metrics.jsonl <<'PYEOF'
import json, os, sys
m = [json.loads(l) for l in open(sys.argv[1])]
assert len(m) == 30, len(m)
r = [x["reward_mean"] for x in m]
first, last = sum(r[:5]) / 5, sum(r[-5:]) / 5
print("reward by step:", " ".join("%.2f" % x for x in r))
print("mean reward: first 5 steps %.3f, last 5 steps %.3f" % (first, last))
print("entropy: step 1 %.3f, step 30 %.3f; tokens/s step 30: %.0f" % (m[0]["entropy"], m[-1]["entropy"], m[-1]["tokens_per_s"]))
assert last >= first + 0.3, "PPO did not clearly raise the mean reward"
assert m[-1]["entropy"] < m[0]["entropy"], "the policy did not sharpen"
assert [x["step"] for x in m] == list(range(1, 31)), "step counter"
assert all(x["optimizer_steps"]["actor"] == 8 and x["optimizer_steps"]["critic"] == 8 for x in m)
assert any(x["pg_clipfrac_high"] > 0 or x["pg_clipfrac_low"] > 0 for x in m), "no clipping ever: ratios never left 1"
# Every step checked the rollout (issue 34): each batch was sampled by the step's own policy, so the trainer's
# logprobs are the sampler's (fp32 on both sides here: ~1e-7; a bf16 trainer, as gpu_trainer.sh runs this,
# within the default bound). The 24 sequences outside the first mini-batch of 8 are scored for the check.
# A bf16 trainer on a policy this sharp (entropy 0.2 by the end) rounds an unlikely token's logprob by more
# than the clip range now and then (seen on the H200: mean |diff| 6e-3): a few tokens in a hundred may leave it.
bf16 = bool(os.environ.get("TOY_TRAIN_ARGS"))
tol, outside = (0.1, 0.02) if bf16 else (1e-5, 0.0)
rm = [x["rollout_mismatch"] for x in m]
assert all(r["episodes_checked"] == 32 and r["episodes_unchecked"] == 0 and r["tokens_checked"] > 0 for r in rm), rm[0]
assert all(r["extra_forward_passes"] == 24 for r in rm), rm[0]
extra, total = sum(r["extra_forward_seconds"] for r in rm), sum(x["seconds"] for x in m)
print("rollout check: mean |diff| at most %.2e (max token %.2e, outside the clip at most %.3f) over 30 steps; its scoring pass %.3f s of %.2f s (%.1f%%)" % (
    max(r["logprob_abs_diff_mean"] for r in rm), max(r["logprob_abs_diff_max"] for r in rm), max(r["ratio_outside_clip"] for r in rm), extra, total, 100 * extra / total))
assert all(r["logprob_abs_diff_mean"] < tol for r in rm), max(r["logprob_abs_diff_mean"] for r in rm)
assert all(r["ratio_outside_clip"] <= outside for r in rm), max(r["ratio_outside_clip"] for r in rm)
PYEOF
# The store got one ppo_steps row per step, each with the rollout check's figures.
n=$($PY -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("select count(*) from ppo_steps").fetchone()[0])' store.db)
[ "$n" = 30 ] || { echo "FAIL: $n ppo_steps rows in the store, want 30"; exit 1; }
$PY - store.db <<'PYEOF' || { echo "FAIL: the store's ppo_steps rows lack the rollout check"; exit 1; }
import json, sqlite3, sys
rows = [json.loads(b) for (b,) in sqlite3.connect(sys.argv[1]).execute("select body from ppo_steps")]
assert all(r["rollout_mismatch"]["episodes_checked"] == 32 for r in rows), len(rows)
PYEOF
echo "toy RL: ok"
