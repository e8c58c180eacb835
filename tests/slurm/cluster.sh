#!/usr/bin/env bash
# Brings up a real one-node Slurm cluster (munged, slurmctld, slurmd on loopback, config written
# here into a temp dir), submits examples/slurm's ops-synth array of 4 shards and its afterok
# merge, with shard 2 made to fail once: checks the merge is cancelled, resubmit-failed.sh
# reruns shard 2 alone and the merge, and the merged store holds every task exactly once (the
# same task_ids as an unsharded run). Stops every daemon it started, also on failure.
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
export PATH="$CA_BIN:$PATH"
# Run inside a Slurm job of a real cluster (CI on Slurm), its variables would leak into the tools'
# --shard default and into sbatch: this test talks only to the cluster it starts.
unset SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX SLURM_ARRAY_JOB_ID \
  SLURM_JOB_ID SLURM_JOBID SLURM_CONF SLURM_CLUSTER_NAME SLURM_PARTITION SBATCH_PARTITION SBATCH_ACCOUNT
log() { echo "slurm test: $*" >&2; }

if [[ $(id -u) != 0 ]]; then
  log "SKIP: needs root to start munged, slurmctld and slurmd (CI runs as root)"
  exit 77
fi
missing=""
for b in munged munge slurmctld slurmd sbatch squeue scontrol sinfo; do command -v "$b" >/dev/null || missing+=" $b"; done
if [[ -n $missing ]]; then
  log "FAIL: not installed:$missing (apt-get install slurm-wlm munge, or make -f Makefile.wrap deps)"
  exit 1
fi
for b in ops-synth run-store kernel-check kernel-prof reward-calc; do
  [[ -x $CA_BIN/$b ]] || { log "FAIL: $CA_BIN/$b not built"; exit 1; }
done

T=$(mktemp -d /tmp/ca-slurm.XXXXXX)
chmod 755 "$T"  # munge wants execute permission for all on its socket's folder
mkdir -p "$T/state" "$T/spool" "$T/log" "$T/bin"
export SLURM_CONF="$T/slurm.conf"
status=1

stop_pid() {  # stop_pid NAME PIDFILE: TERM, wait up to 10 s, then KILL; only the pid we started
  local pid
  [[ -s $2 ]] || return 0
  pid=$(<"$2")
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$1 ($pid) did not stop: KILL"
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  if [[ $status != 0 ]]; then
    log "FAILED (exit $rc); last lines of the logs:"
    for f in "$T"/log/slurmctld.log "$T"/log/slurmd.log "$T"/work/logs/*.log; do
      [[ -f $f ]] && { echo "== $f" >&2; tail -n 15 "$f" >&2; }
    done
  fi
  # Jobs still running in this private cluster (a failure mid-test) are cancelled first, so no
  # job step outlives the daemons.
  if [[ -s $T/slurmctld.pid ]] && kill -0 "$(<"$T/slurmctld.pid")" 2>/dev/null; then
    ids=$(timeout 10 squeue -h -o %A 2>/dev/null | paste -sd' ' || true)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086
      timeout 10 scancel $ids 2>/dev/null || true
      for _ in $(seq 20); do [[ -z $(timeout 5 squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
    fi
  fi
  stop_pid slurmd "$T/slurmd.pid"
  stop_pid slurmctld "$T/slurmctld.pid"
  stop_pid munged "$T/munged.pid"
  if [[ ${CA_KEEP_SLURM:-0} == 1 ]]; then log "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two free TCP ports on loopback: nothing answers a connect.
free_port() {
  local p=$1
  while (echo > "/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
  echo "$p"
}
ctld_port=$(free_port $((20000 + RANDOM % 30000)))
slurmd_port=$(free_port $((ctld_port + 1)))
host=$(hostname -s)

# munge: a fresh key, its own socket (a system munged, if any, is left alone).
head -c 1024 /dev/urandom > "$T/munge.key"
chmod 400 "$T/munge.key"
munged --force --key-file="$T/munge.key" --socket="$T/munge.sock" --pid-file="$T/munged.pid" \
  --log-file="$T/log/munged.log" --seed-file="$T/munge.seed"
munge --socket="$T/munge.sock" -n | unmunge --socket="$T/munge.sock" > /dev/null \
  || { log "munge does not round-trip a credential"; exit 1; }

cat > "$SLURM_CONF" <<CONF
# Written by tests/slurm/cluster.sh: one node, loopback only, no cgroups, no accounting.
ClusterName=catest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge.sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
PlugStackConfig=$T/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
: > "$T/plugstack.conf"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$host"
for _ in $(seq 120); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || { log "node never became idle (state '$state')"; exit 1; }
log "cluster up: node $host idle, slurmctld :$ctld_port, slurmd :$slurmd_port"

# The tools, with ops-synth wrapped so that shard 2 fails until $T/let-shard-2-pass exists.
for f in "$CA_BIN"/*; do ln -s "$f" "$T/bin/$(basename "$f")"; done
rm "$T/bin/ops-synth"
cat > "$T/bin/ops-synth" <<WRAP
#!/bin/bash
if [[ " \$* " == *" --shard 2/4 "* && ! -e $T/let-shard-2-pass ]]; then
  echo "ops-synth: failure injected by the slurm test (shard 2, first attempt)" >&2; exit 1
fi
exec "$CA_BIN/ops-synth" "\$@"
WRAP
chmod +x "$T/bin/ops-synth"

# wait_jobs ID...: until none of them is pending or running (at most 5 minutes).
wait_jobs() {
  local ids
  ids=$(IFS=,; echo "$*")
  for _ in $(seq 600); do
    [[ -z $(squeue -h -j "$ids" 2>/dev/null) ]] && return 0
    sleep 0.5
  done
  log "jobs $ids still queued after 5 minutes:"; squeue -o "%i %j %T %r" >&2; return 1
}
job_state() { scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | head -1 | cut -d= -f2; }
array_states() { scontrol -o show job "$1" | grep -o 'ArrayTaskId=[0-9]* .*JobState=[A-Z_]*' | sed 's/ArrayTaskId=\([0-9]*\).*JobState=\([A-Z_]*\)/\1:\2/' | sort | paste -sd' '; }

# run_submission LABEL ARRAY AFTER [ENV=VALUE...] SCRIPT ARGS...: runs an examples/slurm script, takes
# the two job ids it prints (ARRAY=ID for the array job, AFTER=ID for the job that depends on it) and
# waits for them; sets array, after and states (the array's task states).
run_submission() {
  local label=$1 array_key=$2 after_key=$3 out
  shift 3
  out=$(env CA_BIN="$T/bin" "$@")
  echo "$out" >&2
  array=$(echo "$out" | sed -n "s/^$array_key=//p")
  after=$(echo "$out" | sed -n "s/^$after_key=//p")
  [[ -n $array && -n $after ]] || { log "$label: did not print $array_key= and $after_key= job ids"; exit 1; }
  wait_jobs "$array" "$after"
  states=$(array_states "$array")
  log "$label: $array_key array $array: $states; $after_key $after: $(job_state "$after")"
}

work="$T/work"
count=40 seed=7
run_submission "first submission" synth merge "$CA_SRC/examples/slurm/submit.sh" --work "$work" --stages synth --count $count \
  --seed $seed --sizes tiny --synth-shards 4
[[ $states == "0:COMPLETED 1:COMPLETED 2:FAILED 3:COMPLETED" ]] || { log "unexpected array states"; exit 1; }
[[ $(job_state "$after") == CANCELLED ]] || { log "merge should be cancelled (afterok not met)"; exit 1; }
[[ ! -e $work/synth.db ]] || { log "a merged store exists although a shard failed"; exit 1; }
for i in 0 1 3; do
  [[ -f $work/synth/shard-$i.done && -f $work/logs/ca-synth-${array}_$i.log ]] || { log "shard $i: no marker or no %A_%a log"; exit 1; }
done
grep -q 'failure injected' "$work/logs/ca-synth-${array}_2.log" || { log "shard 2's log lacks the failure"; exit 1; }

# Resubmit only what failed.
touch "$T/let-shard-2-pass"
run_submission "resubmission" synth merge "$CA_SRC/examples/slurm/resubmit-failed.sh" --work "$work" synth
[[ $states == "2:COMPLETED" ]] || { log "the resubmission should run shard 2 only"; exit 1; }
[[ $(job_state "$after") == COMPLETED ]] || { log "merge did not complete"; exit 1; }
# Nothing left to resubmit now.
CA_BIN="$T/bin" "$CA_SRC/examples/slurm/resubmit-failed.sh" --work "$work" synth 2>&1 | grep -q 'nothing to resubmit' \
  || { log "resubmit-failed.sh should find nothing to do"; exit 1; }

# The merged store holds every task exactly once, and the same tasks as an unsharded run.
run-store query --store "$work/synth.db" "SELECT COUNT(*) AS n, COUNT(DISTINCT task_id) AS d FROM tasks" > "$T/counts"
grep -q "{\"n\":$count,\"d\":$count}" "$T/counts" || { log "merged store: $(cat "$T/counts"), expected $count distinct tasks"; exit 1; }
run-store query --store "$work/synth.db" "SELECT task_id FROM tasks ORDER BY task_id" \
  | grep -o '"task_id":"[^"]*"' > "$T/merged.ids"
"$CA_BIN/ops-synth" generate -n $count --seed $seed --sizes tiny --no-store 2>/dev/null \
  | grep -o '"task_id":"[^"]*"' | sort > "$T/whole.ids"
cmp -s "$T/merged.ids" "$T/whole.ids" || { log "merged task_ids differ from the unsharded run:"; diff "$T/whole.ids" "$T/merged.ids" | head >&2; exit 1; }
[[ $(wc -l < "$work/synth.jsonl") == "$count" ]] || { log "synth.jsonl does not hold $count tasks"; exit 1; }
[[ -z $(find "$work" -name '.publishing.*') ]] || { log "a temporary publish file was left behind"; exit 1; }
log "ok: $count tasks from 4 shards (shard 2 resubmitted), each exactly once in $work/synth.db"

# The rollout stages' plumbing on CPU: the demo candidates over 2 shards (compile-only checks,
# since this cluster has no GPU and 2 CPUs: --gres=none and --cpus-per-task=1 override the script),
# then the summary job.
run_submission "rollout stages" rollout summary CHECK_ARGS="--compile-only --arch sm_90" \
  "$CA_SRC/examples/slurm/submit.sh" --work "$work" --stages all --from rollout --rollout-shards 2 \
  --candidates "$CA_SRC/datasets/demo/candidates.jsonl" -- --gres=none --cpus-per-task=1
[[ $states == "0:COMPLETED 1:COMPLETED" && $(job_state "$after") == COMPLETED ]] || { log "rollout stages failed"; exit 1; }
n_cand=$(wc -l < "$CA_SRC/datasets/demo/candidates.jsonl")
[[ $(wc -l < "$work/rollout.jsonl") == "$n_cand" ]] || { log "rollout.jsonl does not hold $n_cand records"; exit 1; }
run-store query --store "$work/rollout.db" "SELECT COUNT(*) AS n, COUNT(DISTINCT candidate_id) AS d FROM checks" > "$T/counts"
grep -q "{\"n\":$n_cand,\"d\":$n_cand}" "$T/counts" || { log "rollout store: $(cat "$T/counts"), expected $n_cand checks"; exit 1; }
[[ -s $work/summary.jsonl ]] || { log "no summary.jsonl"; exit 1; }
log "ok: $n_cand candidates checked over 2 rollout shards, merged once each, summary written"

# agent-run inside an array task (issue 17): the array's variables shard agent-run's own input,
# and its locked compile/verify calls pass --shard 0/1 to kernel-check, so each call's one record
# is judged instead of being sharded away ("kernel-check exit 0 without a result").
mkdir -p "$work/agent"
cat > "$T/agent-task.sh" <<AGENT
#!/usr/bin/env bash
exec "$CA_BIN/agent-run" --tasks "$CA_SRC/datasets/demo/tasks.jsonl" --policy "replay:$CA_SRC/datasets/demo/replay.jsonl" \\
  --max-turns 20 --seed 1 --check-arg=--compile-only --check-arg=--arch=sm_90 --no-store \\
  -o "$work/agent/episodes.\$SLURM_ARRAY_TASK_ID.jsonl"
AGENT
chmod +x "$T/agent-task.sh"
agent_job=$(sbatch --parsable --array=1-2 --gres=none --cpus-per-task=1 -o "$work/agent/%a.log" "$T/agent-task.sh")
wait_jobs "$agent_job"
states=$(array_states "$agent_job")
[[ $states == "1:COMPLETED 2:COMPLETED" ]] || { log "agent-run array: $states"; cat "$work"/agent/*.log >&2; exit 1; }
python3 - "$work"/agent/episodes.*.jsonl "$CA_SRC/datasets/demo/tasks.jsonl" <<'PY' || { log "agent-run in an array task: locked calls lost"; exit 1; }
import json, sys
*outs, tasks = sys.argv[1:]
want = {json.loads(l)["task_id"] for l in open(tasks)}
got, calls = {}, 0
for f in outs:
    recs = [json.loads(l) for l in open(f)]
    assert recs, f + ": no episode (the array task got no share of the tasks?)"
    for r in recs:
        got[r["task_id"]] = r
        for turn in r["episode"]["turns"]:
            for res in turn.get("tool_results", []):
                if res.get("name") in ("compile", "verify"):
                    calls += 1
                    text = res.get("content", "")
                    assert "without a result" not in text, text[:300]
                    assert '"check"' in text, text[:300]
assert set(got) == want, (sorted(want - set(got)), "tasks missing across the 2 array tasks")
print("agent-run array: %d episodes over 2 array tasks, %d locked calls judged" % (len(got), calls))
assert calls > 0, "no locked call found in the trajectories"
PY
log "ok: agent-run inside an array task (2 shards): every locked call judged"
status=0
