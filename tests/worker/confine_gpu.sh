#!/usr/bin/env bash
# GPU (device) test: the reference worker confined on a GPU node still does its work. The hello
# names the confinement (Landlock when the kernel has it, seccomp, pgroup, output-cap, ...); a task
# loads, draws inputs and its reference kept on the GPU (CUDA IPC), is timed eager and under
# torch.compile (inductor and Triton compile inside the worker's own folder), and judged by the
# filters with the compile check; a hostile task on the same GPU worker gets no network and (with
# Landlock) no /etc/shadow. Needs a GPU and a python3 with CUDA torch 2.x. confine_gpu_namespaces.sh
# runs it without Landlock: the worker (CUDA, IPC, inductor) inside the namespace sandbox.
set -uo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
export CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
P="$CA_BIN/worker-ping"
FX="$CA_SRC/tests/worker/fixtures"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
PY=$(command -v python3)
cat > "$T/hostile.py" <<'PYT'
import os, socket
import torch
import torch.nn as nn
found = []
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 22))
    found.append("tcp connected")
except OSError as e:
    if e.errno not in (1, 13):  # EPERM/EACCES: refused by the confinement (ECONNREFUSED would mean it got out)
        found.append("tcp: %s" % e)
try:
    open("/etc/shadow").read()
    found.append("read /etc/shadow")
except OSError:
    pass
try:
    os.setsid()
    found.append("setsid")
except OSError:
    pass
if found:
    raise RuntimeError("ESCAPED: " + "; ".join(found))
class Model(nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(8)]
def get_init_inputs():
    return []
PYT
{
  echo '{"op":"hello"}'
  echo '{"op":"warm"}'
  echo "{\"op\":\"load\",\"task_id\":\"gg\",\"code_file\":\"$FX/gemm_gelu.py\"}"
  echo '{"op":"inputs","task_id":"gg","seed":3,"keep":"in"}'
  echo '{"op":"reference","task_id":"gg","inputs_key":"in","keep":"ref"}'
  echo '{"op":"time","task_id":"gg","mode":"eager","precision":"fp32","budget_s":2}'
  echo '{"op":"time","task_id":"gg","mode":"compile","precision":"fp32","budget_s":2}'
  echo '{"op":"filters","task_id":"gg","check_compile":true,"eager_time_range_ms":[0,1000]}'
  echo "{\"op\":\"load\",\"task_id\":\"hostile\",\"code_file\":\"$T/hostile.py\"}"
  echo '{"op":"release","keys":["in","ref"]}'
} > "$T/requests.jsonl"
start=$(date +%s)
"$P" --device cuda:0 --timeout-ms 600000 < "$T/requests.jsonl" > "$T/answers.jsonl" 2> "$T/err"
rc=$?
echo "worker_confine_gpu: answers in $(( $(date +%s) - start )) s (worker-ping exit $rc)"
"$PY" - "$T/answers.jsonl" "$T/err" <<'PY'
import ctypes, json, os, sys
answers = [json.loads(l) for l in open(sys.argv[1])]
err = open(sys.argv[2]).read()
abi = max(0, ctypes.CDLL(None).syscall(444, None, 0, 1))
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)
check(len(answers) == 10, "expected 10 answers, got %d; stderr: %s" % (len(answers), err[-2000:]))
if answers:
    h = answers[0]
    print("landlock ABI %d; confinement %s; warnings %s" % (abi, h.get("confinement"), h.get("confinement_warnings")))
    fs = "namespaces" if os.environ.get("CA_CONFINE_NAMESPACES") else "landlock" if abi >= 1 else None
    need = ["seccomp", "pgroup", "output-cap", "memory-watch", "rlimit"] + ([fs] if fs else [])
    check(all(n in h.get("confinement", []) for n in need), "hello lacks %s: %s" % (need, h))
names = ["hello", "warm", "load", "inputs", "reference", "time eager", "time compile", "filters", "hostile load", "release"]
for name, a in zip(names[1:], answers[1:]):
    check(a.get("ok"), "%s: %s" % (name, json.dumps(a)[:1500]))
if len(answers) == 10:
    e, c = answers[5], answers[6]
    print("eager %.1f us, compile %.1f us; filters %s" % (e["value_us"], c["value_us"], json.dumps(answers[7])[:300]))
    check(c["value_us"] > 0 and e["value_us"] > 0, "times not positive")
    check(answers[3]["tensors"] and answers[4]["tensors"], "no kept tensors (CUDA IPC)")
if fails:
    print("stderr of worker-ping:\n" + err[-3000:])
    sys.exit(1)
print("worker_confine_gpu: ok")
PY
