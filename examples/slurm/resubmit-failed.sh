#!/bin/bash
# resubmit-failed.sh STAGE: resubmit only the shards of STAGE (synth or rollout) that have no
# done-marker in $CA_WORK/STAGE/, then the stages after it, with the settings of pipeline.env.
# A shard that failed, timed out, or whose node died has no marker; finished ones are kept.
#
# usage: resubmit-failed.sh --work DIR STAGE [--dry-run] [-- SBATCH_OPTIONS...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work="${CA_WORK:-}" stage="" dry=0
rest=()
while (($#)); do
  case $1 in
    --work) work=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) rest=("$@"); break ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    synth|rollout) stage=$1; shift ;;
    *) echo "resubmit-failed.sh: unknown argument $1" >&2; exit 1 ;;
  esac
done
[[ -n $work && -n $stage ]] || { echo "usage: resubmit-failed.sh --work DIR synth|rollout" >&2; exit 1; }
[[ -f $work/pipeline.env ]] || { echo "resubmit-failed.sh: no $work/pipeline.env (was submit.sh run?)" >&2; exit 2; }
n=$(grep "^${stage^^}_SHARDS=" "$work/pipeline.env" | cut -d= -f2)

# Jobs of this pipeline still queued or running would race with the resubmission.
if command -v squeue >/dev/null && [[ -f $work/jobs ]]; then
  ids=$(grep -o '=[0-9]*' "$work/jobs" | tr -d = | sort -u | paste -sd,)
  live=$(squeue -h -j "$ids" -t PENDING,RUNNING,CONFIGURING,COMPLETING -o '%i %T %r' 2>/dev/null || true)
  if [[ -n $live ]]; then
    echo "resubmit-failed.sh: jobs of this pipeline are still queued or running; wait or scancel them:" >&2
    echo "$live" >&2
    exit 2
  fi
fi

failed=()
for ((i = 0; i < n; i++)); do [[ -f $work/$stage/shard-$i.done ]] || failed+=("$i"); done
if ((${#failed[@]} == 0)); then
  echo "resubmit-failed.sh: every $stage shard (0..$((n - 1))) is done; nothing to resubmit" >&2
  exit 0
fi
list=$(IFS=,; echo "${failed[*]}")
echo "resubmit-failed.sh: $stage shards without a done-marker: $list" >&2
((dry)) && exit 0
exec "$here/submit.sh" --work "$work" --stages "$(grep '^STAGES=' "$work/pipeline.env" | cut -d= -f2)" \
  --from "$stage" --shards "$list" "${rest[@]}"
