#!/usr/bin/env bash
# pipeline.sh: the cuda-agent chain as a user runs it, on the shipped demo set (datasets/demo):
#   tasks -> candidates (agent-run, replay policy) -> kernel-check -> kernel-prof -> reward-calc
#   -> loop (examples/rl-loop.sh: a tiny native policy warmed up by RFT on those episodes, then
#      iterations of sampling, judging and training) -> run-store summary -> run-store report
# Each stage reads the previous stage's file and writes its own, so any stage can be rerun alone:
#   bash examples/pipeline.sh              # every stage
#   bash examples/pipeline.sh check prof   # only these (their inputs must exist in $CA_OUT)
# On a machine without a GPU it runs the CPU part (compile-only checks) and says what it skipped.
#
# Environment: CA_BIN (folder of the binaries; default: PATH), CA_OUT (where files go; default
# ./demo-run), CA_DEMO (the task set; default datasets/demo), CA_ARCH (compile-only target, sm_90).
# CA_LOOP_ITERATIONS (the loop's iterations after the warm-up; default 3 on a GPU, 1 without).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -n ${CA_BIN:-} ]]; then export PATH="$CA_BIN:$PATH"; fi   # the tools, as built
demo=${CA_DEMO:-$repo/datasets/demo}                              # 8 tasks + a bundle for each
out=${CA_OUT:-$PWD/demo-run}                                      # every stage's file lands here
arch=${CA_ARCH:-sm_90}                                            # compile-only target without a GPU
mkdir -p "$out"
export CUDA_AGENT_STORE="$out/run.db"                             # one run store for every tool
say() { echo "pipeline: $*" >&2; }

# A GPU is there when the driver lists one; without it the GPU stages are skipped, not faked.
# (CA_FORCE_CPU=1 takes the CPU path even on a GPU machine.)
if [[ ${CA_FORCE_CPU:-0} != 1 ]] && nvidia-smi -L >/dev/null 2>&1; then gpu=1; else gpu=0; fi
stages=("$@")
if ((${#stages[@]} == 0)); then
  stages=(tasks candidates check prof reward loop summary report)
  rm -f "$out"/run.db "$out"/run.db-wal "$out"/run.db-shm "$out"/*.jsonl   # a whole run starts afresh
fi
skipped=()

for stage in "${stages[@]}"; do
  stage_t0=${EPOCHREALTIME/,/.}
  case $stage in
    tasks)
      # The tasks: KernelBench-format records (ops-synth generate | ops-synth filter makes these at
      # scale); stored so every later tool can find a task by its task_id.
      cp "$demo/tasks.jsonl" "$out/tasks.jsonl"
      run-store import -i "$out/tasks.jsonl"
      say "tasks: $(wc -l < "$out/tasks.jsonl") in $out/tasks.jsonl"
      ;;
    candidates)
      if command -v agent-run >/dev/null; then
        # One episode per task; the replay policy plays a scripted agent (write the kernel and the
        # plan, compile, verify) in place of an LLM server (--policy openai:http://host:8000/v1).
        agent-run --tasks "$out/tasks.jsonl" --policy "replay:$demo/replay.jsonl" --submit final \
          --max-turns 20 --seed 1 -o "$out/candidates.jsonl"
      else
        # No agent-run built: the demo's bundles go straight in as candidate records.
        say "candidates: agent-run not found, using $demo/candidates.jsonl as the candidates"
        cp "$demo/candidates.jsonl" "$out/candidates.jsonl"
      fi
      say "candidates: $(wc -l < "$out/candidates.jsonl") in $out/candidates.jsonl"
      ;;
    check)
      if ((gpu)); then
        # Compile with NVRTC, run in a child process per GPU on fresh inputs, compare with PyTorch.
        kernel-check --tasks "$out/tasks.jsonl" -i "$out/candidates.jsonl" -o "$out/checked.jsonl"
      else
        # No GPU: compile, and check plans and policy rules only (status compiled, or the failure).
        kernel-check --compile-only --arch "$arch" --tasks "$out/tasks.jsonl" \
          -i "$out/candidates.jsonl" -o "$out/checked.jsonl"
        skipped+=("check: correctness runs (no GPU: compile-only for $arch instead)")
      fi
      ;;
    prof)
      if ((gpu)); then
        # Time the candidates that passed, and the eager and torch.compile baselines, the same way.
        kernel-prof --tasks "$out/tasks.jsonl" --baselines eager,compile \
          -i "$out/checked.jsonl" -o "$out/profiled.jsonl"
      else
        skipped+=("prof: timing needs a GPU")
      fi
      ;;
    reward)
      if ((gpu)); then
        # The published milestone reward: -1 failed, 1 correct, 2 beats eager by >5%, 3 beats both.
        reward-calc -i "$out/profiled.jsonl" -o "$out/rewarded.jsonl"
      else
        skipped+=("reward: a reward needs a judged and timed candidate (no GPU: not judged)")
      fi
      ;;
    loop)
      # The loop at toy scale: a tiny native policy (the demo's byte-level tokenizer) is warmed up
      # by RFT on the replay episodes above (ppo-step renders their turns, which carry no token ids,
      # with the policy's chat template), then samples episodes itself, which are judged, rewarded
      # and trained on (rft, then ppo with a critic), each checkpoint sampling the next iteration.
      if ! command -v ppo-step >/dev/null; then skipped+=("loop: ppo-step not built"); continue; fi
      rm -rf "$out/loop"; mkdir -p "$out/loop"
      warmup=$out/candidates.jsonl; [[ -f $out/rewarded.jsonl ]] && warmup=$out/rewarded.jsonl   # judged on a GPU
      loop=(--tasks "$out/tasks.jsonl" --warmup "$warmup" --work "$out/loop" --episodes 1)
      if ((gpu)); then
        ppo-step init --model-config "$demo/loop/policy-gpu.json" --out "$out/loop/base" --seed 1 -q
        loop+=(--iterations "${CA_LOOP_ITERATIONS:-3}" --rft 2 --device cuda --warmup-config "$demo/loop/warmup-gpu.yaml"
               --rft-config "$demo/loop/rft-gpu.yaml"
               --ppo-config "$demo/loop/ppo.yaml" -- --max-turns 8 --max-tokens 2048 --temperature 0)
      else
        ppo-step init --model-config "$demo/loop/policy-cpu.json" --out "$out/loop/base" --seed 1 -q
        loop+=(--iterations "${CA_LOOP_ITERATIONS:-1}" --rft 0 --cpu-proxy --rft-config "$demo/loop/rft-cpu.yaml"
               --ppo-config "$demo/loop/ppo.yaml" -- --max-turns 2 --max-tokens 48)
        skipped+=("loop: rewards are a compile-only proxy (+1 compiled for $arch, -1 not; nothing run or timed), the policy is 2 layers of width 32 trained and sampled on the CPU, so it writes no kernel; this shows the loop's plumbing, not learning")
      fi
      cp "$demo/tokenizer.json" "$out/loop/base/"
      # The loop has a store of its own (the stages above keep theirs as they were); the report reads both.
      CUDA_AGENT_STORE=$out/loop/run.db bash "$repo/examples/rl-loop.sh" --no-report --ckpt "$out/loop/base" "${loop[@]}"
      ;;
    report)
      # The numbers a researcher compares, per level; pass rate and mean reward per iteration (one
      # reward-calc run, or one import of proxy rewards, per iteration) and each ppo-step's losses.
      stores=("$out/run.db"); [[ -f $out/loop/run.db ]] && stores+=("$out/loop/run.db")
      run-store report "${stores[@]}" --table --html "$out/report.html" >&2
      if [[ -f $out/loop/run.db ]]; then
        # One row per iteration: the runs that rewarded the loop's episodes (reward-calc, or the CPU
        # proxy's import), in run order, with the pass rate of what they rewarded and the mean reward.
        say "the loop's iterations (pass rate and mean reward per reward run; the same plotted in the report):"
        CUDA_AGENT_STORE=$out/loop/run.db run-store query \
          "SELECT r.tool, substr(r.started_at, 1, 19) AS started, COUNT(*) AS rewards,
                  printf('%.1f%%', 100.0 * SUM(EXISTS (SELECT 1 FROM checks c WHERE c.candidate_id = w.candidate_id
                                                       AND c.status = 'passed')) / COUNT(*)) AS pass_rate,
                  printf('%.3f', AVG(w.value)) AS reward_mean, MIN(w.scheme) AS scheme
           FROM rewards w JOIN runs r USING (run_id) GROUP BY w.run_id ORDER BY r.started_at, r.rowid" >&2
      fi
      say "report: $out/report.html"
      ;;
    summary)
      # Per run: counts, pass rate, speedups and their geomeans, mean reward.
      run-store summary --table
      ;;
    *) say "unknown stage '$stage' (tasks candidates check prof reward loop summary report)"; exit 1 ;;
  esac
  say "$stage: $(LC_ALL=C awk -v t0="$stage_t0" -v t1="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", t1 - t0 }') s"
done

if ((${#skipped[@]})); then
  say "no GPU used (nvidia-smi lists none, or CA_FORCE_CPU=1), so these were skipped:"
  for s in "${skipped[@]}"; do say "  - $s"; done
  say "the CPU part ran; on a GPU machine the same command runs every stage"
fi
# What each candidate got, one line each (the check verdict, and the reward when there is one).
last="$out/rewarded.jsonl"; [[ -f $last ]] || last="$out/checked.jsonl"
if [[ -f $last ]]; then
  say "verdicts ($last):"
  run-store query "SELECT json_extract(t.body, '\$.name') AS task, c.candidate_id, c.status, w.value AS reward
                   FROM checks c LEFT JOIN tasks t ON t.task_id = c.task_id
                   LEFT JOIN rewards w USING (candidate_id)
                   WHERE c.run_id = (SELECT run_id FROM runs WHERE tool = 'kernel-check' ORDER BY started_at DESC, rowid DESC LIMIT 1)
                   ORDER BY c.rowid" >&2
fi
