#!/bin/bash
# examples/rl-loop.sh without a GPU: a warm-up RFT on the replay policy's demo episodes, then two
# iterations of native sampling -> kernel-check --compile-only -> proxy rewards -> ppo-step (value
# pretraining + ppo), each checkpoint sampling the next iteration; the store has one reward import
# and one or two ppo-step rows per iteration, and run-store report lists the iterations.
# Then the same loop with a served policy (the scripted server): before each iteration the server
# is told to load that iteration's checkpoint, and the completions after it are served from it.
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
export PATH="$CA_BIN:$PATH" CA_FORCE_CPU=1
PY=/usr/bin/python3
tmp=$(mktemp -d)
MOCK_PID=
trap '[ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
demo=$CA_SRC/datasets/demo
command -v kernel-check >/dev/null || fail "kernel-check not found in CA_BIN=$CA_BIN"

ppo-step init --model-config "$demo/loop/policy-cpu.json" --out "$tmp/base" --seed 1 -q
cp "$demo/tokenizer.json" "$tmp/base/"
head -n 3 "$demo/tasks.jsonl" > "$tmp/tasks3.jsonl"   # three tasks: the CPU trainer takes seconds per episode
agent-run --policy "replay:$demo/replay.jsonl" --tasks "$tmp/tasks3.jsonl" --no-store --max-turns 20 --seed 1 -q \
  > "$tmp/replay.jsonl" 2>/dev/null
bash "$CA_SRC/examples/rl-loop.sh" --ckpt "$tmp/base" --tasks "$tmp/tasks3.jsonl" --warmup "$tmp/replay.jsonl" \
  --work "$tmp/run" --iterations 2 --rft 0 --episodes 1 --cpu-proxy --rft-config "$demo/loop/rft-cpu.yaml" \
  -- --max-turns 2 --max-tokens 16 2> "$tmp/loop.err" || { tail -30 "$tmp/loop.err"; fail "rl-loop.sh (native, CPU)"; }
# Each iteration says where its time went (the CPU run has no kernel-prof or reward-calc stage).
for it in iter-01 iter-02; do
  grep -qE "^rl-loop: $it: seconds: sample [0-9]+\.[0-9], check [0-9]+\.[0-9], train [0-9]+\.[0-9]$" "$tmp/loop.err" \
    || fail "no seconds line for $it: $(grep seconds "$tmp/loop.err")"
done
for f in warmup.metrics iter-01.episodes iter-01.rewarded iter-01.metrics iter-02.episodes iter-02.metrics; do
  [ -s "$tmp/run/$f.jsonl" ] || fail "no $f.jsonl"
done
"$PY" - "$tmp/run" <<'PY' || fail "loop assertions"
import json, sqlite3, sys
run = sys.argv[1]
w = json.loads(open(run + "/warmup.metrics.jsonl").readline())
assert w["mode"] == "rft" and w["episodes"] >= 1, w          # the compiled replay bundles
e1 = [json.loads(l) for l in open(run + "/iter-01.episodes.jsonl")]
e2 = [json.loads(l) for l in open(run + "/iter-02.episodes.jsonl")]
assert e1[0]["episode"]["policy"]["checkpoint"] == run + "/ckpt/warmup", e1[0]["episode"]["policy"]
assert e2[0]["episode"]["policy"]["checkpoint"] == run + "/ckpt/iter-01", e2[0]["episode"]["policy"]
m1 = [json.loads(l) for l in open(run + "/iter-01.metrics.jsonl")]
assert [m["mode"] for m in m1] == ["value-pretrain", "ppo"], [m["mode"] for m in m1]
m2 = [json.loads(l) for l in open(run + "/iter-02.metrics.jsonl")]
assert [m["mode"] for m in m2] == ["ppo"], [m["mode"] for m in m2]
db = sqlite3.connect(run + "/run.db")
steps = db.execute("SELECT COUNT(*) FROM ppo_steps").fetchone()[0]
assert steps == 4, steps                                      # warm-up rft, value-pretrain, ppo, ppo
imports = db.execute("SELECT COUNT(DISTINCT run_id) FROM rewards").fetchone()[0]
assert imports == 3, imports                                  # warm-up and two iterations
print("rl-loop (CPU): warm-up on %d episodes, 2 iterations, %d ppo-step rows, %d reward runs" % (w["episodes"], steps, imports))
PY
run-store report --store "$tmp/run/run.db" --html "$tmp/report.html" > /dev/null
"$PY" - "$tmp/report.html" <<'PY' || fail "report assertions"
import re, sys
page = open(sys.argv[1]).read()
# One point per iteration (the proxy rewards' import runs) in the mean-reward plot, with 3 rewards each
# (the warm-up's replay episodes, then each iteration's sampled episodes).
points = re.findall(r"\(run-store, [^)]*\), (\d+) rewards: mean reward (-?[0-9.]+)", page)
assert len(points) == 3 and all(n == "3" for n, _ in points), points
assert float(points[1][1]) == -1.0 and float(points[2][1]) == -1.0, points  # a 2-layer width-32 model writes no kernel
print("report: iterations %s" % points)
PY
grep -q "rl-loop: iter-02: 3 episodes" "$tmp/loop.err" || fail "no per-iteration line: $(grep rl-loop: "$tmp/loop.err" | tail -3)"

# A served policy: each iteration's checkpoint is loaded by the server before sampling.
cat > "$tmp/script.json" <<'JSON'
{"model_path": "/served/base", "steps": []}
JSON
"$PY" - "$tmp/script.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["steps"] = [{"message": {"content": "Nothing to do."}} for _ in range(4)]
json.dump(s, open(sys.argv[1], "w"))
PY
head -n 2 "$demo/tasks.jsonl" > "$tmp/tasks2.jsonl"
"$PY" "$CA_SRC/tests/agent-run/mock_openai.py" "$tmp/script.json" "$tmp/port" "$tmp/requests.jsonl" 2> "$tmp/mock.err" &
MOCK_PID=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.1; done
[ -s "$tmp/port" ] || fail "mock server did not start"
# The scripted server's logprobs are made up: ppo-step's rollout check reports them only.
printf 'actor:\n  max_logprob_mismatch: 0\n' > "$tmp/served_ppo.yaml"
bash "$CA_SRC/examples/rl-loop.sh" --ckpt "$tmp/base" --tasks "$tmp/tasks2.jsonl" --policy "openai:http://127.0.0.1:$(cat "$tmp/port")/v1" \
  --work "$tmp/served" --iterations 2 --rft 0 --episodes 1 --cpu-proxy --ppo-config "$tmp/served_ppo.yaml" -- --retry-base 0.05 2> "$tmp/served.err" \
  || { tail -30 "$tmp/served.err"; fail "rl-loop.sh (served)"; }
"$PY" - "$tmp/requests.jsonl" "$tmp/served" "$tmp/base" <<'PY' || fail "served loop assertions"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
run, base = sys.argv[2], sys.argv[3]
reloads = [e["body"]["model_path"] for e in log if e["path"] == "/update_weights_from_disk"]
assert reloads == [base, run + "/ckpt/iter-01"], reloads
chats = [e for e in log if e["path"].endswith("/chat/completions")]
assert [c["weights"] for c in chats] == [base, base, run + "/ckpt/iter-01", run + "/ckpt/iter-01"], [c["weights"] for c in chats]
print("rl-loop (served): reloads %s; completions served from the loaded checkpoint" % [r[len(run) + 1:] if r.startswith(run) else "base" for r in reloads])
PY
echo "rl-loop: ok"
