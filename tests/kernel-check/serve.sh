#!/usr/bin/env bash
# kernel-check --serve on a machine without a GPU, started as a user would (--compile-only): the
# answers equal `kernel-check --compile-only` stdout for the same input (golden equality, timing
# fields aside), a bad line is a 400 naming it, health has its fields, two clients at once get
# their own answers, unknown endpoints are 404/405, and SIGTERM while a request is in flight
# answers it, exits 143 and closes the store run with the service's counts.
set -u
KC="$CA_BIN/kernel-check"
HERE=$(cd "$(dirname "$0")" && pwd)
MK="python3 $HERE/make_candidate.py"
B="$CA_SRC/datasets/skill/bundles"
T=$(mktemp -d)
SVC_PID=
trap '[ -n "$SVC_PID" ] && kill -9 "$SVC_PID" 2>/dev/null; rm -rf "$T"' EXIT
export CUDA_AGENT_CACHE="$T/cache"
: > "$T/failures"
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1: $2"; echo "$1" >> "$T/failures"; }

# The input: verdicts of every kind, a record without a bundle (an error section), a mistyped id.
# Records name their task by task_id; the tasks come from --tasks (a service runs no client's task).
mk() { $MK "$1" --no-task "${@:2}"; }
python3 -c "import json,sys; [print(json.dumps(json.load(open(f)))) for f in sys.argv[1:]]" \
  "$B/scale_add/task.json" "$B/row_softmax/task.json" "$B/linear_relu_gemm/task.json" > "$T/tasks.jsonl"
{
  mk "$B/scale_add"
  mk "$B/scale_add" --replace fused.cu "out[i] = a[i] * alpha + b[i];" "out[i] = a[i] * alpha + b[i]"
  mk "$B/scale_add" --plan-replace "N, 2.0]" "N, 2]"
  mk "$B/scale_add" --replace fused.cu "if (i < n)" 'if (i == 0) printf("hi\n"); if (i < n)'
  mk "$B/row_softmax"
  mk "$B/linear_relu_gemm"
  echo '{"task_id": "t-no-bundle"}'
  echo '{"task_id": "t-x", "candidate_id": 17, "bundle": {"kernels": {}, "plan": ""}}'
} > "$T/in.jsonl"
"$KC" --compile-only --arch sm_90 --no-store --tasks "$T/tasks.jsonl" < "$T/in.jsonl" > "$T/cli.jsonl" 2> "$T/cli.err" \
  || fail "cli" "kernel-check --compile-only exit $?: $(tail -2 "$T/cli.err")"

# Start it as a user would (loopback, :0); the first stdout line is the address, --port-file has it too.
"$KC" --serve :0 --port-file "$T/port" --compile-only --arch sm_90 --store "$T/store.db" --tasks "$T/tasks.jsonl" \
  > "$T/serve.out" 2> "$T/serve.err" &
SVC_PID=$!
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { fail "start" "no port file: $(tail -5 "$T/serve.err")"; cat "$T/failures"; exit 1; }
ADDR=$(cat "$T/port")
python3 - "$T/serve.out" "$ADDR" <<'PY' && pass "first stdout line is {\"listening\": \"$ADDR\"}" || fail "listening line" "$(head -1 "$T/serve.out")"
import json, sys
first = json.loads(open(sys.argv[1]).readline())
assert first == {"listening": sys.argv[2]}, first
PY
URL="http://$ADDR"

# same A B: the records equal, but for what differs between any two runs (compile time, cache hit).
same() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def norm(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        c = r.get("check")
        if isinstance(c, dict):
            for k in ("compile_ms", "cached", "compile_confinement"):  # how this run got its cubin
                c.pop(k, None)
        out.append(r)
    return out
a, b = norm(sys.argv[1]), norm(sys.argv[2])
assert len(a) == len(b), (len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert x == y, f"record {i + 1} differs:\n{json.dumps(x)[:600]}\n{json.dumps(y)[:600]}"
PY
}

# 1. Golden equality with the CLI.
code=$(curl -sS -o "$T/svc.jsonl" -w '%{http_code}' --data-binary @"$T/in.jsonl" -H 'Content-Type: application/x-ndjson' "$URL/v1/check")
[ "$code" = 200 ] && pass "POST /v1/check: 200" || fail "POST" "HTTP $code: $(head -c 300 "$T/svc.jsonl")"
same "$T/cli.jsonl" "$T/svc.jsonl" && pass "answers equal kernel-check --compile-only stdout ($(wc -l < "$T/svc.jsonl") records)" \
  || fail "golden" "service and CLI differ"
python3 -c "
import json,sys
st=[json.loads(l).get('check',{}).get('status') for l in open(sys.argv[1])]
assert st[:6]==['compiled','compile_error','plan_error','policy_violation','compiled','compiled'], st
e=[json.loads(l).get('error') for l in open(sys.argv[1])]
assert e[6]['field']=='bundle' and e[6]['where']=='line 7', e[6]
assert e[7]['field']=='candidate_id' and e[7]['where']=='line 8', e[7]
" "$T/svc.jsonl" && pass "verdicts and per-record error sections (naming lines 7 and 8)" || fail "verdicts" "$(cut -c1-200 "$T/svc.jsonl")"
# The cubin cache is the service's: the same candidate again is a cache hit.
head -1 "$T/in.jsonl" | curl -sS --data-binary @- "$URL/v1/check" > "$T/again.jsonl"
python3 -c "import json,sys; c=json.loads(open(sys.argv[1]).readline())['check']; assert c['cached'] is True and c['status']=='compiled', c" "$T/again.jsonl" \
  && pass "the second request hits the cubin cache" || fail "cache" "$(head -c 300 "$T/again.jsonl")"

# 2. A line that is not JSON: 400 naming it; nothing of that request is judged.
printf '%s\n{not json\n' "$(head -1 "$T/in.jsonl")" > "$T/bad.jsonl"
code=$(curl -sS -o "$T/bad.out" -w '%{http_code}' --data-binary @"$T/bad.jsonl" "$URL/v1/check")
python3 -c "
import json,sys
j=json.load(open(sys.argv[1])); assert j['error'].startswith('line 2: not JSON'), j; assert j['exit_code']==2, j
" "$T/bad.out" && [ "$code" = 400 ] && pass "bad line: 400, '$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['error'][:40])" "$T/bad.out")'" \
  || fail "bad line" "HTTP $code: $(cat "$T/bad.out")"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$URL/v1/nothing")
[ "$code" = 404 ] && pass "unknown endpoint: 404" || fail "404" "HTTP $code"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$URL/v1/check")
[ "$code" = 405 ] && pass "GET /v1/check: 405" || fail "405" "HTTP $code"
code=$(curl -sS -o "$T/empty.out" -w '%{http_code}' --data-binary '' "$URL/v1/check")
[ "$code" = 200 ] && [ ! -s "$T/empty.out" ] && pass "an empty body: 200, no records" || fail "empty" "HTTP $code"

# 3. Health.
curl -sS "$URL/v1/health" > "$T/health.json"
python3 -c "
import json,sys
h=json.load(open(sys.argv[1]))
assert h['ok'] is True and h['tool']=='kernel-check' and h['gpus']==[] and h['queue']==0, h
assert h['served']==4 and h['uptime_s']>0 and h['version'] and h['endpoint']=='/v1/check', h
" "$T/health.json" && pass "health: $(cat "$T/health.json")" || fail "health" "$(cat "$T/health.json")"

# 4. Two clients at once, each its own answer, equal to the CLI's.
sed -n 1,3p "$T/in.jsonl" > "$T/a.jsonl"
sed -n 4,6p "$T/in.jsonl" > "$T/b.jsonl"
"$KC" --compile-only --arch sm_90 --no-store --tasks "$T/tasks.jsonl" < "$T/a.jsonl" > "$T/a.cli" 2>/dev/null
"$KC" --compile-only --arch sm_90 --no-store --tasks "$T/tasks.jsonl" < "$T/b.jsonl" > "$T/b.cli" 2>/dev/null
for i in 1 2 3; do
  curl -sS --data-binary @"$T/a.jsonl" "$URL/v1/check" > "$T/a.svc$i" &
  curl -sS --data-binary @"$T/b.jsonl" "$URL/v1/check" > "$T/b.svc$i" &
done
wait_ok=1
for j in $(jobs -p); do [ "$j" = "$SVC_PID" ] || wait "$j" || wait_ok=0; done
ok=1
for i in 1 2 3; do same "$T/a.cli" "$T/a.svc$i" >/dev/null 2>&1 || ok=0; same "$T/b.cli" "$T/b.svc$i" >/dev/null 2>&1 || ok=0; done
[ $ok = 1 ] && [ $wait_ok = 1 ] && pass "6 requests from 2 clients at once: each answer equals the CLI's" || fail "concurrent" "an answer differs"

# 5. SIGTERM while a request is in flight: it is answered, the service exits 143, the run row is closed.
for i in $(seq 24); do mk "$B/scale_add" --replace fused.cu "if (i < n)" "if (i < n + $i * 0)"; done > "$T/many.jsonl"
curl -sS -o "$T/many.out" -w '%{http_code}' --data-binary @"$T/many.jsonl" "$URL/v1/check" > "$T/many.code" &
CURL_PID=$!
for _ in $(seq 100); do
  q=$(curl -sS "$URL/v1/health" | python3 -c "import json,sys; print(json.load(sys.stdin)['queue'])")
  [ "$q" = 1 ] && break
  sleep 0.05
done
kill -TERM "$SVC_PID"
wait "$CURL_PID"
rc=0
wait "$SVC_PID" || rc=$?
SVC_PID=
[ "$rc" = 143 ] && pass "SIGTERM: exit 143" || fail "sigterm exit" "rc=$rc: $(tail -3 "$T/serve.err")"
[ "$(cat "$T/many.code")" = 200 ] && [ "$(wc -l < "$T/many.out")" = 24 ] && pass "the request in flight was answered (24 records)" \
  || fail "in flight" "HTTP $(cat "$T/many.code"), $(wc -l < "$T/many.out") records"
grep -q "stopping: no new requests" "$T/serve.err" && pass "stderr says it is stopping" || fail "stop note" "$(tail -3 "$T/serve.err")"
curl -sS -m 2 "$URL/v1/health" > /dev/null 2>&1 && fail "closed" "still answering after SIGTERM" || pass "no longer listening"
python3 - "$T/store.db" <<'PY' && pass "store: one run for the service, closed with 143, every record's check stored" || fail "store" "see above"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
runs = db.execute("SELECT tool, exit_status, ended_at, counts FROM runs").fetchall()
assert len(runs) == 1, runs
tool, status, ended, counts = runs[0]
assert tool == "kernel-check" and status == 143 and ended, runs
c = json.loads(counts)
# 8 + 1 (cache hit) + 1 (bad line, not judged) + 6 x 3 + 24 records; 2 bad records per 8.
assert c["read"] == 8 + 1 + 18 + 24 and c["bad"] == 2, c
n = db.execute("SELECT count(*) FROM checks").fetchone()[0]
assert n >= 6 + 24, n
PY

n=$(wc -l < "$T/failures")
[ "$n" -eq 0 ] && echo "all passed" || { echo "$n failed"; exit 1; }
