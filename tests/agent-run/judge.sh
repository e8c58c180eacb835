#!/bin/bash
# agent-run --judge: verify and profile go to judge services instead of a process per call.
# 1. A real `kernel-check --serve --compile-only`, behind a dead URL: verify answers what the
#    process path answers (kernel-check --compile-only), compile still runs kernel-check here.
# 2. Fake services: the least busy kernel-check answers, profile goes to the kernel-prof service,
#    timing seeds are kept in the record and never shown to the model.
# 3. Only dead services, a 503 service, a slow one: a clear tool error, never a hang.
source "$CA_SRC/tests/agent-run/lib.sh"
KC="$CA_BIN/kernel-check"
PIDS=()
at_exit 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done'
export CUDA_AGENT_CACHE="$TMP/cache"
GOOD='extern \"C\" __global__ void scale_add(const float* a, const float* b, float* out, int n, float alpha) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i] * alpha + b[i]; }'
PLAN='dims: {N: inputs.0.shape[0]}\nforward:\n  - launch: scale_add\n    grid: [cdiv(N, 256)]\n    block: [256]\n    args: [inputs.0, inputs.1, outputs.0, N, 2.0]\n'
cat > "$TMP/script.jsonl" <<JSON
{"content": "Write, compile, verify, profile.", "tool_calls": [{"name": "write_file", "arguments": {"path": "kernels/k.cu", "content": "$GOOD"}}, {"name": "write_file", "arguments": {"path": "plan.yaml", "content": "$PLAN"}}, {"name": "compile", "arguments": {}}, {"name": "verify", "arguments": {}}, {"name": "profile", "arguments": {}}]}
{"content": "Done."}
JSON

# wait_port FILE: the address a service wrote.
wait_port() {
  for _ in $(seq 300); do [ -s "$1" ] && break; sleep 0.1; done
  [ -s "$1" ] || fail "service did not start ($1)"
  cat "$1"
}

# 1. A real compile-only kernel-check service; the first URL is dead (nothing listens on port 1).
# It holds the task (--tasks), as a service is started: its answers then name the reference's mode too.
"$KC" --serve 127.0.0.1:0 --port-file "$TMP/kc.port" --compile-only --no-store --tasks "$TMP/task.jsonl" 2> "$TMP/kc.err" > /dev/null &
PIDS+=($!)
KC_URL="http://$(wait_port "$TMP/kc.port")"
export CA_KERNEL_CHECK="$KC" CA_KERNEL_PROF="$HERE/fake-kernel-prof.sh"
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --judge "http://127.0.0.1:1,$KC_URL" > "$TMP/judged.jsonl" 2> "$TMP/judged.err" || fail "agent-run --judge: $(tail -3 "$TMP/judged.err")"
# The process path, for the same answers: kernel-check --compile-only for verify too.
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --check-arg=--compile-only > "$TMP/local.jsonl" 2> "$TMP/local.err" || fail "agent-run: $(tail -3 "$TMP/local.err")"
"$PY" - "$TMP/judged.jsonl" "$TMP/local.jsonl" <<'PY' || fail "the judged episode differs from the process one"
import json, sys
def results(path):
    e = json.loads(open(path).readline())["episode"]
    out = {}
    for t in e["turns"]:
        for x in t["tool_results"]:
            if x["name"] in ("compile", "verify", "profile"):
                shown = json.loads(x["content"])
                for k in ("compile_ms", "cached", "compile_confinement"):
                    shown["check"].pop(k, None)
                out[x["name"]] = (x["ok"], shown)
    return e, out
ej, j = results(sys.argv[1])
el, l = results(sys.argv[2])
assert j == l, (j, l)
assert j["verify"][1]["check"]["status"] == "compiled", j["verify"]
assert len(ej["settings"]["judge"]) == 2 and ej["settings"]["judge"][0] == "http://127.0.0.1:1", ej["settings"]
print("verify through the service (after a dead URL) shows what the process path shows:", j["verify"][1]["check"]["status"])
PY
served=$(curl -sS "$KC_URL/v1/health" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['served'])")
# verify and profile (whose check is compile-only, so it is not profiled) = 2 requests; compile ran here.
[ "$served" = 2 ] || fail "the service served $served requests, expected 2 (verify, profile's check)"
echo "ok: the service served verify and profile's check; compile ran kernel-check --compile-only"

# 2. Fake services: a busy and an idle kernel-check, and a kernel-prof.
"$PY" "$HERE/fake_judge.py" kernel-check "$TMP/busy.port" "$TMP/busy.log" --queue 7 & PIDS+=($!)
"$PY" "$HERE/fake_judge.py" kernel-check "$TMP/idle.port" "$TMP/idle.log" --queue 0 & PIDS+=($!)
"$PY" "$HERE/fake_judge.py" kernel-prof "$TMP/prof.port" "$TMP/prof.log" & PIDS+=($!)
# A service whose health names its tool as null: not a service of either tool, skipped (its mistyped
# "tool" failed every episode, the JSON library's type error).
"$PY" "$HERE/fake_judge.py" kernel-check "$TMP/odd.port" "$TMP/odd.log" --health-tool null & PIDS+=($!)
BUSY=$(wait_port "$TMP/busy.port"); IDLE=$(wait_port "$TMP/idle.port"); PROF=$(wait_port "$TMP/prof.port"); ODD=$(wait_port "$TMP/odd.port")
"$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" \
  --judge "$ODD,$BUSY,$PROF,http://$IDLE/" > "$TMP/fake.jsonl" 2> "$TMP/fake.err" || fail "agent-run (fake judges): $(tail -3 "$TMP/fake.err")"
"$PY" - "$TMP/fake.jsonl" <<'PY' || fail "fake judges"
import json, sys
e = json.loads(open(sys.argv[1]).readline())["episode"]
res = {x["name"]: x for t in e["turns"] for x in t["tool_results"]}
v, p = json.loads(res["verify"]["content"]), json.loads(res["profile"]["content"])
assert res["verify"]["ok"] and v["check"]["status"] == "passed", res["verify"]
assert res["profile"]["ok"] and p["prof"]["speedup_vs_compile"] == 2.0, res["profile"]
assert "seed" not in p["prof"]["method"] and "seed" not in p["prof"]["outputs_check"][0], p["prof"]
assert "seed" not in p["prof"]["baselines"]["eager"]["method"], p["prof"]
full = [r for r in e["results"] if r["tool"] == "profile"][0]
assert full["prof"]["method"]["seed"] == 987654321, full["prof"]
print("fake judges: verify passed, profile timed, the timing seeds kept in the record and not shown")
PY
[ ! -s "$TMP/busy.log" ] || fail "the busy kernel-check service was asked: $(cat "$TMP/busy.log")"
[ ! -s "$TMP/odd.log" ] || fail "the service of tool null was asked: $(cat "$TMP/odd.log")"
[ "$(wc -l < "$TMP/idle.log")" = 2 ] || fail "the idle kernel-check service got $(wc -l < "$TMP/idle.log") requests, expected 2"
[ "$(wc -l < "$TMP/prof.log")" = 1 ] || fail "kernel-prof got $(wc -l < "$TMP/prof.log") requests, expected 1"
"$PY" -c "
import json,sys
r=json.loads(open(sys.argv[1]).readline())
assert r['path']=='/v1/profile' and r['records'][0]['check']['correct'] is True, r
" "$TMP/prof.log" || fail "kernel-prof's request"
echo "ok: the least busy service answered (7 queued on the other); profile posted the checked record"

# 3. Failures: only a dead URL; a service answering 503; a service slower than --locked-timeout.
"$PY" "$HERE/fake_judge.py" kernel-check "$TMP/s503.port" "$TMP/s503.log" --status 503 & PIDS+=($!)
"$PY" "$HERE/fake_judge.py" kernel-check "$TMP/slow.port" "$TMP/slow.log" --delay 30 & PIDS+=($!)
S503=$(wait_port "$TMP/s503.port"); SLOW=$(wait_port "$TMP/slow.port")
run_err() {  # run_err NAME JUDGES [args]: the verify tool's text
  local name=$1 judges=$2; shift 2
  local t0=$SECONDS
  "$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --tasks "$TMP/task.jsonl" --judge "$judges" "$@" \
    > "$TMP/$name.jsonl" 2> "$TMP/$name.err" || fail "$name: agent-run exit $?: $(tail -3 "$TMP/$name.err")"
  [ $((SECONDS - t0)) -lt 20 ] || fail "$name took $((SECONDS - t0)) s"
  "$PY" -c "
import json,sys
e=json.loads(open(sys.argv[1]).readline())['episode']
v=[x for t in e['turns'] for x in t['tool_results'] if x['name']=='verify'][0]
assert not v['ok'], v
print(v['content'])
" "$TMP/$name.jsonl"
}
out=$(run_err dead "http://127.0.0.1:1") || fail "dead"
case "$out" in "error: verify failed: judge: no kernel-check service answered"*"127.0.0.1:1: health:"*) echo "ok: dead: $out" ;; *) fail "dead: $out" ;; esac
out=$(run_err s503 "$S503") || fail "503"
case "$out" in *"HTTP 503: fake failure 503"*) echo "ok: 503: $out" ;; *) fail "503: $out" ;; esac
out=$(run_err slow "$SLOW" --locked-timeout 2) || fail "slow"
case "$out" in *"no answer within 2 s"*) echo "ok: slow: $out" ;; *) fail "slow: $out" ;; esac
# A malformed --judge is a usage error.
set +e; "$CA_BIN/agent-run" --policy "replay:$TMP/script.jsonl" --no-store --judge "https://x:1" < "$TMP/task.jsonl" > /dev/null 2>&1; rc=$?; set -e
[ "$rc" = 1 ] || fail "--judge https://...: exit $rc, expected 1"
echo "all judge tests passed"
