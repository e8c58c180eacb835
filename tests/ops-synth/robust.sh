#!/usr/bin/env bash
# ops-synth under a careless user (issue 21): generate says how many distinct tasks a mix can give
# and refuses a larger -n before writing anything (it died with exit 4 after 27,415), reaches every
# distinct module size when asked for exactly that many; filter finishes and writes the tasks read
# before a bad line (at -j 1, 2, 4 it lost the ones in flight); SIGTERM and SIGINT stop a busy
# reference worker (it was left running under PID 1), remove its /dev/shm dir and close the run
# row with 143 / 130.
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch (set CUDA_AGENT_PYTHON)"
export CUDA_AGENT_PYTHON="$PY"
export CUDA_AGENT_WORKER_WRITE_DIRS="$T"  # tasks here leave marks for this script (the worker is confined)
RS="$CA_BIN/run-store"

# 1. generate: the module category holds few distinct tasks; -n beyond what the mix can give is a
# usage error before anything is written, and exactly that many is reached.
set +e; "$OS" generate -n 200000 --seed 1 --store "$T/big.db" > "$T/big.jsonl" 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] || fail "generate -n 200000: exit $rc, expected 1: $(tail -2 "$T/err")"
grep -q "can give at most [0-9]* distinct tasks" "$T/err" || fail "no capacity in the message: $(cat "$T/err")"
[ ! -s "$T/big.jsonl" ] || fail "generate -n 200000 wrote $(wc -l < "$T/big.jsonl") tasks before stopping"
if [ -e "$T/big.db" ]; then
  n=$("$RS" query --store "$T/big.db" "SELECT COUNT(*) AS n FROM tasks")
  [ "$n" = '{"n":0}' ] || fail "generate -n 200000 stored tasks: $n"
fi
# Modules only: the message gives the capacity C; -n C reaches it (all distinct), -n C+1 is refused.
set +e; "$OS" generate --mix module=1 -n 100000 --seed 3 --sizes tiny --no-store > /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] || fail "modules only, -n 100000: exit $rc"
cap=$(grep -o "give at most [0-9]*" "$T/err" | grep -o "[0-9]*$")
[ "${cap:-0}" -ge 50 ] || fail "module capacity ${cap:-?}: $(cat "$T/err")"
"$OS" generate --mix module=1 -n "$cap" --seed 3 --sizes tiny --no-store > "$T/mods.jsonl" 2> "$T/err" \
  || fail "generate --mix module=1 -n $cap (the capacity) failed: exit $?: $(tail -1 "$T/err")"
python3 - "$T/mods.jsonl" "$cap" <<'PY' || fail "the $cap module tasks"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == int(sys.argv[2]), len(recs)
assert len({r["task_id"] for r in recs}) == len(recs), "duplicate task ids"
assert all(r["data_source"] == "transformers#1" for r in recs)
PY
set +e; "$OS" generate --mix module=1 -n $((cap + 1)) --seed 3 --sizes tiny --no-store > "$T/over.jsonl" 2>/dev/null; rc=$?; set -e
[ "$rc" = 1 ] && [ ! -s "$T/over.jsonl" ] || fail "-n capacity+1: exit $rc, $(wc -l < "$T/over.jsonl") written"
# A small run says what the mix can give, and a chain category run dry (one op) is a usage error
# naming the category, not an internal error.
"$OS" generate -n 10 --seed 1 --sizes tiny --no-store 2> "$T/err" > /dev/null
grep -q "this mix can give at most" "$T/err" || fail "generate does not say what the mix can give: $(cat "$T/err")"
set +e; "$OS" generate --ops ReLU --mix 1=1 -n 5000 --seed 1 --sizes tiny --no-store > /dev/null 2> "$T/err"; rc=$?; set -e
[ "$rc" = 1 ] && grep -q "category 1" "$T/err" || fail "--ops ReLU -n 5000: exit $rc: $(tail -1 "$T/err")"

# 2. filter: 8 tasks then a bad line; all 8 judged, written and stored before the exit 2.
"$OS" generate -n 8 --seed 11 --sizes tiny --no-store > "$T/eight.jsonl" 2>/dev/null
{ cat "$T/eight.jsonl"; echo 'not json'; } > "$T/bad.jsonl"
for j in 1 2 4; do
  set +e
  "$OS" filter --device cpu -j "$j" --keep-rejected --no-compile --store "$T/f$j.db" -i "$T/bad.jsonl" \
    > "$T/out$j.jsonl" 2> "$T/err"
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "line 9" "$T/err" || fail "filter -j $j: exit $rc: $(tail -2 "$T/err")"
  [ "$(wc -l < "$T/out$j.jsonl")" = 8 ] || fail "filter -j $j wrote $(wc -l < "$T/out$j.jsonl") of the 8 tasks before the bad line"
  n=$("$RS" query --store "$T/f$j.db" "SELECT COUNT(*) AS n FROM filter_results")
  [ "$n" = '{"n":8}' ] || fail "filter -j $j stored $n verdicts, expected 8"
done

# 3. Signals: a task whose forward sleeps keeps the worker busy; SIGTERM / SIGINT to filter.
cat > "$T/slow.py" <<PY
import json
code = '''import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        open("$T/busy", "w").write("1")
        time.sleep(120)
        return x * 2.0


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''
print(json.dumps({"task_id": "0000000000005105", "code": code}))
PY
python3 "$T/slow.py" > "$T/slow.jsonl"
for sig in TERM INT; do
  rm -f "$T/busy"
  # SIGINT is ignored in a shell's background jobs: start the tool with it at its default.
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$OS" filter --device cpu --no-compile --timeout 600 --store "$T/sig.db" -i "$T/slow.jsonl" > /dev/null 2> "$T/sig.err" &
  pid=$!
  for _ in $(seq 600); do [ -e "$T/busy" ] && break; sleep 0.1; done
  [ -e "$T/busy" ] || fail "SIG$sig: the worker never got busy: $(tail -3 "$T/sig.err")"
  workers=$(ps -o pid= --ppid $pid | tr -d ' ')
  [ -n "$workers" ] || fail "SIG$sig: no worker process under $pid"
  # The worker's private dir (its --work-dir), which must be gone afterwards.
  dirs=$(for w in $workers; do ps -o args= -p "$w" | grep -o -- '--work-dir [^ ]*' | cut -d' ' -f2; done)
  [ -n "$dirs" ] && [ -d "${dirs%%$'\n'*}" ] || fail "SIG$sig: no worker dir found: $(ps -o args= -p $workers)"
  kill -s "$sig" $pid
  set +e; wait $pid; rc=$?; set -e
  want=$([ $sig = TERM ] && echo 143 || echo 130)
  [ "$rc" = "$want" ] || fail "SIG$sig: exit $rc, expected $want: $(tail -2 "$T/sig.err")"
  sleep 0.5
  for w in $workers; do
    if kill -0 "$w" 2>/dev/null; then
      ps -o pid,ppid,stat,cmd -p "$w" >&2
      kill -9 "$w"
      fail "SIG$sig: worker $w still running after ops-synth exited"
    fi
  done
  for d in $dirs; do [ ! -e "$d" ] || fail "SIG$sig: left behind: $d ($(ls "$d" | head -3))"; done
  row=$("$RS" query --store "$T/sig.db" "SELECT exit_status AS s, ended_at IS NOT NULL AS ended FROM runs ORDER BY started_at DESC LIMIT 1")
  [ "$row" = "{\"s\":$want,\"ended\":1}" ] || fail "SIG$sig: run row $row, expected exit $want and closed"
  grep -q "interrupted by SIG$sig" "$T/sig.err" || fail "SIG$sig: no note on stderr: $(tail -2 "$T/sig.err")"
done
# 4. One task's code changes nothing for another's (issue 32: one hostile task ahead of three benign
# ones got all three dropped): a task that patches torch (nn.Module.__call__ answers zeros,
# torch.randn draws zeros) goes first; the three behind it keep the verdicts they get alone, at -j 1
# (one worker for all four) and -j 2. The filter's records name the per-task worker.
"$OS" generate -n 3 --seed 11 --sizes tiny --no-store > "$T/benign.jsonl" 2>/dev/null
"$PY" - > "$T/hostile.jsonl" <<'PY'
import json
code = """import torch
import torch.nn as nn
_call = torch.nn.Module.__call__
def _zero(self, *a, **k):
    out = _call(self, *a, **k)
    return out * 0 if isinstance(out, torch.Tensor) else out
torch.nn.Module.__call__ = _zero
torch.randn = lambda *a, **k: torch.zeros(*a)
class Model(nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0
def get_inputs():
    return [torch.rand(8, 16)]
def get_init_inputs():
    return []
"""
print(json.dumps({"task_id": "00000000000bad01", "code": code}))
PY
"$OS" filter --device cpu -j 1 --no-compile --keep-rejected --no-store -i "$T/benign.jsonl" > "$T/alone.jsonl" 2> "$T/err" \
  || fail "filter of the benign tasks alone: $(tail -2 "$T/err")"
cat "$T/hostile.jsonl" "$T/benign.jsonl" > "$T/mixed.jsonl"
for j in 1 2; do
  "$OS" filter --device cpu -j "$j" --no-compile --keep-rejected --no-store -i "$T/mixed.jsonl" > "$T/mixed$j.jsonl" 2> "$T/err" \
    || fail "filter -j $j of a hostile task and three benign ones: $(tail -2 "$T/err")"
  "$PY" - "$T/alone.jsonl" "$T/mixed$j.jsonl" <<'PY' || fail "filter -j $j: the hostile task changed the verdicts of the tasks behind it"
import json, sys
alone = {r["task_id"]: r["filter"] for r in map(json.loads, open(sys.argv[1]))}
mixed = {r["task_id"]: r["filter"] for r in map(json.loads, open(sys.argv[2]))}
assert len(alone) == 3 and all(f["kept"] for f in alone.values()), alone
for tid, f in alone.items():
    assert mixed[tid]["kept"] == f["kept"] and mixed[tid]["reason"] == f["reason"], (tid, mixed[tid], f)
    assert "one-task-per-process" in mixed[tid]["worker_confinement"]["applied"], mixed[tid]["worker_confinement"]
assert mixed["00000000000bad01"]["kept"] is False, mixed["00000000000bad01"]
PY
done
echo "ok   a torch-patching task first: the three benign tasks behind it keep their verdicts (-j 1, -j 2)"
echo "ops-synth robust: ok"
