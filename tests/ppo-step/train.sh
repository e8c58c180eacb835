#!/usr/bin/env bash
# The training modes on fixed multi-turn trajectories (tool turns masked, some logprobs missing):
# value pretraining lowers the value loss; rft filters by reward and lowers the NLL; ppo with GRPO,
# KL as a loss and an entropy bonus runs; the checkpoint is Hugging Face layout (checked by an
# independent reader); metrics validate against the schema; bad input follows the rules.
source "$(dirname "$0")/lib.sh"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

$PPO init --model-config "$HERE/toy_model.json" --out policy --seed 3 -q
printf '%s\n' '{"task_id":"a","prompt_token_ids":[0]}' '{"task_id":"b","prompt_token_ids":[0,7]}' > prompts.jsonl
$PPO sample --policy policy -n 6 --max-new-tokens 4 --seed 5 -q < prompts.jsonl > sampled.jsonl
# Multi-turn: a tool result (masked) and a second assistant turn without logprobs (recomputed).
$PY - sampled.jsonl > episodes.jsonl <<'PYEOF'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    r["episode"]["turns"] += [{"role": "tool", "token_ids": [6, 7, 6], "error": i % 5 == 0},
                              {"role": "assistant", "token_ids": [3, 4]}]
    first = r["episode"]["turns"][1]["token_ids"][0]   # a reward the critic can learn from the tokens
    r["reward"] = {"value": [-1, 1, 2, 3][first % 4], "scheme": "milestone", "reason": "toy"}
    print(json.dumps(r))
PYEOF

# value-pretrain: ten chained steps on the same trajectories, the critic started from the policy.
cat > vp.yaml <<'YEOF'
critic:
  lr: 1.0e-2
  epochs: 8
YEOF
$PPO --mode value-pretrain --policy policy --out critic/1 --config vp.yaml --seed 1 --no-store -q < episodes.jsonl > vp.jsonl
for i in $(seq 1 9); do
  $PPO --mode value-pretrain --critic critic/$i --out critic/$((i + 1)) --config vp.yaml --seed 1 --no-store -q \
    < episodes.jsonl >> vp.jsonl
done
validate ppo-metrics vp.jsonl
$PY - vp.jsonl <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
v = [x["losses"]["vf_loss"] for x in m]
print("value-pretrain vf_loss by step:", " ".join("%.4f" % x for x in v),
      "| explained variance %.3f -> %.3f" % (m[0]["explained_variance"], m[-1]["explained_variance"]))
assert v[-1] < 0.5 * v[0], "value pretraining did not lower the value loss"
assert m[-1]["explained_variance"] > 0.4, "the critic explains little of the returns"
assert m[-1]["step"] == 10 and m[0]["out"] is None and m[0]["critic_out"] == "critic/1"
PYEOF
[ -f critic/10/trainer_state/optimizer.safetensors ] || fail "no optimizer state"

# rft: keep reward > 1 with clean tools (every 5th record has a tool error).
cat > rft.yaml <<'YEOF'
rft:
  lr: 1.0e-2
  min_reward: 1.0
YEOF
want=$($PY -c '
import json,sys
n=0
for l in open(sys.argv[1]):
    r=json.loads(l); n += r["reward"]["value"] > 1 and not any(t.get("error") for t in r["episode"]["turns"])
print(n)' episodes.jsonl)
$PPO --mode rft --policy policy --out rft/1 --config rft.yaml --seed 1 --no-store -q < episodes.jsonl > rft.jsonl
$PPO --mode rft --policy rft/1 --out rft/2 --config rft.yaml --seed 1 --no-store -q < episodes.jsonl >> rft.jsonl
$PPO --mode rft --policy rft/2 --out rft/3 --config rft.yaml --seed 1 --no-store -q < episodes.jsonl >> rft.jsonl
validate ppo-metrics rft.jsonl
$PY - rft.jsonl "$want" <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
assert m[0]["episodes"] == int(sys.argv[2]), (m[0]["episodes"], sys.argv[2])
s = [x["losses"]["sft_loss"] for x in m]
print("rft: %d of %d kept; sft_loss by step:" % (m[0]["episodes"], m[0]["episodes"] + m[0]["episodes_skipped"]),
      " ".join("%.4f" % x for x in s))
assert s[-1] < s[0]
PYEOF

# ppo with GRPO (no critic), KL k3 as a loss against a reference, entropy bonus, dual clip.
cat > grpo.yaml <<'YEOF'
algorithm:
  estimator: grpo
  kl_loss: true
  kl_kind: k3
  kl_coef: 0.1
actor:
  lr: 1.0e-2
  epochs: 3
  mini_batch_size: 4
  entropy_coeff: 0.01
YEOF
$PPO --mode ppo --policy policy --ref policy --out grpo/1 --config grpo.yaml --seed 2 --no-store -q < episodes.jsonl > grpo.jsonl
validate ppo-metrics grpo.jsonl
$PY - grpo.jsonl <<'PYEOF'
import json, sys
m = json.loads(open(sys.argv[1]).readline())
print("grpo: pg_loss %.4f kl_loss %.5f entropy %.3f clip high %.3f low %.3f dual %.3f approx_kl %.4f grad_norm %.3f" % (
    m["losses"]["pg_loss"], m["losses"]["kl_loss"], m["entropy"], m["pg_clipfrac_high"], m["pg_clipfrac_low"],
    m["pg_clipfrac_dual"], m["approx_kl"], m["grad_norm"]["actor"]))
assert m["critic"] is None and m["optimizer_steps"] == {"actor": 9, "critic": 0}
assert m["losses"]["kl_loss"] > 0            # the policy moved away from the reference within the step
assert m["pg_clipfrac_high"] + m["pg_clipfrac_low"] > 0
# where the seconds went: three phases, none negative, inside the step's seconds; the rate is the train phase's
ph = m["phase_seconds"]
assert sorted(ph) == ["load", "save", "train"] and min(ph.values()) >= 0, ph
assert sum(ph.values()) <= m["seconds"] + 1e-6, (ph, m["seconds"])
assert ph["train"] > 0 and abs(m["tokens_per_s"] - m["trained_tokens"] / ph["train"]) <= 1e-6 * m["tokens_per_s"], (ph, m["tokens_per_s"])
PYEOF

# The checkpoint, read by an independent safetensors reader: names, shapes, F32, config keys.
$PY - grpo/1 <<'PYEOF'
import json, struct, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
for k in ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
          "rms_norm_eps", "rope_theta", "vocab_size", "tie_word_embeddings", "max_position_embeddings"]:
    assert k in cfg, k
assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["model_type"] == "qwen2"
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
names = {k for k in hdr if k != "__metadata__"}
want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
for l in range(cfg["num_hidden_layers"]):
    p = "model.layers.%d." % l
    want |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight", p + "mlp.gate_proj.weight",
             p + "mlp.up_proj.weight", p + "mlp.down_proj.weight", p + "self_attn.o_proj.weight"}
    want |= {p + "self_attn.%s_proj.%s" % (x, w) for x in "qkv" for w in ("weight", "bias")}
assert names == want, names ^ want
hd = cfg["hidden_size"] // cfg["num_attention_heads"]
assert hdr["model.layers.0.self_attn.k_proj.weight"]["shape"] == [cfg["num_key_value_heads"] * hd, cfg["hidden_size"]]
assert all(hdr[k]["dtype"] == "F32" for k in names)
print("checkpoint: %d tensors in HF layout" % len(names))
PYEOF

# The native forward (float32, KV cache) against an independent HF-style torch float64 forward, for
# Qwen2 (biases, untied head) and Llama (tied embeddings, no biases), with weights large enough to matter.
printf '%s\n' '{"model_type":"llama","vocab_size":40,"hidden_size":48,"intermediate_size":80,"num_hidden_layers":3,' \
  '"num_attention_heads":6,"num_key_value_heads":2,"max_position_embeddings":64,"tie_word_embeddings":true,"rope_theta":500.0}' > llama.json
$PPO init --model-config "$HERE/toy_model.json" --out qwen --seed 4 --std 0.3 -q
$PPO init --model-config llama.json --out llama --seed 4 --std 0.3 -q
printf '%s\n' '{"task_id":"a","prompt_token_ids":[0,1,2]}' '{"task_id":"b","prompt_token_ids":[5]}' > p2.jsonl
for m in qwen llama; do
  $PPO sample --policy $m -n 3 --max-new-tokens 12 --temperature 1.3 --seed 3 -q < p2.jsonl > s_$m.jsonl
  $PY "$HERE/torch_reference.py" $m s_$m.jsonl --tol 1e-4 --temperature 1.3
done
$PPO init --model-config llama.json --out llama_other --seed 5 --std 0.3 -q
$PPO sample --policy llama -n 3 --max-new-tokens 12 --seed 3 -q < p2.jsonl > s_t1.jsonl
if $PY "$HERE/torch_reference.py" llama_other s_t1.jsonl > /dev/null; then fail "the torch reference accepted another model"; fi

# Bad input: a record without reward is left out with a warning; --strict makes it fatal; usage errors.
{ head -3 episodes.jsonl; echo '{"task_id":"x","episode":{"turns":[{"role":"user","token_ids":[0]},{"role":"assistant","token_ids":[1]}]}}'; } > mixed.jsonl
$PPO --mode rft --policy policy --out bad/1 --no-store -i mixed.jsonl > m.jsonl 2> err || fail "a bad record must not sink the step"
grep -q "line 4: reward: missing" err || fail "no warning naming line and field"
[ "$(field m.jsonl bad_records)" = 1 ] || fail "bad_records"
set +e
$PPO --mode rft --policy policy --out bad/2 --no-store --strict -i mixed.jsonl > /dev/null 2>&1; [ $? -eq 2 ] || fail "--strict"
$PPO --mode ppo --policy policy --out bad/3 --no-store -i episodes.jsonl > /dev/null 2> err; [ $? -eq 1 ] || fail "ppo without critic"
grep -q "needs --critic" err || fail "message for a missing critic"
$PPO --mode ppo --policy nowhere --critic nowhere --out bad/4 --no-store -i episodes.jsonl > /dev/null 2>&1; [ $? -eq 2 ] || fail "missing checkpoint"
printf 'actor:\n  learning_rate: 1\n' > typo.yaml
$PPO --mode rft --policy policy --out bad/5 --config typo.yaml --no-store -i episodes.jsonl > /dev/null 2> err; [ $? -eq 1 ] || fail "typo in config"
grep -q "unknown key 'actor.learning_rate'" err || fail "config key not named"
echo '{' | $PPO --mode rft --policy policy --out bad/6 --no-store > /dev/null 2>&1; [ $? -eq 2 ] || fail "not JSON"
$PPO --mode rft --policy policy --out bad/7 --device gpu --no-store < /dev/null > /dev/null 2> err; [ $? -eq 1 ] || fail "--device gpu"
grep -q "device: expected cpu, cuda or cuda:N, got 'gpu'" err || fail "bad --device not named"
if [ ! -e /dev/nvidiactl ]; then  # no GPU here: --device cuda is an environment error, and writes nothing
  $PPO --mode rft --policy policy --out bad/8 --device cuda --no-store -i episodes.jsonl > out8 2> err; [ $? -eq 3 ] || fail "--device cuda without a GPU"
  [ ! -s out8 ] && [ ! -e bad/8 ] || fail "--device cuda without a GPU wrote something"
  head -2 err
  $PPO sample --policy policy --device cuda < prompts.jsonl > out9 2> err; [ $? -eq 3 ] || fail "sample --device cuda without a GPU"
  [ ! -s out9 ] || fail "sample --device cuda without a GPU wrote something"
fi
# sample: a prompt token outside the model's vocabulary is a bad record naming the field; the next
# prompt is still answered.
vocab=$(field policy/config.json vocab_size)
printf '%s\n' "{\"task_id\":\"x\",\"prompt_token_ids\":[0,$vocab]}" '{"task_id":"y","prompt_token_ids":[1]}' \
  | $PPO sample --policy policy --max-new-tokens 2 --seed 1 -q > s9.jsonl; [ $? -eq 0 ] || fail "sample with a bad prompt"
$PY - s9.jsonl <<'PYEOF' || fail "sample: the bad prompt record"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert len(r) == 2 and r[0]["error"]["field"] == "prompt_token_ids" and "vocabulary" in r[0]["error"]["reason"], r[0]
assert "episode" in r[1] and len(r[1]["episode"]["turns"][1]["token_ids"]) == 2, r[1]
PYEOF
set -e
$PPO config | grep -q "clip_ratio_high: 0.28" || fail "config defaults"
echo "train modes: ok"
