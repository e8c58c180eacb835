#!/usr/bin/env bash
# Checkpoint times at the Qwen2.5 shapes (issue 34), a benchmark for the note, not a test. Per shape
# and run, each under /usr/bin/time (wall seconds, max RSS):
#   init       ppo-step init: the weights drawn (init_random's stream) and written tensor by tensor
#   load_warm  every tensor read through the mapped CheckpointReader, converted to float, into one
#   load_cold  reused buffer (what the GPU upload does; a CPU Model<float> of 7B needs 28 GB plus its
#              gradients, more than this host); cold: the files dropped from the page cache first
#   save       the sharded writer alone, from a 64 MB source buffer (as a GPU save downloads tensors)
#   dummy      --load-format dummy's source alone: init's draw, rounded to DTYPE, read in the GPU
#              loader's ranges and order (nothing on disk; what a dummy step adds to its load)
# Prints each run, then the median, min and max of each. Each checkpoint folder is deleted right after
# it is measured: at most one on disk at a time (7B in bf16 is 15.2 GB).
#   BIN=build/bin OUT=/tmp/ckpt_bench RUNS=3 bash bench/checkpoint/run.sh "7b 1.5b" bf16
set -euo pipefail
BIN=${BIN:-build/bin}
OUT=${OUT:-/tmp/ckpt_bench}
RUNS=${RUNS:-3}
SHAPES=${1:-7b 1.5b}
DTYPE=${2:-bf16}
THREADS=${THREADS:-0}
PY=${CUDA_AGENT_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
case $DTYPE in bf16) ST=BF16 ;; f32) ST=F32 ;; *) echo "dtype bf16 or f32" >&2; exit 1 ;; esac
mkdir -p "$OUT"
rows=$OUT/rows.jsonl
: > "$rows"
config() {  # config SHAPE: the Qwen2.5 config.json keys the native model reads
  case $1 in
    7b) echo '{"model_type":"qwen2","vocab_size":152064,"hidden_size":3584,"intermediate_size":18944,"num_hidden_layers":28,
               "num_attention_heads":28,"num_key_value_heads":4,"max_position_embeddings":32768,"rms_norm_eps":1e-6,
               "rope_theta":1000000.0,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}' ;;
    1.5b) echo '{"model_type":"qwen2","vocab_size":151936,"hidden_size":1536,"intermediate_size":8960,"num_hidden_layers":28,
                 "num_attention_heads":12,"num_key_value_heads":2,"max_position_embeddings":32768,"rms_norm_eps":1e-6,
                 "rope_theta":1000000.0,"tie_word_embeddings":true,"torch_dtype":"bfloat16"}' ;;
    *) echo "unknown shape $1 (7b, 1.5b)" >&2; exit 1 ;;
  esac
}
measure() {  # measure SHAPE RUN PHASE CMD...: one row {shape, run, phase, seconds, cpu_seconds, max_rss_mb}
  local shape=$1 run=$2 phase=$3
  shift 3
  /usr/bin/time -f '%e %M %U %S' -o "$OUT/time.txt" "$@" > /dev/null
  read -r secs rss_kb user sys < "$OUT/time.txt"
  printf '{"shape":"%s","run":%s,"phase":"%s","seconds":%s,"cpu_seconds":%s,"max_rss_mb":%s,"load_average":%s}\n' \
    "$shape" "$run" "$phase" "$secs" "$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')" "$((rss_kb / 1024))" "$(cut -d' ' -f1 /proc/loadavg)" \
    | tee -a "$rows"
}
for shape in $SHAPES; do
  config "$shape" > "$OUT/config_$shape.json"
  for run in $(seq 1 "$RUNS"); do
    ck=$OUT/ck_$shape
    rm -rf "$ck"
    measure "$shape" "$run" init "$BIN/ppo-step" init --model-config "$OUT/config_$shape.json" --out "$ck" --dtype "$DTYPE" \
      --threads "$THREADS" --seed "$run" -q
    echo "  on disk: $(du -sh "$ck" | cut -f1), $(ls "$ck" | tr '\n' ' ')" >&2
    measure "$shape" "$run" load_warm "$BIN/checkpoint-bench" read "$ck" "$THREADS"
    measure "$shape" "$run" load_cold "$BIN/checkpoint-bench" read "$ck" "$THREADS" cold
    rm -rf "$ck"
    measure "$shape" "$run" dummy "$BIN/checkpoint-bench" dummy "$OUT/config_$shape.json" "$ST" "$THREADS"
    measure "$shape" "$run" save "$BIN/checkpoint-bench" write "$OUT/config_$shape.json" "$ck" "$ST" "$THREADS"
    rm -rf "$ck"
  done
done
"$PY" - "$rows" "$DTYPE" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"checkpoint times, {sys.argv[2]} on disk: median [min, max] over runs; max RSS is the largest of the runs")
print(f"{'shape':6} {'phase':10} {'runs':>4} {'seconds':>24} {'max RSS MB':>11} {'CPU s':>8} {'load avg':>8}")
for key in dict.fromkeys((r["shape"], r["phase"]) for r in rows):
    sel = [r for r in rows if (r["shape"], r["phase"]) == key]
    s = [r["seconds"] for r in sel]
    print(f"{key[0]:6} {key[1]:10} {len(s):>4} {statistics.median(s):>10.1f} [{min(s):.1f}, {max(s):.1f}]".ljust(48) +
          f" {max(r['max_rss_mb'] for r in sel):>11} {statistics.median(r.get('cpu_seconds', 0) for r in sel):>8.1f}"
          f" {statistics.median(r.get('load_average', 0) for r in sel):>8.1f}")
PY
