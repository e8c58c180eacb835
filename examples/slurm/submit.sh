#!/bin/bash
# submit.sh: submit the pipeline to Slurm as job arrays chained with afterok dependencies:
#   synth array (ops-synth, CPU) -> merge synth -> rollout array (GPUs) -> summary.
# Settings are written to $CA_WORK/pipeline.env, so resubmit-failed.sh reruns with the same ones.
#
# usage: submit.sh --work DIR [--bin DIR] [--stages synth|all] [--count N] [--seed S]
#                  [--sizes gpu|tiny] [--synth-shards N] [--filter "OPTS"] [--rollout-shards N]
#                  [--policy SPEC | --candidates FILE] [--from synth|rollout] [--shards LIST]
#                  [-- SBATCH_OPTIONS...]
# example: submit.sh --work /shared/run1 --count 8000 --synth-shards 16 --rollout-shards 8 \
#            --policy openai:http://vllm-host:8000/v1 -- --partition=gpu --account=me
# Prints "stage=jobid" lines on stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work="${CA_WORK:-}" from=synth shards="" stages=all
declare -A given=()
extra=()
while (($#)); do
  case $1 in
    --work) work=$2; shift 2 ;;
    --bin) given[CA_BIN]=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --count) given[SYNTH_COUNT]=$2; shift 2 ;;
    --seed) given[SYNTH_SEED]=$2; shift 2 ;;
    --sizes) given[SYNTH_SIZES]=$2; shift 2 ;;
    --synth-shards) given[SYNTH_SHARDS]=$2; shift 2 ;;
    --filter) given[SYNTH_FILTER]=$2; shift 2 ;;
    --rollout-shards) given[ROLLOUT_SHARDS]=$2; shift 2 ;;
    --policy) given[ROLLOUT_POLICY]=$2; shift 2 ;;
    --candidates) given[ROLLOUT_CANDIDATES]=$(realpath "$2"); shift 2 ;;
    --from) from=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "submit.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
done
[[ -n $work ]] || { echo "submit.sh: --work DIR (a shared folder) is required" >&2; exit 1; }
[[ $stages == synth || $stages == all ]] || { echo "submit.sh: --stages synth|all" >&2; exit 1; }
[[ $from == synth || $from == rollout ]] || { echo "submit.sh: --from synth|rollout" >&2; exit 1; }
command -v sbatch >/dev/null || { echo "submit.sh: sbatch not found (is this a Slurm login node?)" >&2; exit 3; }
mkdir -p "$work/logs" "$work/synth" "$work/rollout"
work=$(cd "$work" && pwd)

# pipeline.env: what an earlier submit wrote (or the environment), then this command line, then
# defaults. The job scripts source it too (env.sh), so every rerun uses the same settings.
env_file="$work/pipeline.env"
keys=(CA_BIN STAGES SYNTH_COUNT SYNTH_SEED SYNTH_SIZES SYNTH_SHARDS SYNTH_FILTER ROLLOUT_SHARDS ROLLOUT_POLICY
      ROLLOUT_CANDIDATES AGENT_ARGS CHECK_ARGS PROF_ARGS REWARD_ARGS RESCORE_ARGS SBATCH_EXTRA)
# shellcheck disable=SC1090
[[ -f $env_file ]] && source "$env_file"
for k in "${!given[@]}"; do printf -v "$k" '%s' "${given[$k]}"; done
STAGES=$stages
: "${SYNTH_COUNT:=1000}" "${SYNTH_SEED:=1}" "${SYNTH_SIZES:=gpu}" "${SYNTH_SHARDS:=4}" "${ROLLOUT_SHARDS:=1}"
if ((${#extra[@]})); then SBATCH_EXTRA="${extra[*]}"; elif [[ -n ${SBATCH_EXTRA:-} ]]; then read -r -a extra <<< "$SBATCH_EXTRA"; fi
for k in "${keys[@]}"; do [[ -n ${!k:-} ]] && printf '%s=%q\n' "$k" "${!k}"; done > "$env_file.tmp"
mv -f "$env_file.tmp" "$env_file"

export CA_WORK=$work CA_SLURM_DIR=$here
if [[ -n ${CA_BIN:-} ]]; then export CA_BIN; fi

# submit_array STAGE SCRIPT DEPENDENCY: the whole array, or only --shards; clears their markers.
submit_array() {
  local stage=$1 script=$2 dep=$3 n list
  local var="${stage^^}_SHARDS"
  n=${!var}
  list=${shards:-0-$((n - 1))}
  if [[ -z $shards ]]; then rm -f "$work/$stage"/shard-*.done
  else for i in ${shards//,/ }; do rm -f "$work/$stage/shard-$i.done"; done; fi
  sbatch --parsable --array="$list" --output="$work/logs/%x-%A_%a.log" \
    ${dep:+--dependency=afterok:$dep --kill-on-invalid-dep=yes} "${extra[@]}" "$here/$script"
}
submit_one() {
  local dep=$1; shift
  sbatch --parsable --output="$work/logs/%x-%j.log" \
    ${dep:+--dependency=afterok:$dep --kill-on-invalid-dep=yes} "${extra[@]}" "$@"
}

dep=""
if [[ $from == synth ]]; then
  synth=$(submit_array synth synth.sbatch "")
  echo "synth=$synth"
  merge=$(submit_one "$synth" "$here/merge.sbatch" synth)
  echo "merge=$merge"
  echo "synth=$synth merge=$merge" >> "$work/jobs"
  dep=$merge
  shards=""  # later stages run whole
fi
if [[ $stages == all ]]; then
  [[ -n ${ROLLOUT_POLICY:-}${ROLLOUT_CANDIDATES:-} ]] \
    || { echo "submit.sh: --stages all needs --policy SPEC or --candidates FILE" >&2; exit 1; }
  rollout=$(submit_array rollout rollout.sbatch "$dep")
  echo "rollout=$rollout"
  summary=$(submit_one "$rollout" "$here/summary.sbatch")
  echo "summary=$summary"
  echo "rollout=$rollout summary=$summary" >> "$work/jobs"
fi
