#!/usr/bin/env bash
# Large policies on one GPU (issue 34): one GRPO ppo-step per case on synthetic episodes, at the shapes
# of Qwen2.5-1.5B, -7B, -14B and -32B (random weights: bf16 on disk, or dummy), printing per case: tokens/s
# (forward + backward tokens over the scoring and update time), the fraction of the H200's dense bf16
# peak (989 TFLOP/s) that means, the peak device memory (the trainer's allocator), the process's max
# host RSS (/usr/bin/time), and the step's seconds in all (load_seconds: of them, loading the models). Each case runs REPS times; medians and
# min..max spreads are printed at the end.
#
# FLOPs per token: full fine-tuning 6 N (forward 2N, input and weight gradients 4N); LoRA on a frozen
# base 4 N (no weight gradient of the base; the adapter's own GEMMs are < 2% at rank 64 and not
# counted), plus attention's 12 L T d per token (forward and backward, causal half counted) in both.
# Activation checkpointing's recompute is not counted (the usual MFU convention).
#
#   BIN=build/bin OUT=/tmp/large bash bench/ppo_step/large.sh                 # every case
#   CASES="lora-7b:4096 lora-7b:32768 full-1.5b:8192" bash bench/ppo_step/large.sh
#   DEVICE=cpu CASES="lora-tiny:64 full-tiny:64" REPS=1 bash bench/ppo_step/large.sh   # the script itself, on a CPU
# Cases: lora-7b lora-14b lora-32b (rank 64, every linear layer, --checkpointing) and full-1.5b (full
# fine-tuning; --checkpointing from 16k tokens), each :TOKENS for one trajectory of that length
# (two episodes of one group with rewards 0 and 1 so GRPO's advantages are not zero: 2 x TOKENS).
# Disk: a 7B base is 15 GB in bf16, 14B 30 GB, 32B 65.5 GB, more than a 64 GiB device disk. So the 32B
# base is "dummy" by default: its folder holds config.json only and the step runs with --load-format
# dummy, drawing the weights as it loads them, exactly those `ppo-step init --seed 1 --dtype bf16` would
# have written (the step's --seed is 1 too), never on disk (vLLM's --load-format dummy). DUMMY=1 does
# the same for every shape, DUMMY=0 for none (32B then needs the disk, e.g. BASES=/dev/shm/ppo_bases
# on a host whose shared memory holds it; the step streams the base, so the process's memory stays
# small). A dummy case's row says "weights": "dummy"; its load draws ~33 G normals on the host (minutes
# at 32B, in "seconds", not in tokens/s). Bases are made once per BASES (default: OUT), KEEP=0 removes them.
#   DEVICE=cpu DUMMY=1 CASES="lora-tiny:64" REPS=1 bash bench/ppo_step/large.sh
# EPOCHS=N (default 1): the policy's update epochs over the same episodes; each epoch's tokens/s is in
# the row (epochs_tokens_per_s) and the last one's fraction of peak (last_epoch_peak_fraction): an epoch
# after the first runs the same shapes warm, as PyTorch's timed steps after a warm-up do
# (torch_compare.py), where a single epoch also pays each GEMM's first plan and the buffers' growth.
# PROFILE=1: each step runs with CA_NN_CUDA_PROFILE=1 (every launch and GEMM between CUDA events, a
# few % slower; its rows say "profiled") and its GPU time by kernel over scoring and updates goes to
# OUT/profile_CASE_REP.txt (the case's ':' as '_'), and by family with the GEMMs' and attention's
# TFLOP/s (bench/ppo_step/profile_summary.py) in OUT/profile_CASE_REP_summary.txt.
set -euo pipefail
BIN=${BIN:-build/bin}
OUT=${OUT:-/tmp/ppo_large}
PY=${CUDA_AGENT_PYTHON:-python3}
REPS=${REPS:-2}
KEEP=${KEEP:-1}
DUMMY=${DUMMY:-}   # "": 32B only; 1: every shape; 0: none
CASES=${CASES:-"full-1.5b:4096 full-1.5b:8192 full-1.5b:32768 lora-7b:4096 lora-7b:32768 lora-14b:4096 lora-14b:32768 lora-32b:4096 lora-32b:32768"}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
mkdir -p "$OUT"

shape() {  # name -> config.json
  case $1 in
    1.5b) echo '{"model_type":"qwen2","vocab_size":151936,"hidden_size":1536,"intermediate_size":8960,"num_hidden_layers":28,"num_attention_heads":12,"num_key_value_heads":2,"max_position_embeddings":131072,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"tie_word_embeddings":true,"torch_dtype":"bfloat16"}' ;;
    7b) echo '{"model_type":"qwen2","vocab_size":152064,"hidden_size":3584,"intermediate_size":18944,"num_hidden_layers":28,"num_attention_heads":28,"num_key_value_heads":4,"max_position_embeddings":131072,"rms_norm_eps":1e-6,"rope_theta":1000000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}' ;;
    14b) echo '{"model_type":"qwen2","vocab_size":152064,"hidden_size":5120,"intermediate_size":13824,"num_hidden_layers":48,"num_attention_heads":40,"num_key_value_heads":8,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":1000000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}' ;;
    32b) echo '{"model_type":"qwen2","vocab_size":152064,"hidden_size":5120,"intermediate_size":27648,"num_hidden_layers":64,"num_attention_heads":40,"num_key_value_heads":8,"max_position_embeddings":131072,"rms_norm_eps":1e-5,"rope_theta":1000000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}' ;;
    tiny) echo '{"model_type":"qwen2","vocab_size":256,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":512,"rms_norm_eps":1e-6,"rope_theta":10000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}' ;;
    *) echo "large.sh: unknown shape $1" >&2; exit 1 ;;
  esac
}

BASES=${BASES:-$OUT}
mkdir -p "$BASES"

dummy() {  # shape -> true when its base is dummy (config.json only, --load-format dummy)
  case $DUMMY in 1) return 0 ;; 0) return 1 ;; *) [ "$1" = 32b ] ;; esac
}

base() {  # shape -> a base folder (made once)
  local d=$BASES/base_$1
  if dummy "$1"; then
    d=${d}_dummy
    mkdir -p "$d"
    shape "$1" > "$d/config.json"  # torch_dtype bfloat16: the weights init --dtype bf16 writes
  elif [ ! -f "$d/config.json" ]; then
    shape "$1" > "$OUT/config_$1.json"
    /usr/bin/time -f "init $1: %e s, max RSS %M KiB" "$BIN/ppo-step" init --model-config "$OUT/config_$1.json" --out "$d" \
      --dtype bf16 --seed 1 -q
  fi
  echo "$d"
}

printf 'algorithm:\n  estimator: grpo\nactor:\n  lr: 1.0e-5\n  max_logprob_mismatch: 0\n  epochs: %d\n' "${EPOCHS:-1}" > "$OUT/grpo.yaml"
: > "$OUT/results.jsonl"
for case in $CASES; do
  kind=${case%%:*} T=${case#*:}
  mode=${kind%%-*} size=${kind#*-}
  b=$(base "$size")
  shape "$size" > "$OUT/config_$size.json"
  "$PY" - "$T" "$OUT/config_$size.json" > "$OUT/ep_$T.jsonl" <<'PY'
import json, random, sys
T = int(sys.argv[1])
VOCAB = min(150000, json.load(open(sys.argv[2]))["vocab_size"])
rng = random.Random(T)
for i in range(2):
    p = max(1, T // 10)
    a = [rng.randrange(VOCAB) for _ in range(T - p)]
    print(json.dumps({"task_id": "t", "episode_id": "e%d" % i, "reward": {"value": float(i)},
                      "episode": {"turns": [{"role": "user", "token_ids": [rng.randrange(VOCAB) for _ in range(p)]},
                                            {"role": "assistant", "token_ids": a, "logprobs": [-11.9] * len(a)}]}}))
PY
  args=(--mode ppo --policy "$b" --config "$OUT/grpo.yaml" --device "${DEVICE:-cuda}" --dtype bf16 --seed 1 --no-store -q)
  if dummy "$size"; then args+=(--load-format dummy); fi
  if [ "$mode" = lora ]; then args+=(--lora-rank "${RANK:-64}" --checkpointing)
  elif [ "$T" -ge 16384 ]; then args+=(--checkpointing); fi
  for rep in $(seq 1 "$REPS"); do
    rm -rf "$OUT/out"
    if ! CA_NN_CUDA_PROFILE=${PROFILE:-0} /usr/bin/time -f "%M" -o "$OUT/rss" "$BIN/ppo-step" "${args[@]}" --out "$OUT/out" \
         < "$OUT/ep_$T.jsonl" > "$OUT/m.jsonl" 2> "$OUT/err"; then
      echo "{\"case\": \"$case\", \"rep\": $rep, \"error\": $("$PY" -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()[-400:]))' "$OUT/err")}" \
        | tee -a "$OUT/results.jsonl"
      continue
    fi
    if [ "${PROFILE:-0}" = 1 ]; then
      prof="$OUT/profile_${case/:/_}_$rep.txt"
      sed -n '/^nn_cuda profile: /,$p' "$OUT/err" | grep -E '^(nn_cuda profile: |  )' > "$prof" || true
      # By family, with the GEMMs' and attention's TFLOP/s (profile_summary.py), beside the table.
      [ -s "$prof" ] && "$PY" "$(dirname "$0")/profile_summary.py" "$prof" --config "$OUT/config_$size.json" --tokens "$T" \
        --peak "$PEAK_TFLOPS" > "${prof%.txt}_summary.txt" 2>&1 || true
    fi
    "$PY" - "$OUT/m.jsonl" "$OUT/config_$size.json" "$case" "$mode" "$rep" "$(tail -1 "$OUT/rss")" "$PEAK_TFLOPS" <<'PY' | tee -a "$OUT/results.jsonl"
import json, os, sys
m = json.loads(open(sys.argv[1]).readline())
c = json.load(open(sys.argv[2]))
case, mode, rep, rss_kib, peak = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
C, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
H, KV = c["num_attention_heads"], c["num_key_value_heads"]
D = C // H
N = V * C * (1 if c["tie_word_embeddings"] else 2) + L * (C * (H * D) * 2 + C * (KV * D) * 2 + 3 * C * F)
T = int(case.split(":")[1])
per_token = (6 if mode == "full" else 4) * N + 12 * L * T * C / 2
tps = m["tokens_per_s"]
epochs = m.get("actor_epochs", [])
print(json.dumps({"case": case, "rep": rep, "weights": m.get("load_format", "safetensors"),
                  "params_billion": round(N / 1e9, 2), "tokens_per_s": round(tps),
                  "dense_peak_fraction": round(tps * per_token / (peak * 1e12), 3),
                  "epochs_tokens_per_s": [round(e["tokens_per_s"]) for e in epochs],
                  "last_epoch_peak_fraction": round(epochs[-1]["tokens_per_s"] * per_token / (peak * 1e12), 3) if epochs else None,
                  "peak_device_gib": round(m["device"].get("peak_bytes", 0) / 2**30, 1),
                  "host_max_rss_gib": round(rss_kib / 2**20, 1), "seconds": round(m["seconds"], 1),
                  "load_seconds": round(m.get("phase_seconds", {}).get("load", 0), 1),
                  "lora": m.get("lora", {}).get("policy", {}).get("trainable_parameters"),
                  "profiled": os.environ.get("PROFILE", "0") == "1"}))
PY
  done
done
"$PY" - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("\ncase                 tokens/s (median, min..max)   peak-fraction   device GiB   host GiB", file=sys.stderr)
for case in dict.fromkeys(r["case"] for r in rows):
    ok = [r for r in rows if r["case"] == case and "error" not in r]
    if not ok:
        print("%-20s failed: %s" % (case, [r for r in rows if r["case"] == case][0]["error"][-120:]), file=sys.stderr)
        continue
    t = [r["tokens_per_s"] for r in ok]
    print("%-20s %8d (%d..%d)            %.3f           %6.1f       %5.1f%s" % (
        case, statistics.median(t), min(t), max(t), statistics.median(r["dense_peak_fraction"] for r in ok),
        max(r["peak_device_gib"] for r in ok), max(r["host_max_rss_gib"] for r in ok),
        "   dummy weights" if ok[0]["weights"] == "dummy" else ""), file=sys.stderr)
PY
[ "$KEEP" = 1 ] || rm -rf "$BASES"/base_*
