#!/usr/bin/env bash
# One task's code per worker process (WorkerOptions::one_task_per_process; issue 32: a task that
# patches torch made another task's reference all zeros). Through worker-ping, each case beside its
# control on a shared worker (so the check can fail):
#   - a task that patches torch.Tensor.__mul__ to answer zeros, then another task: its reference is
#     its own (2.0) on a worker per task; zeros on a shared worker (the control);
#   - files the first task leaves in its folder (TMPDIR, the inductor cache) are gone for the next;
#   - a cache folder the user named (TORCHINDUCTOR_CACHE_DIR) is not opened to the tasks;
#   - the first task, asked for again, is loaded again in a fresh worker (the client's replay).
source "$(dirname "$0")/../lib.sh"
set -u
export CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
P="$CA_BIN/worker-ping"
task() {  # task NAME BODY: a task whose module runs BODY, its Model doubling x
  { echo "import os, torch, torch.nn as nn"; echo "$2"
    printf 'class Model(nn.Module):\n    def forward(self, x):\n        return x * 2.0\n'
    printf 'def get_inputs():\n    return [torch.ones(8)]\ndef get_init_inputs():\n    return []\n'; } > "$T/$1.py"
}
task plain ''
task patch 'torch.Tensor.__mul__ = lambda self, o: torch.zeros_like(self)'
task plant 'open(os.path.join(os.environ["TMPDIR"], "planted"), "w").write("x")
os.makedirs(os.environ["TORCHINDUCTOR_CACHE_DIR"], exist_ok=True)
open(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "planted"), "w").write("x")'
task look 'for d in (os.environ["TMPDIR"], os.environ["TORCHINDUCTOR_CACHE_DIR"]):
    if os.path.exists(os.path.join(d, "planted")):
        raise RuntimeError("FOUND planted in %s" % d)'
# first_value FILE: outputs.0[0] of a safetensors file
first_value() {
  "$PY" -c 'import json,struct,sys,array
b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n])
s,e=h["outputs.0"]["data_offsets"]; a=array.array("f"); a.frombytes(b[8+n+s:8+n+e]); print(a[0])' "$1"
}
ref_after_patch() {  # ref_after_patch [worker-ping options]: the plain task's reference after the patching one
  rm -f "$T/ref.safetensors"
  printf '%s\n' "{\"op\":\"load\",\"task_id\":\"p\",\"code_file\":\"$T/patch.py\"}" \
    "{\"op\":\"load\",\"task_id\":\"a\",\"code_file\":\"$T/plain.py\"}" \
    "{\"op\":\"inputs\",\"task_id\":\"a\",\"seed\":0,\"out\":\"$T/in.safetensors\"}" \
    "{\"op\":\"reference\",\"task_id\":\"a\",\"inputs\":\"$T/in.safetensors\",\"out\":\"$T/ref.safetensors\"}" \
    "{\"op\":\"inputs\",\"task_id\":\"p\",\"seed\":0,\"out\":\"$T/in2.safetensors\"}" |
    "$P" --device cpu --write-dir "$T" "$@" > "$T/answers.jsonl" 2> "$T/err"
  [ -s "$T/ref.safetensors" ] && first_value "$T/ref.safetensors" || echo "none: $(tail -c 300 "$T/answers.jsonl")"
}
v=$(ref_after_patch)
[ "$v" = 0.0 ] || fail "control: on a shared worker the patched torch should give zeros, got $v"
pass "control: a shared worker gives the next task's reference as the patched torch computes it (0.0)"
v=$(ref_after_patch --one-task-per-process)
[ "$v" = 2.0 ] || fail "one task per process: the next task's reference is $v, not its own 2.0"
pass "one task per process: the next task's reference is its own (2.0)"
tail -1 "$T/answers.jsonl" | grep -q '"ok":true' || fail "the first task asked for again: $(tail -1 "$T/answers.jsonl" | head -c 300)"
pass "the first task, asked for again, is loaded again (replay in a fresh worker)"
leftovers() {  # leftovers [worker-ping options]: the look task's answer after the plant task
  printf '%s\n' "{\"op\":\"load\",\"task_id\":\"w\",\"code_file\":\"$T/plant.py\"}" \
    "{\"op\":\"load\",\"task_id\":\"r\",\"code_file\":\"$T/look.py\"}" |
    TORCHINDUCTOR_CACHE_DIR="$T/user-cache" "$P" --device cpu "$@" 2> "$T/err" | tail -1
}
a=$(leftovers)
echo "$a" | grep -q "FOUND planted" || fail "control: on a shared worker the next task should find the planted files: $a"
pass "control: a shared worker's next task finds what the first left"
rm -rf "$T/user-cache"  # the control wrote there (a shared worker opens it)
a=$(leftovers --one-task-per-process)
echo "$a" | grep -q '"ok":true' || fail "one task per process: the next task found what the first left: $(echo "$a" | head -c 300)"
[ ! -e "$T/user-cache/planted" ] || fail "one task per process: a task wrote in the user's TORCHINDUCTOR_CACHE_DIR"
pass "one task per process: nothing the first task left (TMPDIR, inductor cache) reaches the next; the user's cache folder is not opened"
h=$(echo '{"op":"hello"}' | "$P" --device cpu --one-task-per-process 2> /dev/null)
echo "$h" | grep -q '"one-task-per-process"' || fail "the hello does not name one-task-per-process: $h"
pass "the hello names one-task-per-process"
# spawns(): what a caller that keeps a task's load answer checks (kernel-check's lanes): a fresh
# process for another task's code, none for the same code again; the folder of temp_path() is emptied
# by the fresh start, so a file written there before another task's load is gone (the failure seen on
# the H100 in session 19: a cubin written before the load that started a fresh worker).
printf '%s\n' '{"op":"hello"}' "{\"op\":\"load\",\"task_id\":\"a\",\"code_file\":\"$T/plain.py\"}" '{"op":"hello"}' \
  "{\"op\":\"load\",\"task_id\":\"a\",\"code_file\":\"$T/plain.py\"}" '{"op":"hello"}' \
  "{\"op\":\"load\",\"task_id\":\"p\",\"code_file\":\"$T/patch.py\"}" '{"op":"hello"}' |
  "$P" --device cpu --one-task-per-process > "$T/spawns.jsonl" 2> "$T/err" || fail "worker-ping: $(tail -3 "$T/err")"
s=$("$PY" -c 'import json,sys; print(" ".join(str(json.loads(l)["spawns"]) for l in open(sys.argv[1]) if "spawns" in json.loads(l)))' "$T/spawns.jsonl")
[ "$s" = "1 1 1 2" ] || fail "spawns after hello, load a, load a again, load p: want 1 1 1 2, got '$s'"
pass "spawns(): one process for a task's code loaded twice, a fresh one for another task's"
