#!/usr/bin/env bash
# kernel-check --serve --accept-tasks (no GPU: --compile-only) against a client's task that lists no
# outputs while the candidate's plan writes outputs.0. A task's content id covers its code, init inputs
# and inputs, not its outputs, so such a task passes the id check. Before the fix the binder read the
# missing buffer at index -1 and the service died with SIGSEGV (exit 139) on the second such request
# (found by tests/cli/fuzz_records.py). Now each request gets a plan_error naming outputs.0, the service
# stays up and answers an honest task's candidate after them.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
export CUDA_AGENT_CACHE="$T/cache"
"$PY" - "$CA_SRC/tests/kernel-check/golden/good-bundles/in.jsonl" "$T" <<'PY'
import hashlib, json, sys
rec = json.loads(open(sys.argv[1]).readline())
def cid(v):
    return hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()[:16]
def with_task(task):
    t = dict(task)
    t.pop("task_id", None)
    tid = cid({k: t[k] for k in ("code", "init_inputs", "inputs") if k in t})
    return json.dumps(dict(rec, task_id=tid, task=dict(t, task_id=tid))) + "\n"
open(sys.argv[2] + "/hostile.jsonl", "w").write("".join(with_task(dict(rec["task"], outputs=v)) for v in ([], None, "F32")))
open(sys.argv[2] + "/honest.jsonl", "w").write(with_task(rec["task"]))
PY
"$CA_BIN/kernel-check" --serve 127.0.0.1:0 --port-file "$T/port" --compile-only --arch sm_90 --accept-tasks --no-store \
  > /dev/null 2> "$T/serve.err" &
SVC=$!
at_exit "kill $SVC 2>/dev/null"
for _ in $(seq 300); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || fail "the service did not start: $(tail -3 "$T/serve.err")"
URL="http://$(cat "$T/port")"
for i in 1 2 3; do
  curl -sS -m 60 --data-binary @"$T/hostile.jsonl" "$URL/v1/check" > "$T/hostile.$i.out" \
    || fail "request $i: no answer (the service died?): $(tail -3 "$T/serve.err")"
done
"$PY" - "$T"/hostile.*.out <<'PY' || fail "hostile answers (above)"
import json, sys
for f in sys.argv[1:]:
    recs = [json.loads(l) for l in open(f)]
    assert len(recs) == 3, (f, len(recs))
    for r in recs:
        c = r["check"]
        assert c["status"] == "plan_error" and "outputs.0 does not exist (the task has no outputs)" in c["reason"], c
PY
pass "three requests of three tasks without outputs: each a plan_error naming outputs.0"
kill -0 "$SVC" 2>/dev/null || fail "the service is gone: $(tail -3 "$T/serve.err")"
curl -sS -m 60 --data-binary @"$T/honest.jsonl" "$URL/v1/check" > "$T/honest.out" || fail "honest request: no answer"
"$PY" -c "import json,sys; c=json.loads(open(sys.argv[1]).readline())['check']; assert c['status']=='compiled', c" "$T/honest.out" \
  || fail "honest candidate: $(head -c 300 "$T/honest.out")"
pass "the service is still up and compiles an honest task's candidate"
