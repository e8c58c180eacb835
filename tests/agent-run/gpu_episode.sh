#!/bin/bash
# On the device: a replay episode writes a correct bundle (SKILL.md's scale_add), verifies and
# profiles it through the real kernel-check and kernel-prof, and submits it; downstream
# kernel-check | kernel-prof | reward-calc give it a positive reward.
source "$CA_SRC/tests/agent-run/lib.sh"
for t in agent-run kernel-check kernel-prof reward-calc; do
  [ -x "$CA_BIN/$t" ] || fail "$CA_BIN/$t is not built"
done
B="$CA_SRC/datasets/skill/bundles/scale_add"
[ -f "$B/task.json" ] || fail "no example bundle at $B"
"$PY" - "$B" "$TMP" <<'PY'
import json, os, sys
b, tmp = sys.argv[1], sys.argv[2]
task = json.load(open(os.path.join(b, "task.json")))
open(os.path.join(tmp, "gtask.jsonl"), "w").write(json.dumps(task) + "\n")
def call(name, **args): return {"name": name, "arguments": args}
turns = [{"content": "Reading the guide.", "tool_calls": [call("read_file", path="SKILL.md")]}]
files = [call("write_file", path="kernels/" + f, content=open(os.path.join(b, f)).read())
         for f in sorted(os.listdir(b)) if f.endswith(".cu")]
# SKILL.md's plan for this bundle, in block style (the same plan; flow style is kernel-check's to parse).
plan = ("dims:\n  N: inputs.0.shape[0]\nforward:\n  - launch: scale_add\n    grid:\n      - cdiv(N, 256)\n"
        "    block:\n      - 256\n    args:\n      - inputs.0\n      - inputs.1\n      - outputs.0\n      - N\n      - 2.0\n")
files.append(call("write_file", path="plan.yaml", content=plan))
turns.append({"content": "Writing the bundle.", "tool_calls": files})
for t in ("compile", "verify", "profile"):
    turns.append({"content": t, "tool_calls": [call(t)]})
turns.append({"content": "Done."})
with open(os.path.join(tmp, "gscript.jsonl"), "w") as f:
    for t in turns: f.write(json.dumps(t) + "\n")
PY
export CUDA_AGENT_STORE="$TMP/store.db"
SECONDS=0
"$CA_BIN/agent-run" --tasks "$TMP/gtask.jsonl" --policy "replay:$TMP/gscript.jsonl" --submit best --seed 3 \
  --kernel-check "$CA_BIN/kernel-check" --kernel-prof "$CA_BIN/kernel-prof" > "$TMP/cand.jsonl" 2> "$TMP/agent.err" \
  || { cat "$TMP/agent.err"; fail "agent-run failed"; }
echo "episode: ${SECONDS}s"
py '
e = recs[0]["episode"]
res = {x["tool"]: x for x in e["results"]}
for t in ("compile", "verify", "profile"):
    assert t in res and "error" not in res[t], (t, res.get(t))
assert res["compile"]["check"]["compiled"] is True, res["compile"]["check"]
assert res["verify"]["check"]["correct"] is True, res["verify"]["check"]
p = res["profile"]["prof"]
assert p["speedup_vs_compile"] > 0 and p["speedup_vs_eager"] > 0, p
assert e["submitted"]["from"] == "turn" and e["submitted"]["candidate_id"] == recs[0]["candidate_id"], e["submitted"]
print("episode: verify correct; profile time_us", json.dumps(p.get("time_us"))[:80], "speedup vs eager %.2f, vs compile %.2f" % (p["speedup_vs_eager"], p["speedup_vs_compile"]))
' "$TMP/cand.jsonl"
"$CA_BIN/kernel-check" < "$TMP/cand.jsonl" | "$CA_BIN/kernel-prof" | "$CA_BIN/reward-calc" > "$TMP/rewarded.jsonl" 2> "$TMP/pipe.err" \
  || { cat "$TMP/pipe.err"; fail "pipeline failed"; }
py '
r = recs[0]
assert r["check"]["correct"] is True, r["check"]
assert r["reward"]["value"] > 0, r["reward"]
print("downstream: reward", r["reward"]["value"], "-", r["reward"].get("reason", "")[:100])
' "$TMP/rewarded.jsonl"
# The device's python has no jsonschema: there the schemas are checked by the CPU tests instead.
if "$PY" -c "import jsonschema" 2>/dev/null; then
  "$PY" "$CA_SRC/tests/validate_schema.py" candidate "$TMP/cand.jsonl"
  "$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/cand.jsonl"
else
  echo "gpu_episode: $PY has no jsonschema: schema validation left to the CPU tests" >&2
fi
echo "gpu episode: ok"
