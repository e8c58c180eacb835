#!/bin/bash
# From rollout to training without a GPU: agent-run against an OpenAI-compatible server that returns
# token ids (vLLM's return_token_ids, mocked) records each turn's prompt_token_ids beside the
# completion's token_ids and logprobs; every turn's context is a prefix of the next; ppo-step (GRPO)
# trains a small native policy on the two episodes and masks the tool results. Then the same with
# native:DIR sampling the episodes itself.
source "$CA_SRC/tests/agent-run/lib.sh"
start_mock "$HERE/scripts/train.json"
"$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store --tasks "$TMP/task.jsonl" \
  --episodes-per-task 2 --seed 4 --retry-base 0.05 > "$TMP/episodes.jsonl" 2> "$TMP/err.txt" \
  || { cat "$TMP/err.txt"; fail "agent-run failed"; }
py '
assert len(recs) == 2, len(recs)
for r in recs:
    turns = r["episode"]["turns"]
    assert len(turns) >= 2, turns
    for i, t in enumerate(turns):
        assert "prompt_token_ids" in t and t["assistant"]["token_ids"], ("turn %d lacks ids" % i, t)
        assert len(t["assistant"]["logprobs"]) == len(t["assistant"]["token_ids"])
    for a, b in zip(turns, turns[1:]):
        ctx = a["prompt_token_ids"] + a["assistant"]["token_ids"]
        assert b["prompt_token_ids"][:len(ctx)] == ctx, "turn %d is not a prefix of the next" % a["index"]
print("episodes: %s turns, prompt ids %s" % ([len(r["episode"]["turns"]) for r in recs],
      [len(r["episode"]["turns"][-1]["prompt_token_ids"]) for r in recs]))
' "$TMP/episodes.jsonl"

add_rewards "$TMP/episodes.jsonl" "$TMP/rewarded.jsonl"
cat > "$TMP/model.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
cat > "$TMP/grpo.yaml" <<'YAML'
algorithm:
  estimator: grpo
actor:
  lr: 1.0e-2
  epochs: 2
  max_logprob_mismatch: 0   # the scripted server's logprobs are made up: the rollout check reports only
YAML
"$CA_BIN/ppo-step" init --model-config "$TMP/model.json" --out "$TMP/policy" --seed 3 -q || fail "ppo-step init"
"$CA_BIN/ppo-step" --mode ppo --policy "$TMP/policy" --out "$TMP/step1" --config "$TMP/grpo.yaml" --seed 2 --no-store -q \
  < "$TMP/rewarded.jsonl" > "$TMP/metrics.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "ppo-step on agent-run episodes"; }
py '
m = recs[0]
print("ppo-step on agent-run episodes: %d episodes, %d tokens, %d trained, pg_loss %.4f" % (
    m["episodes"], m["tokens"], m["model_tokens"], m["losses"]["pg_loss"]))
assert m["episodes"] == 2 and m["optimizer_steps"]["actor"] > 0, m
assert 0 < m["model_tokens"] < m["tokens"], "tool results and prompts must be masked"
assert m["reward_std"] > 0 and m["advantage_mean"] != 0, m  # GRPO: the two rewards differ
' "$TMP/metrics.jsonl"
[ -f "$TMP/step1/model.safetensors" ] || fail "no checkpoint written"
CA_SRC=$CA_SRC "$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/episodes.jsonl" || fail "episodes do not validate"

# native:DIR, the same chain without a server: a small random checkpoint with the fixture tokenizer
# samples the episodes on the CPU; ppo-step, training that same checkpoint, recomputes the logprobs
# the sampler recorded, so the policy ratio starts at 1 (approx_kl ~ 0: ids, context and logprobs agree).
sed 's/"vocab_size": 256/"vocab_size": 320/; s/"max_position_embeddings": 1024/"max_position_embeddings": 8192/' \
  "$TMP/model.json" > "$TMP/native.json"
"$CA_BIN/ppo-step" init --model-config "$TMP/native.json" --out "$TMP/native" --seed 3 -q || fail "ppo-step init (native)"
cp "$CA_SRC/tests/nn_cuda/fixtures/tokenizer.json" "$TMP/native/"
"$CA_BIN/agent-run" --policy "native:$TMP/native" --no-store --tasks "$TMP/task.jsonl" --episodes-per-task 2 \
  --max-turns 2 --max-tokens 24 --seed 1 > "$TMP/native_episodes.jsonl" 2> "$TMP/err.txt" \
  || { cat "$TMP/err.txt"; fail "agent-run --policy native"; }
py '
assert len(recs) == 2, len(recs)
for r in recs:
    e = r["episode"]
    assert e["policy"]["kind"] == "native" and e["turns"], e.get("error")
    t = e["turns"][0]
    assert len(t["assistant"]["token_ids"]) == len(t["assistant"]["logprobs"]) > 0
    assert len(t["prompt_token_ids"]) > 100, "the prompt holds the system prompt, the tools and the task"
print("native episodes: stop reasons %s, completion tokens %s" % ([r["episode"]["stop_reason"] for r in recs],
      [len(r["episode"]["turns"][0]["assistant"]["token_ids"]) for r in recs]))
' "$TMP/native_episodes.jsonl"
add_rewards "$TMP/native_episodes.jsonl" "$TMP/native_rewarded.jsonl"
printf 'algorithm:\n  estimator: grpo\nactor:\n  lr: 1.0e-3\n  epochs: 1\n' > "$TMP/one_epoch.yaml"
"$CA_BIN/ppo-step" --mode ppo --policy "$TMP/native" --out "$TMP/native_step1" --config "$TMP/one_epoch.yaml" --seed 2 \
  --no-store -q < "$TMP/native_rewarded.jsonl" > "$TMP/native_metrics.jsonl" 2> "$TMP/err.txt" \
  || { cat "$TMP/err.txt"; fail "ppo-step on native episodes"; }
py '
m = recs[0]
print("ppo-step on native episodes: %d model tokens of %d, approx_kl %.2e" % (m["model_tokens"], m["tokens"], m["approx_kl"]))
assert m["episodes"] == 2 and m["model_tokens"] > 0
assert abs(m["approx_kl"]) < 1e-5, "the sampler and the trainer disagree on the logprobs: approx_kl %g" % m["approx_kl"]
' "$TMP/native_metrics.jsonl"
CA_SRC=$CA_SRC "$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/native_episodes.jsonl" || fail "native episodes do not validate"
# --policy-device: a bad value is a usage error; with a policy other than native: a warning; without
# a GPU, cuda is an environment error before
# any episode (nothing written).
set +e
"$CA_BIN/agent-run" --policy "native:$TMP/native" --policy-device gpu --no-store --tasks "$TMP/task.jsonl" \
  > "$TMP/o.jsonl" 2> "$TMP/err.txt"; rc=$?
[ $rc = 1 ] && grep -q "policy-device: expected cpu, cuda or cuda:N, got 'gpu'" "$TMP/err.txt" || fail "--policy-device gpu: rc $rc"
"$CA_BIN/agent-run" --policy "replay:$TMP/none.jsonl" --policy-device cuda --no-store --tasks "$TMP/task.jsonl" \
  > /dev/null 2> "$TMP/err.txt"
grep -q "apply to native: policies only" "$TMP/err.txt" || fail "--policy-device with another policy should be warned about"
if [ ! -e /dev/nvidiactl ]; then
  "$CA_BIN/agent-run" --policy "native:$TMP/native" --policy-device cuda --no-store --tasks "$TMP/task.jsonl" \
    > "$TMP/o.jsonl" 2> "$TMP/err.txt"; rc=$?
  [ $rc = 3 ] && [ ! -s "$TMP/o.jsonl" ] || fail "--policy-device cuda without a GPU: rc $rc, $(wc -l < "$TMP/o.jsonl") lines"
fi
set -e
echo "train chain: ok"
