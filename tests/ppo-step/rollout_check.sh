#!/usr/bin/env bash
# The rollout check of issue 34: before any update, ppo-step compares its logprobs of the sampled tokens
# (under --policy as loaded) with the ones the rollout recorded, reports them (metrics and the store's
# ppo_steps row: rollout_mismatch) and stops a step whose mean |difference| exceeds
# actor.max_logprob_mismatch (exit 2, nothing written). Properties checked:
#  - episodes sampled from the policy itself: mismatch ~0, the step passes, at no extra forward with one
#    mini-batch; with mini-batches the later ones are scored before the updates, and the figures are the
#    same as the whole batch's (so the scoring pass is the policy as loaded, not an updated one);
#  - a known answer: every recorded logprob shifted by +0.5 gives a mean |diff| of 0.5, ratio exp(-0.5),
#    all outside the clip range; the bound is on that mean (0.4 stops, 0.6 passes);
#  - episodes sampled from another checkpoint: exit 2 naming the step, the figure, the bound and the
#    likely cause; no checkpoint (policy or critic), no metrics line, no ppo_steps row, the run's exit 2;
#  - episodes without recorded logprobs, or actor.recompute_old_logprobs, are counted as unchecked (and
#    warned about), never passed as checked; rft reports no check.
source "$(dirname "$0")/lib.sh"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
# Weights large enough (std 0.5) that two random checkpoints disagree on every token.
$PPO init --model-config "$HERE/toy_model.json" --out pol --seed 1 --std 0.5 -q
$PPO init --model-config "$HERE/toy_model.json" --out other --seed 2 --std 0.5 -q
$PPO init --model-config "$HERE/toy_model.json" --out critic --critic --seed 3 -q
printf '%s\n' '{"task_id":"a","prompt_token_ids":[0]}' '{"task_id":"b","prompt_token_ids":[0,7]}' > prompts.jsonl
for m in pol other; do
  $PPO sample --policy $m -n 6 --max-new-tokens 5 --seed 4 -q < prompts.jsonl | $PY "$HERE/toy_scorer.py" 1,2,3,4,5 > ep_$m.jsonl
done
# Rewritten episodes: logprobs shifted, or dropped from some records.
edit() {  # edit IN OUT PYTHON-EXPR-ON-TURN(t, i)
  $PY - "$1" "$3" > "$2" <<'PYEOF'
import json, sys
for i, l in enumerate(open(sys.argv[1])):
    r = json.loads(l)
    t = r["episode"]["turns"][1]
    exec(sys.argv[2])
    print(json.dumps(r))
PYEOF
}
edit ep_pol.jsonl ep_shift.jsonl 't["logprobs"] = [x + 0.5 for x in t["logprobs"]]'
edit ep_pol.jsonl ep_half.jsonl 'if i % 2: del t["logprobs"]'
edit ep_other.jsonl ep_other_nolp.jsonl 'del t["logprobs"]'
printf 'algorithm:\n  estimator: grpo\n' > grpo.yaml
printf 'algorithm:\n  estimator: grpo\nactor:\n  max_logprob_mismatch: 0\n' > grpo_report.yaml
printf 'algorithm:\n  estimator: grpo\nactor:\n  mini_batch_size: 4\n  max_logprob_mismatch: 0\n' > grpo_mb4_report.yaml
printf 'actor:\n  mini_batch_size: 4\n  epochs: 2\ncritic:\n  mini_batch_size: 4\n' > gae_mb4.yaml
printf 'algorithm:\n  estimator: grpo\nactor:\n  recompute_old_logprobs: true\n' > grpo_recompute.yaml
for b in 0.4 0.6; do printf 'algorithm:\n  estimator: grpo\nactor:\n  max_logprob_mismatch: %s\n' $b > grpo_$b.yaml; done
step() {  # NAME EPISODES CONFIG [args...]: a ppo step from pol to out_NAME, metrics in NAME.jsonl, stderr in NAME.err
  local name=$1 ep=$2 cfg=$3; shift 3
  set +e
  $PPO --mode ppo --policy pol --out out_$name --config $cfg --seed 1 "$@" < $ep > $name.jsonl 2> $name.err
  echo $? > $name.rc
  set -e
}
step self ep_pol.jsonl grpo.yaml --no-store
step self_gae ep_pol.jsonl gae_mb4.yaml --critic critic --store store.db
step shift_report ep_shift.jsonl grpo_report.yaml --no-store
step other_report ep_other.jsonl grpo_report.yaml --no-store
step other_report_mb4 ep_other.jsonl grpo_mb4_report.yaml --no-store
step shift_04 ep_shift.jsonl grpo_0.4.yaml --no-store
step shift_06 ep_shift.jsonl grpo_0.6.yaml --no-store
step other ep_other.jsonl grpo.yaml --no-store
step other_gae ep_other.jsonl gae_mb4.yaml --critic critic --store store.db
step half ep_half.jsonl grpo.yaml --no-store
step other_nolp ep_other_nolp.jsonl grpo.yaml --no-store
step other_recompute ep_other.jsonl grpo_recompute.yaml --no-store
$PPO --mode rft --policy pol --out out_rft --seed 1 --no-store -q < ep_pol.jsonl > rft.jsonl || fail "rft step"
validate ppo-metrics self.jsonl
validate ppo-metrics self_gae.jsonl
validate ppo-metrics shift_report.jsonl

$PY - <<'PYEOF' || fail "rollout check"
import json, math, os, sqlite3
def rc(n): return int(open(n + ".rc").read())
def err(n): return open(n + ".err").read()
def m(n):
    assert rc(n) == 0, (n, rc(n), err(n))
    return json.loads(open(n + ".jsonl").read())
def mm(n): return m(n)["rollout_mismatch"]

# Sampled by the policy itself: ~0, every token checked, no extra forward with one mini-batch.
s = mm("self"); x = m("self")
print("self-sampled: mean |diff| %.2e, max %.2e, ratio %.7f +- %.1e over %d tokens" % (
    s["logprob_abs_diff_mean"], s["logprob_abs_diff_max"], s["ratio_mean"], s["ratio_std"], s["tokens_checked"]))
assert s["episodes_checked"] == 12 and s["episodes_unchecked"] == 0 and s["tokens_checked"] == x["model_tokens"] > 0, s
assert s["logprob_abs_diff_mean"] < 1e-5 and s["logprob_abs_diff_max"] < 1e-4 and abs(s["ratio_mean"] - 1) < 1e-5, s
assert s["ratio_outside_clip"] == 0 and s["bound"] == 0.1 and s["extra_forward_passes"] == 0, s
assert os.path.exists("out_self/model.safetensors")
# GAE, 2 epochs of mini-batches of 4: the 8 sequences outside the first mini-batch are scored first.
g = mm("self_gae")
assert g["extra_forward_passes"] == 8 and g["logprob_abs_diff_mean"] < 1e-5 and g["tokens_checked"] == s["tokens_checked"], g
# The store's ppo_steps row carries the same section.
db = sqlite3.connect("store.db")
rows = [json.loads(b) for (b,) in db.execute("select body from ppo_steps")]
assert len(rows) == 1 and rows[0]["rollout_mismatch"] == m("self_gae")["rollout_mismatch"], rows

# Known answer: recorded logprobs + 0.5 -> |diff| 0.5 on every token, ratio exp(-0.5) < 1 - eps_low.
k = mm("shift_report")
assert abs(k["logprob_abs_diff_mean"] - 0.5) < 1e-5 and abs(k["logprob_abs_diff_max"] - 0.5) < 1e-4, k
assert abs(k["ratio_mean"] - math.exp(-0.5)) < 1e-5 and k["ratio_std"] < 1e-4 and k["ratio_outside_clip"] == 1.0, k
assert k["bound"] is None, k
# The bound is on the mean: 0.4 stops the step, 0.6 lets it through.
assert rc("shift_04") == 2 and "exceeds actor.max_logprob_mismatch 0.4" in err("shift_04"), err("shift_04")
assert not os.path.exists("out_shift_04")
assert m("shift_06")["rollout_mismatch"]["bound"] == 0.6

# The same figures whether a sequence was measured by the update's forward or by the scoring pass.
a, b = mm("other_report"), mm("other_report_mb4")
assert b["extra_forward_passes"] == 8 and a["extra_forward_passes"] == 0
for key in ["tokens_checked", "logprob_abs_diff_mean", "logprob_abs_diff_max", "prob_abs_diff_mean", "ratio_mean",
            "ratio_std", "ratio_min", "ratio_max", "ratio_outside_clip"]:
    assert math.isclose(a[key], b[key], rel_tol=1e-12, abs_tol=1e-15), (key, a[key], b[key])
print("sampled by another checkpoint: mean |diff| %.3f, max %.3f, ratio %.3f +- %.3f, %.0f%% outside the clip range" % (
    a["logprob_abs_diff_mean"], a["logprob_abs_diff_max"], a["ratio_mean"], a["ratio_std"], 100 * a["ratio_outside_clip"]))
assert a["logprob_abs_diff_mean"] > 0.5, a

# Sampled by another checkpoint with the default bound: exit 2, the message, nothing written.
for n in ["other", "other_gae"]:
    e = err(n)
    assert rc(n) == 2, (n, rc(n), e)
    for want in ["step 1: the rollout's logprobs are not the policy's", "exceeds actor.max_logprob_mismatch 0.1",
                 "no update made, no checkpoint written", "did not sample with 'pol'", "worst episode"]:
        assert want in e, (n, want, e)
    assert "%g" % a["logprob_abs_diff_mean"] in e or ("%.5g" % a["logprob_abs_diff_mean"]) in e, e
    assert os.path.getsize(n + ".jsonl") == 0, n
    assert not os.path.exists("out_" + n) and not [f for f in os.listdir(".") if f.startswith(".out_%s." % n)], os.listdir(".")
assert db.execute("select count(*) from ppo_steps").fetchone()[0] == 1
status = [r for (r,) in db.execute("select exit_status from runs where tool = 'ppo-step' order by started_at")]
assert status == [0, 2], status

# Unchecked, and said so: half the records without logprobs; all without; recompute_old_logprobs.
h = mm("half")
assert h["episodes_checked"] == 6 and h["unchecked_no_logprobs"] == 6 and h["episodes_unchecked"] == 6, h
assert "not checked for 6 of 12 episodes (6 without recorded logprobs)" in err("half"), err("half")
for n, why in [("other_nolp", "unchecked_no_logprobs"), ("other_recompute", "unchecked_recomputed")]:
    u = mm(n)
    assert u["episodes_checked"] == 0 and u[why] == 12 and u["tokens_checked"] == 0, (n, u)
    assert u["logprob_abs_diff_mean"] is None and u["ratio_mean"] is None, (n, u)
    assert "not checked for 12 of 12 episodes" in err(n), err(n)
assert "actor.recompute_old_logprobs" in err("other_recompute")
# rft uses no old logprobs: no check, no section.
assert "rollout_mismatch" not in json.loads(open("rft.jsonl").read())
print("rollout check: ok")
PYEOF
