# env.sh: sourced by every job script here. Finds the tools, the shared folder and node-local
# scratch, and publishes files to the shared folder by atomic rename.
#
# Settings (exported by submit.sh, or set them yourself before sbatch; sbatch passes the
# environment on by default):
#   CA_WORK   shared folder (NFS, Lustre, ...) where every stage publishes its results (required)
#   CA_BIN    folder of the cuda-agent binaries (default: found on PATH)
#   CA_LOCAL  node-local scratch (default $SLURM_TMPDIR, else $TMPDIR, else /tmp)
set -euo pipefail

: "${CA_WORK:?set CA_WORK to a shared folder (submit.sh does)}"
if [[ -n ${CA_BIN:-} ]]; then export PATH="$CA_BIN:$PATH"; fi
command -v run-store >/dev/null || { echo "cuda-agent tools not found: set CA_BIN" >&2; exit 3; }

# The shard this array task works on. Array indices ARE shard indices (0..n-1), so a resubmitted
# subset (--array=1,3) still works on shards 1 and 3; that is why the scripts pass --shard
# explicitly instead of relying on the tools' default (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN
# of SLURM_ARRAY_TASK_COUNT, right only for a full array 0..n-1 or min..max).
ca_shard_index() { echo "${SLURM_ARRAY_TASK_ID:?not an array job}"; }

# A private folder on node-local disk for this job, in $CA_LOCAL_DIR: SQLite stores live here while
# they are written (never one SQLite file shared over NFS); removed when the job's shell exits.
# (Call it directly, not as $(...): a subshell would remove the folder on its own exit.)
ca_make_local_dir() {
  local base=${CA_LOCAL:-${SLURM_TMPDIR:-${TMPDIR:-/tmp}}}
  CA_LOCAL_DIR=$(mktemp -d "$base/cuda-agent.${SLURM_JOB_ID:-$$}.${SLURM_ARRAY_TASK_ID:-0}.XXXXXX")
  # shellcheck disable=SC2064  # expand now: the trap must remove this very folder
  trap "rm -rf '$CA_LOCAL_DIR'" EXIT
}

# publish SRC DEST: copy SRC next to DEST under a temporary name, flush it, rename it into place.
# Readers of the shared folder see the old file or the whole new one, never half a file. A SQLite
# store is published only once its writer has exited (no -wal left: the last close checkpoints).
ca_publish() {
  local src=$1 dest=$2
  if [[ -e $src-wal && -s $src-wal ]]; then
    echo "publish: $src still has a write-ahead log (its writer did not exit cleanly)" >&2
    return 3
  fi
  mkdir -p "$(dirname "$dest")"
  local tmp
  tmp=$(mktemp "$(dirname "$dest")/.publishing.$(basename "$dest").XXXXXX")
  cp "$src" "$tmp"
  sync "$tmp" 2>/dev/null || sync
  mv -f "$tmp" "$dest"
}

# mark_done STAGE INDEX: the marker resubmit-failed.sh looks for; written last, atomically.
ca_mark_done() {
  local marker="$CA_WORK/$1/shard-$2.done"
  echo "job ${SLURM_JOB_ID:-?} array ${SLURM_ARRAY_JOB_ID:-?}_${SLURM_ARRAY_TASK_ID:-?} on $(hostname) at $(date -u +%FT%TZ)" \
    > "$marker.tmp.$$"
  mv -f "$marker.tmp.$$" "$marker"
}

# Stage settings written by submit.sh (shard counts, options) so reruns use the same ones.
if [[ -f $CA_WORK/pipeline.env ]]; then
  # shellcheck disable=SC1091
  source "$CA_WORK/pipeline.env"
fi
