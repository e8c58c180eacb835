#!/usr/bin/env bash
# Task code runs confined (libcommon/confine, cuda_agent_worker/confine.py): hostile tasks, each
# beside a control that does the same to what is allowed (so a check cannot pass by the task never
# running). A hostile task raises "DENIED <error>" at load when its attack was refused, so a load
# that succeeds is an attack that worked.
#   files:   /etc/shadow, the home folder, a store, another folder, the worker's own log: no reading
#            or writing; its TMPDIR: yes
#   network: TCP and UDP sockets (loopback too), IPv6, AF_UNIX on CPU: refused
#   processes: setsid, setpgid, start_new_session, a double-forked sleeper: all ended with the
#            worker, also when the tool gets kill -9; no signal to the tool
#   output:  60 MB printed: the log holds the cap and a mark, the load still answers
#   memory:  children holding memory count (group), files in its folder count
#   env:     the tool's variables (a secret) are not inherited
# confine_namespaces.sh runs the same cases without Landlock (a node whose kernel has none): the
# filesystem then comes from the namespace sandbox (libcommon/worker/namespace_sandbox.hpp).
set -u
: "${CA_BIN:?}" "${CA_SRC:?}"
export CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
P="$CA_BIN/worker-ping"
T=$(mktemp -d)
# The sleepers' argument, this run's own: worker_confine and worker_confine_namespaces run this script
# side by side under ctest -j, and a pgrep for a fixed one saw the other run's sleepers.
SLEEP_S=$(( 9000000 + ($$ % 1000) * 997 + RANDOM % 997 ))
cleanup() { rm -rf "$T"; [ -n "${wp:-}" ] && kill -9 "$wp" 2>/dev/null; pkill -9 -f "sleep ${SLEEP_S}" 2>/dev/null; true; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
py() { /usr/bin/python3 "$@"; }
abi=$(py -c 'import ctypes; l = ctypes.CDLL(None); print(max(0, l.syscall(444, None, 0, 1)))')
echo "landlock ABI $abi"

mkdir -p "$T/home" "$T/store" "$T/other"
echo "home-secret" > "$T/home/secret.txt"
echo "store-row" > "$T/store/run.sqlite"

# task FILE BODY: a task whose module code runs BODY (indented by the caller), then a tiny Model.
task() {
  { echo "import os, sys, socket, subprocess, time, signal"
    echo "import torch"
    echo "import torch.nn as nn"
    cat
    printf 'class Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n'
    printf 'def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n'
  } > "$T/$1.py"
}
# load NAME [worker-ping options...]: one load, its answer on stdout.
load() {
  local name=$1; shift
  echo "{\"op\":\"load\",\"task_id\":\"$name\",\"code_file\":\"$T/$name.py\"}" |
    HOME="$T/home" CUDA_AGENT_JUDGE_SECRET=s3cr3t "$P" --device cpu --timeout-ms 60000 "$@" 2> "$T/$name.err"
}
# expect_denied NAME WHAT: the load failed and says so with an errno the confinement gives.
expect_denied() {
  local a; a=$(load "$1")
  if echo "$a" | py -c 'import json,sys; a=json.loads(sys.stdin.read()); sys.exit(0 if not a["ok"] and a.get("error")=="task_error" and "DENIED" in a.get("detail","") else 1)'; then
    ok "$2: refused"
  else
    fail "$2: not refused: $a $(tail -3 "$T/$1.err")"
  fi
}
expect_ok() {
  local a; a=$(load "$1" "${@:3}")
  if echo "$a" | py -c 'import json,sys; sys.exit(0 if json.loads(sys.stdin.read())["ok"] else 1)'; then
    ok "$2: allowed (control)"
  else
    fail "$2: the control failed: $a $(tail -3 "$T/$1.err")"
  fi
}

# The hello names what was applied.
h=$(echo '{"op":"hello"}' | "$P" --device cpu 2> "$T/hello.err")
echo "$h" | py -c '
import json, sys
h = json.loads(sys.stdin.read())
c = h["confinement"]
fs = "namespaces" if sys.argv[2] else "landlock" if int(sys.argv[1]) >= 1 else None
need = ["seccomp", "rlimit", "pgroup", "output-cap", "memory-watch"] + ([fs] if fs else [])
missing = [n for n in need if n not in c]
assert not missing, ("missing", missing, h)
print("confinement:", c, h.get("confinement_warnings", []))
' "$abi" "${CA_CONFINE_NAMESPACES:-}" || fail "hello does not name the confinement: $h"
tmpdir=$(echo "$h" | py -c 'import json,sys; print(json.loads(sys.stdin.read())["temp_dir"])')

# --- files -------------------------------------------------------------------------------------
D='    raise RuntimeError("DENIED %s" % e)'
if [ "$abi" -ge 1 ]; then
  [ -r /etc/shadow ] || echo "note: /etc/shadow not readable to this user; still tried"
  task read_shadow <<EOF
try:
    open("/etc/shadow").read()
except OSError as e:
$D
EOF
  expect_denied read_shadow "reading /etc/shadow"
  task read_passwd <<'EOF'
assert "root" in open("/etc/passwd").read()
EOF
  expect_ok read_passwd "reading /etc/passwd"
  task read_home <<EOF
try:
    open(os.path.expanduser("~/secret.txt")).read()
except OSError as e:
$D
EOF
  expect_denied read_home "reading a file in the home folder"
  task list_root <<EOF
try:
    os.listdir("/root")
except OSError as e:
$D
EOF
  expect_denied list_root "listing /root"
  task read_store <<EOF
try:
    open("$T/store/run.sqlite").read()
except OSError as e:
$D
EOF
  expect_denied read_store "reading the store"
  task write_other <<EOF
try:
    open("$T/other/planted.txt", "w").write("x")
except OSError as e:
$D
EOF
  expect_denied write_other "writing outside its folder"
  [ ! -e "$T/other/planted.txt" ] || fail "a file was planted in $T/other"
  task write_tmp <<'EOF'
p = os.path.join(os.environ["TMPDIR"], "scratch.txt")
open(p, "w").write("x")
assert open(p).read() == "x"
EOF
  expect_ok write_tmp "writing in its TMPDIR"
  task write_log <<EOF
try:
    root = os.path.dirname(os.path.dirname(os.environ["TMPDIR"]))
    logs = [f for f in os.listdir(root) if f.endswith(".log")] if os.access(root, os.R_OK) else ["worker-0.log"]
    open(os.path.join(root, logs[0] if logs else "worker-0.log"), "a").write("forged\n" * 10)
except OSError as e:
$D
EOF
  expect_denied write_log "writing its own log file directly"
  task read_parent_env <<EOF
try:
    open("/proc/%d/environ" % os.getppid(), "rb").read()
except OSError as e:
$D
EOF
  expect_denied read_parent_env "reading the tool's /proc/PID/environ"
  task read_self_proc <<'EOF'
assert open("/proc/self/status").read()
EOF
  expect_ok read_self_proc "reading its own /proc/self"
  if [ -n "${CA_CONFINE_NAMESPACES:-}" ]; then
    # In the namespace sandbox the whole worker runs inside, CUDA's start included, and cuInit names
    # its threads: without this write it fails with 304 and torch sees no GPU (found on the H100).
    task own_thread_comm <<'EOF'
import threading
p = "/proc/self/task/%d/comm" % threading.get_native_id()
open(p, "w").write("ca-named")
assert open(p).read().strip() == "ca-named"
EOF
    expect_ok own_thread_comm "naming its own thread (/proc/self/task/TID/comm), as cuInit does"
  fi
else
  fail "this kernel has no Landlock: the file checks cannot run (the worker warns: $(grep -i landlock "$T/hello.err" | head -1))"
fi

# --- environment -------------------------------------------------------------------------------
task env_secret <<'EOF'
if "CUDA_AGENT_JUDGE_SECRET" not in os.environ:
    raise RuntimeError("DENIED: not inherited")
EOF
expect_denied env_secret "the tool's secret in the environment"

# --- network -----------------------------------------------------------------------------------
py - "$T/port" <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(5)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
s.settimeout(120)
try:
    while True:
        c, _ = s.accept(); open(sys.argv[1] + ".hit", "w").write("connected"); c.close()
except Exception:
    pass
PY
srv=$!
for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
port=$(cat "$T/port")
task tcp <<EOF
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(("127.0.0.1", $port))
except OSError as e:
$D
EOF
expect_denied tcp "a TCP connection to loopback"
[ ! -e "$T/port.hit" ] || fail "the listener was reached"
task udp <<EOF
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("127.0.0.1", $port))
except OSError as e:
$D
EOF
expect_denied udp "a UDP datagram to loopback"
task tcp6 <<EOF
try:
    socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
except OSError as e:
$D
EOF
expect_denied tcp6 "an IPv6 socket"
task unix_cpu <<EOF
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
except OSError as e:
$D
EOF
expect_denied unix_cpu "an AF_UNIX socket on a CPU worker"
task netlink <<EOF
try:
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
except OSError as e:
$D
EOF
expect_denied netlink "a netlink socket"
kill "$srv" 2>/dev/null

# --- processes ---------------------------------------------------------------------------------
task setsid <<EOF
try:
    os.setsid()
except OSError as e:
$D
EOF
expect_denied setsid "setsid()"
task setpgid <<EOF
try:
    os.setpgid(0, 0)
except OSError as e:
$D
EOF
expect_denied setpgid "setpgid()"
task new_session <<EOF
try:
    subprocess.Popen(["/bin/sleep", "${SLEEP_S}"], start_new_session=True)
except (OSError, subprocess.SubprocessError) as e:
$D
EOF
expect_denied new_session "a child in a new session"
task kill_tool <<EOF
try:
    os.kill(os.getppid(), 0)
except OSError as e:
$D
EOF
expect_denied kill_tool "a signal to the tool"
task kill_all <<EOF
try:
    os.kill(-1, 0)
except OSError as e:
$D
EOF
expect_denied kill_all "a signal to every process (kill -1)"
task ptrace <<EOF
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, os.getppid(), 0, 0) != 0:   # PTRACE_ATTACH
    raise RuntimeError("DENIED errno %d" % ctypes.get_errno())
EOF
expect_denied ptrace "ptrace of the tool"

# A double fork: the grandchild is reparented away from the worker; it must still end with it.
task double_fork <<EOF
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.execv("/bin/sleep", ["/bin/sleep", "${SLEEP_S}"])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.5)
EOF
expect_ok double_fork "a double-forked sleeper"
sleep 1
if pgrep -f "sleep ${SLEEP_S}" > /dev/null; then
  fail "the double-forked sleeper outlived its worker: $(pgrep -af "sleep ${SLEEP_S}")"
  pkill -9 -f "sleep ${SLEEP_S}"
else
  ok "the double-forked sleeper ended with its worker"
fi

# The same, with the tool killed by SIGKILL while the task runs: the worker's reaper ends the group
# and removes the tool's folder.
task busy_fork <<EOF
pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        os.execv("/bin/sleep", ["/bin/sleep", "${SLEEP_S}"])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(60)
EOF
mkfifo "$T/in"
HOME="$T/home" "$P" --device cpu --timeout-ms 120000 < "$T/in" > "$T/busy.out" 2> "$T/busy.err" &
wp=$!
exec 3> "$T/in"
echo "{\"op\":\"load\",\"task_id\":\"busy\",\"code_file\":\"$T/busy_fork.py\"}" >&3
for _ in $(seq 200); do pgrep -f "sleep ${SLEEP_S}" > /dev/null && break; sleep 0.1; done
pgrep -f "sleep ${SLEEP_S}" > /dev/null || fail "the busy task's sleeper never started: $(tail -3 "$T/busy.err")"
worker=$(pgrep -P "$wp" -f cuda_agent_worker | head -1)
dir=$(tr '\0' '\n' < "/proc/$worker/cmdline" | grep -A1 -- '--work-dir' | tail -1)
kill -9 "$wp"; wait "$wp" 2>/dev/null; exec 3>&-; wp=""
gone=""
for _ in $(seq 50); do
  if ! pgrep -f "sleep ${SLEEP_S}" > /dev/null && ! kill -0 "$worker" 2>/dev/null; then gone=1; break; fi
  sleep 0.1
done
if [ -n "$gone" ]; then ok "tool killed: worker and sleeper gone"; else
  fail "tool killed: left running: $(pgrep -af "sleep ${SLEEP_S}|cuda_agent_worker")"; pkill -9 -f "sleep ${SLEEP_S}"; fi
for _ in $(seq 20); do [ -d "$dir" ] || break; sleep 0.1; done
[ ! -d "$dir" ] && ok "tool killed: its folder $dir removed" || fail "tool killed: $dir left behind"

# --- output ------------------------------------------------------------------------------------
task loud <<'EOF'
line = "x" * 999 + "\n"
for _ in range(60000):
    sys.stdout.write(line)
sys.stdout.flush()
os.write(2, b"C-level write\n" * 1000)
EOF
# The client's folder is gone once worker-ping exits; the cap is checked by a run that keeps it.
mkfifo "$T/in2"
"$P" --device cpu --output-cap 1000000 --timeout-ms 120000 < "$T/in2" > "$T/loud2.out" 2> "$T/loud2.err" &
wp=$!
exec 4> "$T/in2"
echo "{\"op\":\"load\",\"task_id\":\"loud\",\"code_file\":\"$T/loud.py\"}" >&4
echo '{"op":"hello"}' >&4
for _ in $(seq 600); do [ "$(wc -l < "$T/loud2.out")" -ge 2 ] && break; sleep 0.1; done
head -1 "$T/loud2.out" | py -c 'import json,sys; sys.exit(0 if json.loads(sys.stdin.read())["ok"] else 1)' \
  && ok "60 MB printed: the load still answered" || fail "the loud load: $(head -c 300 "$T/loud2.out")"
logdir=$(tail -1 "$T/loud2.out" | py -c 'import json,sys,os; print(os.path.dirname(json.loads(sys.stdin.read())["temp_dir"]))')
log=$(ls "$logdir"/worker-*.log 2>/dev/null | head -1)
size=$(stat -c %s "$log" 2>/dev/null || echo missing)
grep -q "output was cut here" "$log" 2>/dev/null || fail "the log has no mark of the cut"
exec 4>&-; wait "$wp"; wp=""
if [ "$size" != missing ] && [ "$size" -le 1001000 ] && [ "$size" -ge 900000 ]; then ok "the log holds $size bytes (cap 1000000)"; else
  fail "the log is $size bytes (cap 1000000): $log"; fi

# --- memory ------------------------------------------------------------------------------------
# Children each under RLIMIT_AS but together over the limit: the group watch kills them.
task hog_children <<'EOF'
for i in range(4):
    if os.fork() == 0:
        b = bytearray(700 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(60)
        os._exit(0)
time.sleep(30)
EOF
a=$(load hog_children --memory-mb 2500)
echo "$a" | grep -q '"error":"memory_limit"' && ok "children holding 2.8 GB over a 2500 MiB limit: memory_limit" \
  || fail "children over the limit were not stopped: $a"
# Files in its folder count as memory (it is in /dev/shm): 4 files of 700 MB, each under RLIMIT_FSIZE.
task hog_files <<'EOF'
chunk = b"y" * (1 << 20)
for i in range(4):
    with open(os.path.join(os.environ["TMPDIR"], "f%d" % i), "wb") as f:
        for _ in range(700):
            f.write(chunk)
time.sleep(30)
EOF
a=$(load hog_files --memory-mb 2500)
echo "$a" | grep -q '"error":"memory_limit"' && ok "2.8 GB of files in its folder over a 2500 MiB limit: memory_limit" \
  || fail "files over the limit were not stopped: $a"
# One file past the limit: RLIMIT_FSIZE.
task big_file <<EOF
try:
    with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as f:
        chunk = b"z" * (1 << 20)
        for _ in range(2600):
            f.write(chunk)
except OSError as e:
$D
EOF
a=$(load big_file --memory-mb 2500)
echo "$a" | grep -q 'DENIED\|memory_limit' && ok "one file past the limit: refused ($(echo "$a" | grep -o 'File too large\|memory_limit' | head -1))" \
  || fail "a file past the limit was written: $a"

if pgrep -f "sleep ${SLEEP_S}" > /dev/null; then fail "sleepers left: $(pgrep -af "sleep ${SLEEP_S}")"; fi
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all confinement checks passed"
