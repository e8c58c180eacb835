#!/bin/bash
# examples/rl-loop.sh --lora R without a GPU (compile-only proxy rewards): every ppo-step trains rank-R
# adapters on the frozen starting checkpoint, so each iteration's checkpoint is a PEFT adapter folder
# whose config names the base, and the next iteration samples it:
#   native: agent-run native:<adapter> (merged into the base); the records name the adapter;
#   served (the scripted vLLM on loopback): the first iteration samples the served base, the second
#   loads iter-01's adapter (--load-lora, --server vllm) under its content name before any completion,
#   and every completion of the second iteration names it.
# The base's files are never written.
source "$CA_SRC/tests/agent-run/lib.sh"
export PATH="$CA_BIN:$PATH" CA_FORCE_CPU=1
demo=$CA_SRC/datasets/demo
command -v kernel-check >/dev/null || fail "kernel-check not found in CA_BIN=$CA_BIN"

ppo-step init --model-config "$demo/loop/policy-cpu.json" --out "$TMP/base" --seed 1 -q
cp "$demo/tokenizer.json" "$TMP/base/"
base_sum=$(cat "$TMP/base"/* | sha256sum)
head -n 2 "$demo/tasks.jsonl" > "$TMP/tasks2.jsonl"

bash "$CA_SRC/examples/rl-loop.sh" --ckpt "$TMP/base" --tasks "$TMP/tasks2.jsonl" --work "$TMP/native" --iterations 2 \
  --rft 0 --episodes 1 --cpu-proxy --lora 2 --no-report -- --max-turns 2 --max-tokens 16 2> "$TMP/native.err" \
  || { tail -30 "$TMP/native.err"; fail "rl-loop.sh --lora 2 (native)"; }
"$PY" - "$TMP/native" "$TMP/base" <<'PY' || fail "native loop assertions"
import json, os, sys
run, base = sys.argv[1], sys.argv[2]
for it in ("iter-01", "iter-02"):
    cfg = json.load(open("%s/ckpt/%s/adapter_config.json" % (run, it)))
    assert cfg["r"] == 2 and cfg["task_type"] == "CAUSAL_LM", cfg
    assert os.path.samefile(cfg["base_model_name_or_path"], base), cfg["base_model_name_or_path"]
    assert not os.path.exists("%s/ckpt/%s/model.safetensors" % (run, it)), it + " holds full weights"
    critic = json.load(open("%s/ckpt/%s/critic/adapter_config.json" % (run, it)))
    assert critic["task_type"] == "TOKEN_CLS", critic
e1 = [json.loads(l) for l in open(run + "/iter-01.episodes.jsonl")]
e2 = [json.loads(l) for l in open(run + "/iter-02.episodes.jsonl")]
assert all(r["episode"]["policy"]["adapter"] is None for r in e1), e1[0]["episode"]["policy"]
for r in e2:
    p = r["episode"]["policy"]
    assert p["checkpoint"] == run + "/ckpt/iter-01" and p["base"] == base, p
    assert p["adapter"]["path"] == run + "/ckpt/iter-01" and p["adapter"]["name"] == "ca-lora-" + p["adapter"]["id"], p
m2 = [json.loads(l) for l in open(run + "/iter-02.metrics.jsonl")]
assert [m["mode"] for m in m2] == ["ppo"] and m2[0]["lora"]["policy"]["rank"] == 2, m2
print("rl-loop --lora (native): iter-02 sampled %s" % e2[0]["episode"]["policy"]["adapter"]["name"])
PY

# Served: the scripted vLLM. Its logprobs are made up: ppo-step's rollout check reports them only.
"$PY" - > "$TMP/script.json" <<'PY'
import json
print(json.dumps({"lora_server": "vllm", "steps": [{"message": {"content": "Nothing to do."}}] * 4}))
PY
start_mock "$TMP/script.json"
printf 'actor:\n  max_logprob_mismatch: 0\n' > "$TMP/served_ppo.yaml"
bash "$CA_SRC/examples/rl-loop.sh" --ckpt "$TMP/base" --tasks "$TMP/tasks2.jsonl" --policy "openai:http://127.0.0.1:$PORT/v1" \
  --server vllm --work "$TMP/served" --iterations 2 --rft 0 --episodes 1 --cpu-proxy --lora 2 --no-report \
  --ppo-config "$TMP/served_ppo.yaml" -- --retry-base 0.05 2> "$TMP/served.err" \
  || { tail -30 "$TMP/served.err"; fail "rl-loop.sh --lora 2 (served)"; }
"$PY" - "$TMP/requests.jsonl" "$TMP/served" <<'PY' || fail "served loop assertions"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
run = sys.argv[2]
assert all(not e["violations"] for e in log), [e["violations"] for e in log if e["violations"]]
order = [e["path"] for e in log]
loads = [e for e in log if e["path"] == "/v1/load_lora_adapter"]
assert len(loads) == 1 and loads[0]["body"]["lora_path"] == run + "/ckpt/iter-01", [e["body"] for e in loads]
name = loads[0]["body"]["lora_name"]
chats = [e for e in log if e["path"] == "/v1/chat/completions"]
assert [c["adapter"] for c in chats] == [None, None, name, name], [c["adapter"] for c in chats]
assert order.index("/v1/load_lora_adapter") == 2, order  # after iteration 1's two completions, before iteration 2's
e2 = [json.loads(l) for l in open(run + "/iter-02.episodes.jsonl")]
assert all(r["episode"]["policy"]["adapter"]["name"] == name for r in e2), e2[0]["episode"]["policy"]
print("rl-loop --lora (served): iteration 2 loaded %s and sampled with it" % name)
PY
[ "$(cat "$TMP/base"/* | sha256sum)" = "$base_sum" ] || fail "the base's files changed"
echo "rl-loop --lora: ok"
