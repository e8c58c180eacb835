#!/usr/bin/env bash
# On the device (label gpu): the judge services against the CLI on one GPU.
# 1. kernel-check --serve: the same candidates (good, wrong, hanging, faulting, after a fault) get
#    the verdicts, reasons and trial seeds the CLI gives with the same --seed, in one service that
#    survives the hang and the fault; a warm verify is under 2 s (the bench measures the p50).
# 2. kernel-prof --serve: the fixtures of tests/kernel-prof/gpu.sh are timed as the CLI times them
#    (statuses equal, the failed check passed through byte for byte, medians within 25%), baselines
#    come from the store, then from the service's memory; a warm profile is under 5 s.
# 3. Exclusive timing: a verify sent while a profile is being timed on the same GPU finishes after
#    it (the node's per-GPU lock: kernel-prof exclusive, kernel-check shared).
set -u
KC="$CA_BIN/kernel-check"
KP="$CA_BIN/kernel-prof"
HERE=$(cd "$(dirname "$0")" && pwd)
MK="python3 $HERE/make_candidate.py"
B="$CA_SRC/datasets/skill/bundles"
S=$B/scale_add
T=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache" CUDA_AGENT_PYTHONPATH="${CA_PYTHONPATH:-$CA_SRC/libcommon/python}"
export CUDA_AGENT_LOCK_DIR="$T/locks"
PY=$(command -v python3)
: > "$T/failures"
pass() { echo "ok   $1 ($(( $(date +%s) - T0 )) s)"; }
T0=$(date +%s)
fail() { echo "FAIL $1 ($(( $(date +%s) - T0 )) s): $2"; echo "$1" >> "$T/failures"; }
now() { date +%s.%N; }
wait_port() {
  for _ in $(seq 1200); do [ -s "$1" ] && break; sleep 0.1; done
  [ -s "$1" ] || { echo "FAIL: service did not start ($1): $(tail -5 "$2")"; exit 1; }
  cat "$1"
}

# 1. kernel-check. Records name their task by task_id; the tasks come from --tasks (a service runs
# no client's task code unless started --accept-tasks).
mk() { $MK "$1" --no-task "${@:2}"; }
$PY -c "import json,sys; [print(json.dumps(json.load(open(f)))) for f in sys.argv[1:]]" \
  "$S/task.json" "$B/row_softmax/task.json" "$B/linear_relu_gemm/task.json" > "$T/kc_tasks.jsonl"
{
  mk $S
  mk $B/row_softmax
  mk $B/linear_relu_gemm
  mk $S --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = 0.0f;"
  mk $S --replace fused.cu "if (i < n)" "while (a[0] == a[0]) { __nanosleep(100); } if (i < n)"
  mk $S --replace fused.cu "// out" "// variant 2: out"
  mk $S --replace fused.cu "out[i] = a[i]" "out[i + (1 << 30)] = a[i]"
  mk $S --replace fused.cu "// out" "// variant 3: out"
} > "$T/in.jsonl"
timeout 300 "$KC" --no-store --seed 7 --timeout 2 --gpus 0 --tasks "$T/kc_tasks.jsonl" < "$T/in.jsonl" > "$T/cli.jsonl" 2> "$T/cli.err" || fail "cli" "exit $?: $(tail -3 "$T/cli.err")"
"$KC" --serve 127.0.0.1:0 --port-file "$T/kc.port" --seed 7 --timeout 2 --gpus 0 --tasks "$T/kc_tasks.jsonl" --store "$T/kc.db" \
  > /dev/null 2> "$T/kc.err" &
PIDS+=($!)
KC_URL="http://$(wait_port "$T/kc.port" "$T/kc.err")"
curl --max-time 240 -sS --data-binary @"$T/in.jsonl" "$KC_URL/v1/check" > "$T/svc.jsonl"
$PY - "$T/cli.jsonl" "$T/svc.jsonl" <<'PY' && pass "kernel-check service: verdicts, reasons and trial seeds equal the CLI's" || fail "kc golden" "see above"
import json, sys
a = [json.loads(l)["check"] for l in open(sys.argv[1])]
b = [json.loads(l)["check"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 8, (len(a), len(b))
want = ["passed", "passed", "passed", "incorrect", "timeout", "passed", "runtime_error", "passed"]
assert [c["status"] for c in a] == want, [c["status"] for c in a]
for i, (x, y) in enumerate(zip(a, b)):
    assert x["status"] == y["status"], (i, x["status"], y["status"], y.get("reason"))
    if x["status"] in ("passed", "incorrect"):
        assert x["reason"] == y["reason"], (i, x["reason"], y["reason"])
        assert [t["seed"] for t in x["trials"]] == [t["seed"] for t in y["trials"]], i
        for tx, ty in zip(x["trials"], y["trials"]):
            for k in ("max_abs_err", "rel_l2_err"):
                if k in tx:
                    assert abs(tx[k] - ty[k]) <= 1e-6 + 1e-3 * abs(tx[k]), (i, k, tx[k], ty[k])
print("statuses:", [c["status"] for c in b])
PY
curl --max-time 240 -sS "$KC_URL/v1/health" > "$T/kc.health"
$PY -c "
import json,sys
h=json.load(open(sys.argv[1])); assert h['tool']=='kernel-check' and len(h['gpus'])==1 and h['gpus'][0]['uuid'].startswith('GPU-'), h
" "$T/kc.health" && pass "kernel-check health names its GPU" || fail "kc health" "$(cat "$T/kc.health")"
head -1 "$T/in.jsonl" | $PY -c "import json,sys; r=json.loads(sys.stdin.readline()); r.pop('candidate_id',None); r['bundle']['kernels']['fused.cu']+='\n// warm'; print(json.dumps(r))" > "$T/warm.jsonl"
t0=$(now); curl --max-time 240 -sS --data-binary @"$T/warm.jsonl" "$KC_URL/v1/check" > "$T/warm.out"; t1=$(now)
$PY -c "
import json,sys
c=json.loads(open(sys.argv[1]).readline())['check']; dt=float(sys.argv[3])-float(sys.argv[2])
assert c['status']=='passed', c; assert dt < 2.0, dt
print('%.3f' % dt)
" "$T/warm.out" "$t0" "$t1" > "$T/warm.dt" && pass "a warm verify (new candidate, task loaded): $(cat "$T/warm.dt") s" || fail "warm verify" "$(cat "$T/warm.dt") $(head -c 300 "$T/warm.out")"

# 1b. --accept-tasks: the same records, each carrying its task under its content id, tasks interleaved
# (scale_add, row_softmax, linear_relu_gemm, scale_add, ...): each task runs in a worker process of its
# own (one-task-per-process, issue 32), and the verdicts are the CLI's.
$PY - "$T/in.jsonl" "$T/kc_tasks.jsonl" > "$T/accept.jsonl" <<'PY'
import hashlib, json, sys
tasks = {t["task_id"]: t for t in map(json.loads, open(sys.argv[2]))}
def cid(v):
    return hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()[:16]
for r in map(json.loads, open(sys.argv[1])):
    t = dict(tasks[r["task_id"]])
    t.pop("task_id", None)
    tid = cid({k: t[k] for k in ("code", "init_inputs", "inputs") if k in t})
    r.pop("candidate_id", None)
    print(json.dumps(dict(r, task_id=tid, task=dict(t, task_id=tid))))
PY
"$KC" --serve 127.0.0.1:0 --port-file "$T/kca.port" --accept-tasks --seed 7 --timeout 2 --gpus 0 --no-store \
  > /dev/null 2> "$T/kca.err" &
PIDS+=($!)
KCA_URL="http://$(wait_port "$T/kca.port" "$T/kca.err")"
curl --max-time 400 -sS --data-binary @"$T/accept.jsonl" "$KCA_URL/v1/check" > "$T/accept.out"
$PY - "$T/cli.jsonl" "$T/accept.out" <<'PY' && pass "--accept-tasks: clients' tasks, one worker process each, give the CLI's verdicts" || fail "accept-tasks" "see above"
import json, sys
a = [json.loads(l)["check"] for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(b) == 8, b[:1]
for i, (x, r) in enumerate(zip(a, b)):
    y = r.get("check", {})
    assert x["status"] == y.get("status"), (i, x["status"], r.get("check", r.get("error")))
    if y["status"] in ("passed", "incorrect"):
        assert "one-task-per-process" in y["worker_confinement"]["applied"], y["worker_confinement"]
PY

# 2. kernel-prof.
$PY "$CA_SRC/tests/kernel-prof/fixtures/make_records.py" "$T"
ARGS=(--tasks "$T/tasks.jsonl" --baselines eager,compile --baseline-budget-s 2 --gpus 0)
BUDGET=(--budget-s 2)
timeout 300 "$KP" "${ARGS[@]}" "${BUDGET[@]}" --store "$T/kp.db" < "$T/cands.jsonl" > "$T/kp.cli" 2> "$T/kp.cli.err" || fail "kp cli" "exit $?: $(tail -3 "$T/kp.cli.err")"
"$KP" --serve 127.0.0.1:0 --port-file "$T/kp.port" "${ARGS[@]}" "${BUDGET[@]}" --store "$T/kp.db" > /dev/null 2> "$T/kp.err" &
PIDS+=($!)
KP_URL="http://$(wait_port "$T/kp.port" "$T/kp.err")"
curl --max-time 240 -sS --data-binary @"$T/cands.jsonl" "$KP_URL/v1/profile" > "$T/kp.svc"
$PY - "$T/kp.cli" "$T/kp.svc" <<'PY' && pass "kernel-prof service: statuses and medians agree with the CLI's, baselines from the store" || fail "kp golden" "see above"
import json, sys
a = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
b = {r["name"]: r for r in map(json.loads, open(sys.argv[2]))}
assert a.keys() == b.keys(), (a.keys(), b.keys())
assert a["kp-failed"] == b["kp-failed"] and "prof" not in b["kp-failed"]
for cid in ("kp-good", "kp-cheat", "kp-tf32"):
    x, y = a[cid]["prof"], b[cid]["prof"]
    assert x["status"] == y["status"] == "timed", (cid, x["status"], y.get("reason"))
    mx, my = x["time_us"]["median"], y["time_us"]["median"]
    assert abs(mx - my) <= 0.25 * mx, (cid, mx, my)
    for mode in ("eager", "compile"):
        assert y["baselines"][mode]["cached"] is True, (cid, mode, y["baselines"][mode])
        assert y["baselines"][mode]["time_us"]["median"] == x["baselines"][mode]["time_us"]["median"] or x["baselines"][mode]["cached"] is False
    print("%s: CLI %.2f us, service %.2f us" % (cid, mx, my))
PY
head -1 "$T/good.jsonl" > "$T/one.jsonl"
t0=$(now); curl --max-time 240 -sS --data-binary @"$T/one.jsonl" "$KP_URL/v1/profile" > "$T/one.out"; t1=$(now)
$PY -c "
import json,sys
p=json.loads(open(sys.argv[1]).readline())['prof']; dt=float(sys.argv[3])-float(sys.argv[2])
assert p['status']=='timed' and all(p['baselines'][m]['cached'] for m in ('eager','compile')), p
assert dt < 5.0, dt
print('%.3f' % dt)
" "$T/one.out" "$t0" "$t1" > "$T/one.dt" && pass "a warm profile (cached baselines): $(cat "$T/one.dt") s" || fail "warm profile" "$(cat "$T/one.dt")"
# Without a store the baselines are timed once per service, then come from its memory.
"$KP" --serve 127.0.0.1:0 --port-file "$T/kp2.port" "${ARGS[@]}" "${BUDGET[@]}" --no-store > /dev/null 2> "$T/kp2.err" &
PIDS+=($!)
KP2_URL="http://$(wait_port "$T/kp2.port" "$T/kp2.err")"
curl --max-time 240 -sS --data-binary @"$T/one.jsonl" "$KP2_URL/v1/profile" > "$T/m1.out"
curl --max-time 240 -sS --data-binary @"$T/one.jsonl" "$KP2_URL/v1/profile" > "$T/m2.out"
$PY -c "
import json,sys
a=json.loads(open(sys.argv[1]).readline())['prof']['baselines']; b=json.loads(open(sys.argv[2]).readline())['prof']['baselines']
assert a['eager']['cached'] is False and b['eager']['cached'] is True, (a['eager'], b['eager'])
assert a['eager']['time_us'] == b['eager']['time_us']
" "$T/m1.out" "$T/m2.out" && pass "--no-store service: baselines timed once, then from memory" || fail "memory cache" "$(head -c 300 "$T/m2.out")"

# 3. A verify sent while a profile is timed on the same GPU waits for it.
# Timed calls until the 4 s budget ends (the run counts are out of reach), so the verify below
# arrives while the loop runs.
ARGS_LONG=(--min-runs 1000000 --max-runs 1000000 --budget-s 4)
"$KP" --serve 127.0.0.1:0 --port-file "$T/kp3.port" "${ARGS[@]}" "${ARGS_LONG[@]}" --store "$T/kp.db" > /dev/null 2> "$T/kp3.err" &
PIDS+=($!)
KP3_URL="http://$(wait_port "$T/kp3.port" "$T/kp3.err")"
( curl --max-time 240 -sS --data-binary @"$T/one.jsonl" "$KP3_URL/v1/profile" > "$T/long.out"; now > "$T/prof.end" ) &
PROF_CURL=$!
for _ in $(seq 200); do
  q=$(curl --max-time 240 -sS "$KP3_URL/v1/health" | $PY -c "import json,sys; print(json.load(sys.stdin)['queue'])")
  [ "$q" = 1 ] && break; sleep 0.05
done
sleep 1  # into the timed loop (baselines come from the store)
sed 's/variant 2/variant 9/' <(sed -n 6p "$T/in.jsonl") > "$T/during.jsonl"
now > "$T/verify.start"
curl --max-time 240 -sS --data-binary @"$T/during.jsonl" "$KC_URL/v1/check" > "$T/during.out"; now > "$T/verify.end"
wait "$PROF_CURL"
$PY -c "
import json,sys
c=json.loads(open(sys.argv[1]).readline())['check']; p=json.loads(open(sys.argv[2]).readline())['prof']
pe=float(open(sys.argv[3]).read()); ve=float(open(sys.argv[4]).read()); vs=float(open(sys.argv[5]).read())
assert c['status']=='passed' and p['status']=='timed', (c['status'], p.get('reason'))
assert vs < pe - 0.5, ('the verify was sent %.2f s after the profile ended: nothing was tested' % (vs - pe))
assert ve >= pe - 0.2, ('the verify finished %.2f s before the profile' % (pe - ve))
print('verify sent %.2f s before the profile ended, finished %.2f s after it (profile took %.1f s)' % (pe - vs, ve - pe, p['profile_s']))
" "$T/during.out" "$T/long.out" "$T/prof.end" "$T/verify.end" "$T/verify.start" > "$T/lock.txt" \
  && pass "exclusive timing: $(cat "$T/lock.txt")" || fail "exclusive timing" "$(cat "$T/lock.txt")"

# SIGTERM: both services end cleanly, their runs closed.
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
PIDS=()
$PY -c "
import sqlite3,sys
for db in sys.argv[1:]:
    rows=sqlite3.connect(db).execute(\"SELECT tool, exit_status FROM runs WHERE argv LIKE '%--serve%'\").fetchall()
    assert rows and all(r[1]==143 for r in rows), (db, rows)
" "$T/kc.db" "$T/kp.db" && pass "SIGTERM: every service's run closed with 143" || fail "sigterm" "runs not closed"

n=$(wc -l < "$T/failures")
[ "$n" -eq 0 ] && echo "all passed" || { echo "$n failed"; exit 1; }
