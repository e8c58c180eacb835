#!/usr/bin/env bash
# kernel-prof --serve without a GPU: it starts anyway (saying why it cannot time), passes records
# whose check failed through exactly as the CLI does, gives the same error sections, refuses a
# passing record with a 503 naming the missing GPU (the CLI's exit 3), a bad line with a 400, and
# --serve with several GPUs or -o is a usage error.
set -euo pipefail
KP="$CA_BIN/kernel-prof"
T=$(mktemp -d)
SVC_PID=
trap '[ -n "$SVC_PID" ] && kill -9 "$SVC_PID" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3

set +e
"$KP" --serve 127.0.0.1:0 --gpus 0,1 --no-store < /dev/null > /dev/null 2> "$T/err"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "one service per GPU" "$T/err" || fail "--serve --gpus 0,1: rc $rc: $(cat "$T/err")"
set +e
"$KP" --serve 127.0.0.1:0 -o "$T/x" --no-store < /dev/null > /dev/null 2> "$T/err"; rc=$?
set -e
[ "$rc" = 1 ] || fail "--serve -o: rc $rc"
set +e
"$KP" --serve nonsense --no-store < /dev/null > /dev/null 2> "$T/err"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "HOST:PORT" "$T/err" || fail "--serve nonsense: rc $rc: $(cat "$T/err")"
echo "ok   usage errors"

cat > "$T/in.jsonl" <<'J'
{"task_id":"t1","candidate_id":"c1","bundle":{"kernels":{"a.cu":"x"},"plan":"forward: []"},"check":{"status":"incorrect","correct":false,"reason":"outputs.0: 12 elements off"},"zeta":[1,2.5,"s"]}
{"task_id":"t2","note":"no check section, e.g. a task record"}
{"candidate_id":"c3","task_id":"t3","check":{"status":"compile_error","correct":false},"alpha":{"nested":{"k":null}}}
{"candidate_id":"c4","task_id":"t4","check":{"status":"passed"}}
J
"$KP" --no-store < "$T/in.jsonl" > "$T/cli.jsonl" 2> /dev/null

"$KP" --serve 127.0.0.1:0 --no-store > "$T/serve.out" 2> "$T/serve.err" &
SVC_PID=$!
for _ in $(seq 300); do [ -s "$T/serve.out" ] && break; sleep 0.1; done
ADDR=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['listening'])" "$T/serve.out") \
  || fail "no listening line: $(cat "$T/serve.err")"
URL="http://$ADDR"
grep -q "serving anyway" "$T/serve.err" || fail "no note that it cannot time: $(cat "$T/serve.err")"

code=$(curl -sS -o "$T/svc.jsonl" -w '%{http_code}' --data-binary @"$T/in.jsonl" "$URL/v1/profile")
[ "$code" = 200 ] || fail "POST /v1/profile: HTTP $code: $(cat "$T/svc.jsonl")"
$PY - "$T/cli.jsonl" "$T/svc.jsonl" <<'PY' || fail "service answers differ from the CLI's"
import json, sys
a = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[1])]
b = [json.loads(l, object_pairs_hook=list) for l in open(sys.argv[2])]
assert len(a) == 4 and a == b, (a, b)
err = dict(dict(b[3])["error"])
assert err["tool"] == "kernel-prof" and "correct" in err["field"] and err["where"] == "line 4", err
PY
echo "ok   pass-through and error sections equal the CLI's"

echo '{"task_id":"t5","candidate_id":"c5","bundle":{"kernels":{},"plan":"forward: []"},"check":{"status":"passed","correct":true},"task":{"code":"x"}}' > "$T/pass.jsonl"
code=$(curl -sS -o "$T/pass.out" -w '%{http_code}' --data-binary @"$T/pass.jsonl" "$URL/v1/profile")
[ "$code" = 503 ] && grep -q '"exit_code":3' "$T/pass.out" || fail "a passing record without a GPU: HTTP $code: $(cat "$T/pass.out")"
echo "ok   a passing record without a GPU: 503, $(head -c 120 "$T/pass.out")"
printf '{"task_id":"t1"}\n\n[1,2]\n' > "$T/bad.jsonl"
code=$(curl -sS -o "$T/bad.out" -w '%{http_code}' --data-binary @"$T/bad.jsonl" "$URL/v1/profile")
[ "$code" = 400 ] && grep -q "line 3: not a JSON object" "$T/bad.out" || fail "bad line: HTTP $code: $(cat "$T/bad.out")"
echo "ok   bad line: 400 naming line 3"
curl -sS "$URL/v1/health" > "$T/health.json"
$PY -c "
import json,sys
h=json.load(open(sys.argv[1])); assert h['tool']=='kernel-prof' and h['endpoint']=='/v1/profile' and h['served']==3 and h['queue']==0, h
" "$T/health.json" || fail "health: $(cat "$T/health.json")"
echo "ok   health"
# (SIGHUP: a background job of a script ignores SIGINT, and the tools keep an ignored signal ignored.)
kill -HUP "$SVC_PID"
rc=0; wait "$SVC_PID" || rc=$?
SVC_PID=
[ "$rc" = 129 ] || fail "SIGHUP: exit $rc"
echo "ok   SIGHUP: exit 129"
