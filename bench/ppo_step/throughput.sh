#!/usr/bin/env bash
# ppo-step's own training throughput on a GPU (a benchmark for the note, not a test): the ~100M
# Qwen2-like config of bench/nn_cuda (vocab 32000, hidden 768, 12 layers, 12/4 heads, MLP 2048),
# synthetic episodes of T tokens (10% prompt, the rest one assistant turn with recorded logprobs),
# one ppo-step call per case: GRPO (actor only) and GAE (actor and critic). Prints each call's
# metrics: tokens/s (forward+backward tokens over the scoring and update time), seconds in all
# (loading and saving the checkpoints included) and the peak device memory.
#   BIN=build/bin OUT=/tmp/ppo_bench bash bench/ppo_step/throughput.sh "2048x16 8192x4"
set -euo pipefail
BIN=${BIN:-build/bin}
OUT=${OUT:-/tmp/ppo_bench}
PY=${CUDA_AGENT_PYTHON:-python3}
CASES=${1:-2048x16 8192x4}
mkdir -p "$OUT"
cat > "$OUT/config.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 12,
 "num_attention_heads": 12, "num_key_value_heads": 4, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": true}
JSON
[ -d "$OUT/policy" ] || "$BIN/ppo-step" init --model-config "$OUT/config.json" --out "$OUT/policy" --seed 1 -q
[ -d "$OUT/critic" ] || "$BIN/ppo-step" init --model-config "$OUT/config.json" --out "$OUT/critic" --critic --seed 2 -q
# The episodes' logprobs are made up: the rollout check reports only (actor.max_logprob_mismatch 0).
printf 'algorithm:\n  estimator: grpo\nactor:\n  max_logprob_mismatch: 0\n' > "$OUT/grpo.yaml"
printf 'algorithm:\n  estimator: gae\nactor:\n  max_logprob_mismatch: 0\n' > "$OUT/gae.yaml"
for case in $CASES; do
  T=${case%x*} N=${case#*x}
  "$PY" - "$T" "$N" > "$OUT/ep_$case.jsonl" <<'PY'
import json, random, sys
T, N = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(T)
for i in range(N):
    p = T // 10
    a = [rng.randrange(32000) for _ in range(T - p)]
    print(json.dumps({"task_id": "t%d" % (i // 2), "episode_id": "e%d" % i, "reward": {"value": float(i % 3)},
                      "episode": {"turns": [{"role": "user", "token_ids": [rng.randrange(32000) for _ in range(p)]},
                                            {"role": "assistant", "token_ids": a, "logprobs": [-10.4] * len(a)}]}}))
PY
  for est in grpo gae; do
    critic=(); [ $est = gae ] && critic=(--critic "$OUT/critic")
    "$BIN/ppo-step" --mode ppo --policy "$OUT/policy" "${critic[@]}" --out "$OUT/out_${case}_$est" --config "$OUT/$est.yaml" \
      --device "${DEVICE:-cuda}" --dtype bf16 --seed 1 --no-store -q < "$OUT/ep_$case.jsonl" > "$OUT/m_${case}_$est.jsonl"
    "$PY" - "$OUT/m_${case}_$est.jsonl" "$case" "$est" <<'PY'
import json, sys
m = json.loads(open(sys.argv[1]).readline())
print(json.dumps({"case": sys.argv[2], "estimator": sys.argv[3], "episodes": m["episodes"], "trained_tokens": m["trained_tokens"],
                  "tokens_per_s": round(m["tokens_per_s"]), "seconds": round(m["seconds"], 2),
                  "peak_gib": round(m["device"].get("peak_bytes", 0) / 2**30, 2), "device": m["device"].get("name"),
                  "pg_loss": m["losses"]["pg_loss"], "grad_norm": m["grad_norm"]}))
PY
    rm -rf "$OUT/out_${case}_$est"
  done
done
