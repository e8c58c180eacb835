#!/usr/bin/env bash
# rl-loop.sh: the loop the toolchain exists for, N iterations of
#   agent-run (the policy samples episodes) | kernel-check | kernel-prof | reward-calc | ppo-step
# where each iteration's new checkpoint is the next iteration's policy. The first --rft iterations
# are rejection fine-tuning, the rest PPO with a critic (a value-pretrain step starts the critic).
# Every tool writes the run store, so `run-store report` shows each iteration's pass rate and mean
# reward (one reward-calc run per iteration) and each ppo-step's losses.
#
#   bash examples/rl-loop.sh --tasks tasks.jsonl --ckpt ckpt/base --iterations 4 --rft 1 --work run1
#   bash examples/rl-loop.sh --tasks tasks.jsonl --ckpt /models/qwen --policy openai:http://127.0.0.1:30000/v1 ...
#
# Policies: native (default; agent-run samples native:CKPT itself, on --device) or openai:URL, a
# server serving CKPT: before each iteration's episodes agent-run asks it to load that iteration's
# checkpoint (--load-weights: SGLang's /update_weights_from_disk). For a server without such an
# endpoint (vLLM) set CA_SERVE_RESTART to a command that restarts the server on the checkpoint given
# as its last argument; the loop runs it and waits until URL/models answers.
#
# LoRA (--lora R): every ppo-step trains rank-R adapters on the frozen --ckpt (ppo-step --lora-rank R):
# each iteration's checkpoint is then a PEFT adapter folder (adapter_config.json +
# adapter_model.safetensors naming --ckpt as its base; the critic an adapter of its own), and the next
# step continues it. The native policy samples an adapter folder merged into its base. A served policy
# keeps serving --ckpt (start vLLM with --enable-lora --max-lora-rank R and
# VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, or SGLang with --enable-lora --max-lora-rank R
# --lora-target-modules all) and each iteration after the first loads the new adapter by
# `agent-run --load-lora DIR --server S` (no restart, no --load-weights): the server loads it under a
# name made of its content, unloads the previous one, and every request of the iteration names it.
#
# Options:
#   --tasks FILE        tasks (KernelBench form)                       [datasets/demo/tasks.jsonl]
#   --ckpt DIR          the starting policy (HF folder with tokenizer.json) (required)
#   --policy P          native | openai:URL                            [native]
#   --iterations N      iterations                                     [3]
#   --rft K             the first K iterations are rft, then ppo       [1]
#   --warmup FILE       episodes (e.g. the replay policy's) to RFT the policy on before iteration 1;
#                       judged first unless they carry reward sections (reward-calc's output)
#   --episodes M        episodes per task                              [2]
#   --device D          where ppo-step trains and the native policy samples: cpu | cuda[:N]  [cpu]
#   --lora R            train LoRA adapters of rank R on the frozen --ckpt (above)           [off]
#   --server S          the server behind openai:URL, for --lora: vllm | sglang
#   --rft-config Y, --ppo-config Y, --critic-config Y   ppo-step YAML for each mode
#   --warmup-config Y   ppo-step YAML for the warm-up's RFT            [the --rft-config]
#   --work DIR          every file and checkpoint of the run           [./rl-run]
#   --cpu-proxy         no GPU: reward +1 for a bundle that compiled (kernel-check --compile-only), -1
#                       otherwise, imported as scheme "compile-proxy" (nothing is run or timed: a smoke
#                       test of the loop, not a measurement)
#   --no-report         no run-store report at the end (default: the table on stderr)
#   -- ARGS             passed to agent-run (e.g. --max-turns 20 --max-tokens 2048)
# Environment: CA_BIN (the binaries; default PATH), CA_ARCH (compile-only target, sm_90),
# CA_FORCE_CPU=1 (the CPU path on a GPU machine), CA_SERVE_RESTART (above).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${CA_BIN:-} ]]; then export PATH="$CA_BIN:$PATH"; fi
say() { echo "rl-loop: $*" >&2; }
die() { say "$*"; exit "${2:-1}"; }

tasks=$repo/datasets/demo/tasks.jsonl ckpt= policy=native iterations=3 rft=1 warmup= episodes=2 device=cpu lora=0 server=
rft_config= warmup_config= ppo_config= critic_config= work=$PWD/rl-run cpu_proxy=0 report=1 agent_args=()
while (($#)); do
  case $1 in
    --tasks) tasks=$2; shift 2 ;;
    --ckpt) ckpt=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --rft) rft=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --episodes) episodes=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --lora) lora=$2; shift 2 ;;
    --server) server=$2; shift 2 ;;
    --rft-config) rft_config=$2; shift 2 ;;
    --warmup-config) warmup_config=$2; shift 2 ;;
    --ppo-config) ppo_config=$2; shift 2 ;;
    --critic-config) critic_config=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --cpu-proxy) cpu_proxy=1; shift ;;
    --no-report) report=0; shift ;;
    --) shift; agent_args=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (--help lists them)" ;;
  esac
done
[[ -n $ckpt ]] || die "--ckpt DIR is required (the starting policy)"
is_adapter() { [[ -f $1/adapter_config.json ]]; }
[[ -f $ckpt/config.json && -f $ckpt/tokenizer.json ]] || { ((lora)) && is_adapter "$ckpt"; } \
  || die "--ckpt $ckpt: no config.json and tokenizer.json there (with --lora: or an adapter folder to continue)" 2
[[ $lora =~ ^[0-9]+$ ]] || die "--lora: a rank (a number >= 1), got '$lora'"
[[ -z $server || $server == vllm || $server == sglang ]] || die "--server: vllm or sglang, got '$server'"
if ((lora)) && [[ $policy == openai:* && -z $server ]]; then
  die "--lora with a served policy needs --server vllm|sglang (how the server loads each new adapter)"
fi
[[ -f $tasks ]] || die "--tasks $tasks: no such file" 2
[[ $policy == native || $policy == openai:* ]] || die "--policy: native or openai:URL, got '$policy'"
[[ $iterations =~ ^[0-9]+$ && $rft =~ ^[0-9]+$ && $episodes =~ ^[1-9][0-9]*$ ]] || die "--iterations, --rft, --episodes: numbers"
mkdir -p "$work/ckpt"
export CUDA_AGENT_STORE=${CUDA_AGENT_STORE:-$work/run.db}
arch=${CA_ARCH:-sm_90}
if [[ ${CA_FORCE_CPU:-0} != 1 ]] && nvidia-smi -L >/dev/null 2>&1; then gpu=1; else gpu=0; fi
((gpu || cpu_proxy)) || die "no GPU: kernel-check cannot judge the episodes, so there is no reward to train on (--cpu-proxy runs the loop on compile-only proxy rewards)" 3
run-store import -i "$tasks"

# Where an iteration's time goes: `timed NAME CMD...` adds CMD's wall seconds to NAME's.
declare -A secs=()
timed() {  # NAME CMD...
  local name=$1 t0=${EPOCHREALTIME/,/.}; shift
  "$@"
  secs[$name]=$(LC_ALL=C awk -v a="${secs[$name]:-0}" -v t0="$t0" -v t1="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", a + t1 - t0 }')
}
say_seconds() {  # ITERATION: the seconds by stage, then forgotten
  local line="" k
  for k in sample check prof reward train; do [[ -n ${secs[$k]:-} ]] && line+=", $k ${secs[$k]}"; done
  say "$1: seconds: ${line#, }"
  secs=()
}

# ppo-step with an optional config; metrics appended to the iteration's file.
train() {  # MODE CONFIG IN OUT-METRICS ARGS...
  local mode=$1 config=$2 in=$3 metrics=$4; shift 4
  local cfg=(); [[ -n $config ]] && cfg=(--config "$config")
  ((lora)) && cfg+=(--lora-rank "$lora")
  timed train ppo-step --mode "$mode" --device "$device" "${cfg[@]}" "$@" -i "$in" >> "$metrics"
}

# Episodes -> judged, timed and rewarded records (or the CPU proxy).
judge() {  # EPISODES OUT
  local in=$1 out=$2 base=${2%.jsonl}
  if ((gpu)); then
    timed check kernel-check --tasks "$tasks" -i "$in" -o "$base.checked.jsonl"
    timed prof kernel-prof --tasks "$tasks" --baselines eager,compile -i "$base.checked.jsonl" -o "$base.profiled.jsonl"
    timed reward reward-calc -i "$base.profiled.jsonl" -o "$out"
  else
    timed check kernel-check --compile-only --arch "$arch" --tasks "$tasks" -i "$in" -o "$base.checked.jsonl"
    python3 - "$base.checked.jsonl" > "$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    ok = (r.get("check") or {}).get("status") == "compiled"
    r["reward"] = {"value": 1.0 if ok else -1.0, "scheme": "compile-proxy",
                   "reason": "compiled for the CPU run's arch (not run, not timed)" if ok else "did not compile"}
    print(json.dumps(r))
PY
    run-store import -i "$out"   # the proxy rewards, one import run per iteration
  fi
}

policy_args() {  # CKPT: agent-run's policy options for this checkpoint, in the array pargs
  if [[ $policy == native ]]; then
    pargs=(--policy "native:$1" --policy-device "$device")   # an adapter folder: merged into its base
  elif is_adapter "$1"; then
    pargs=(--policy "$policy" --load-lora "$1" --server "$server")
  elif ((lora)); then
    pargs=(--policy "$policy")   # the base, which the server serves and loads the adapters on
  elif [[ -n ${CA_SERVE_RESTART:-} ]]; then
    pargs=(--policy "$policy")
  else
    pargs=(--policy "$policy" --load-weights "$1")
  fi
}

serve() {  # CKPT: a restarted server (CA_SERVE_RESTART) is up on CKPT
  [[ $policy == openai:* && -n ${CA_SERVE_RESTART:-} ]] || return 0
  is_adapter "$1" && return 0   # an adapter is loaded into the running server (--load-lora)
  say "restarting the server on $1: $CA_SERVE_RESTART $1"
  $CA_SERVE_RESTART "$1"
  local url=${policy#openai:}
  for _ in $(seq 600); do curl -sf "$url/models" >/dev/null && return 0; sleep 1; done
  die "the server at $url did not come back within 600 s" 3
}

if [[ -n $warmup ]]; then
  # Iteration 0: the policy warmed up by RFT on given episodes (the replay policy's, a stronger
  # model's): ppo-step renders turns without token ids with the policy's own tokenizer.
  if python3 -c 'import json,sys; sys.exit(0 if "reward" in json.loads(open(sys.argv[1]).readline()) else 1)' "$warmup"; then
    say "warm-up: RFT on the episodes of $warmup that earned a reward > 0 (judged already)"
    cp "$warmup" "$work/warmup.rewarded.jsonl"
  else
    say "warm-up: judging $warmup, then RFT on the episodes that earned a reward > 0"
    judge "$warmup" "$work/warmup.rewarded.jsonl"
  fi
  train rft "${warmup_config:-$rft_config}" "$work/warmup.rewarded.jsonl" "$work/warmup.metrics.jsonl" --policy "$ckpt" --out "$work/ckpt/warmup"
  python3 -c 'import json,sys; m=json.loads(open(sys.argv[1]).readlines()[-1]); print("rl-loop: warm-up: %s episodes, NLL per response token %s -> %s over %s updates" % (m.get("episodes"), m.get("sft_loss_first"), m.get("sft_loss_last"), (m.get("optimizer_steps") or {}).get("actor")))' "$work/warmup.metrics.jsonl" >&2
  say_seconds warm-up
  ckpt=$work/ckpt/warmup
fi

critic=
for ((i = 1; i <= iterations; i++)); do
  it=$(printf 'iter-%02d' "$i")
  serve "$ckpt"
  say "$it: sampling $episodes episode(s) per task from $ckpt ($policy)"
  policy_args "$ckpt"
  timed sample agent-run --tasks "$tasks" "${pargs[@]}" --episodes-per-task "$episodes" --seed "$i" \
    "${agent_args[@]}" -o "$work/$it.episodes.jsonl"
  judge "$work/$it.episodes.jsonl" "$work/$it.rewarded.jsonl"
  out=$work/ckpt/$it
  if ((i <= rft)); then
    # An iteration where no episode earned a reward trains nothing: the policy samples again as it was.
    train rft "$rft_config" "$work/$it.rewarded.jsonl" "$work/$it.metrics.jsonl" --policy "$ckpt" --out "$out" --empty-ok
  else
    if [[ -z $critic ]]; then
      # The critic starts from the policy (a zero value head) and is pretrained on this batch first.
      train value-pretrain "$critic_config" "$work/$it.rewarded.jsonl" "$work/$it.metrics.jsonl" \
        --policy "$ckpt" --out "$work/ckpt/$it-critic0"
      critic=$work/ckpt/$it-critic0
    fi
    train ppo "$ppo_config" "$work/$it.rewarded.jsonl" "$work/$it.metrics.jsonl" \
      --policy "$ckpt" --critic "$critic" --out "$out" --critic-out "$out/critic"
    critic=$out/critic
  fi
  python3 - "$work/$it.rewarded.jsonl" "$work/$it.metrics.jsonl" "$it" >&2 <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
vals = [r["reward"]["value"] for r in recs if isinstance(r.get("reward"), dict) and "value" in r["reward"]]
passed = sum(1 for r in recs if (r.get("check") or {}).get("correct") is True)
m = [json.loads(l) for l in open(sys.argv[2]) if l.strip()][-1]
trained = ("%s step %s, losses %s" % (m.get("mode"), m.get("step"), json.dumps(m.get("losses")))
           if m.get("trained", True) else "%s: nothing trained (%s)" % (m.get("mode"), m.get("reason")))
print("rl-loop: %s: %d episodes, %d passed, mean reward %s, %s" % (
    sys.argv[3], len(recs), passed, "%.3f" % (sum(vals) / len(vals)) if vals else "n/a", trained))
PY
  say_seconds "$it"
  if [[ -d $out ]]; then ckpt=$out; else say "$it: no new checkpoint; the next iteration samples $ckpt again"; fi
done
say "done: the last checkpoint is $ckpt; the store is $CUDA_AGENT_STORE"
if ((report)); then run-store report --table >&2; fi
