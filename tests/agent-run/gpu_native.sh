#!/bin/bash
# native:DIR sampled on the GPU (label gpu): agent-run --policy-device cuda runs several episodes at
# once on one GPU (they take turns on its stream), and the logprobs it records are the ones ppo-step
# recomputes for the same tokens: on the CPU against fp32 sampling (|approx_kl| < 1e-4), on the GPU
# against bf16 sampling (< 2e-2, two bf16 paths: KV-cache decoding and the full-sequence forward).
# Prints the sampling speed on the CPU and the GPU.
source "$CA_SRC/tests/agent-run/lib.sh"
cat > "$TMP/model.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
"$CA_BIN/ppo-step" init --model-config "$TMP/model.json" --out "$TMP/native" --seed 3 -q || fail "ppo-step init"
cp "$CA_SRC/tests/nn_cuda/fixtures/tokenizer.json" "$TMP/native/"
printf 'algorithm:\n  estimator: grpo\nactor:\n  lr: 1.0e-3\n' > "$TMP/grpo.yaml"
for dev in cpu:f32 cuda:f32 cuda:bf16; do
  d=${dev%%:*} dt=${dev##*:}
  s=$(date +%s.%N)
  "$CA_BIN/agent-run" --policy "native:$TMP/native" --policy-device "$d" --policy-dtype "$dt" --no-store \
    --tasks "$TMP/task.jsonl" --episodes-per-task 4 -j 4 --max-turns 2 --max-tokens 200 --seed 1 \
    > "$TMP/ep_$d$dt.jsonl" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run --policy-device $d --policy-dtype $dt"; }
  e=$(date +%s.%N)
  py "
want = ('$d' if '$d' == 'cpu' else 'cuda:0', '$dt')
n = 0
assert len(recs) == 4, len(recs)
for r in recs:
    p = r['episode']['policy']
    assert (p['device'], p['dtype']) == want, p
    for t in r['episode']['turns']:
        assert len(t['assistant']['token_ids']) == len(t['assistant']['logprobs']) > 0
        n += len(t['assistant']['token_ids'])
print('native on %s %s: 4 episodes, %d sampled tokens in %.1f s' % (want + (n, $e - $s)))
" "$TMP/ep_$d$dt.jsonl"
  add_rewards "$TMP/ep_$d$dt.jsonl" "$TMP/rw_$d$dt.jsonl"
done
check_kl() {  # EPISODES TRAIN_DEVICE TRAIN_DTYPE BOUND
  "$CA_BIN/ppo-step" --mode ppo --policy "$TMP/native" --out "$TMP/step_$1_$2" --config "$TMP/grpo.yaml" --seed 2 \
    --device "$2" --dtype "$3" --no-store -q < "$TMP/rw_$1.jsonl" > "$TMP/m.jsonl" 2> "$TMP/err.txt" \
    || { cat "$TMP/err.txt"; fail "ppo-step --device $2 on $1 episodes"; }
  py "
m = recs[0]
print('sampled %s, trained on %s %s: approx_kl %.2e over %d model tokens' % ('$1', '$2', '$3', m['approx_kl'], m['model_tokens']))
assert m['model_tokens'] > 100 and abs(m['approx_kl']) < $4, m['approx_kl']
" "$TMP/m.jsonl"
}
check_kl cpuf32 cpu f32 1e-5
check_kl cudaf32 cpu f32 1e-4
check_kl cudabf16 cuda bf16 2e-2
echo "native policy on the GPU: ok"
