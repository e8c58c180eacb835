#!/usr/bin/env bash
# LoRA on the CPU (issue 34): a GRPO step with --lora-rank writes a PEFT adapter folder (config keys, key
# names and shapes as PEFT writes them, read by an independent reader), leaves the base's files
# untouched, continues from the adapter folder on the next step, trains a critic adapter with its value
# head (GAE), and --merge writes the full checkpoint W + (alpha/r) B A, checked here against the
# adapter in numpy-free Python. ppo-step sample runs an adapter as its merged model. Bad options and
# folders are refused before any work.
source "$(dirname "$0")/lib.sh"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

$PPO init --model-config "$HERE/toy_model.json" --out base --seed 3 -q
base_sum=$(cat base/* 2>/dev/null | sha256sum)
printf '%s\n' '{"task_id":"a","prompt_token_ids":[0]}' '{"task_id":"b","prompt_token_ids":[0,7]}' > prompts.jsonl
$PPO sample --policy base -n 6 --max-new-tokens 5 --seed 5 -q < prompts.jsonl > sampled.jsonl
$PY - sampled.jsonl > episodes.jsonl <<'PYEOF'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    first = r["episode"]["turns"][1]["token_ids"][0]
    r["reward"] = {"value": [-1, 1, 2, 3][first % 4], "scheme": "milestone", "reason": "toy"}
    print(json.dumps(r))
PYEOF
cat > grpo.yaml <<'YEOF'
algorithm:
  estimator: grpo
actor:
  lr: 1.0e-2
  epochs: 2
YEOF

# Step 1: a new rank-4 adapter on the base; --merge beside it.
$PPO --mode ppo --policy base --out step1 --merge merged1 --config grpo.yaml --lora-rank 4 --seed 1 --no-store -q \
  < episodes.jsonl > m1.jsonl
[ -f step1/adapter_config.json ] && [ -f step1/adapter_model.safetensors ] || fail "step1 is not an adapter folder"
[ ! -e step1/model.safetensors ] && [ ! -e step1/config.json ] || fail "step1 carries full weights or a config.json"
[ -f step1/trainer_state/optimizer.safetensors ] || fail "no optimizer state beside the adapter"
[ -f merged1/config.json ] && [ -f merged1/model.safetensors ] || fail "--merge wrote no full checkpoint"
[ "$(cat base/* 2>/dev/null | sha256sum)" = "$base_sum" ] || fail "the frozen base's files changed"

$PY - "$PWD" "$CA_SRC/tests" <<'PYEOF'
import json, sys, os
root = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from safetensors_f32 import read as tensors
cfg = json.load(open(f"{root}/step1/adapter_config.json"))
assert cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM", cfg
assert cfg["r"] == 4 and cfg["lora_alpha"] == 8, cfg
assert cfg["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], cfg
assert os.path.samefile(cfg["base_model_name_or_path"], f"{root}/base"), cfg["base_model_name_or_path"]
assert cfg["bias"] == "none" and not cfg["use_dora"] and not cfg["use_rslora"]
ad = tensors(f"{root}/step1/adapter_model.safetensors")
base = tensors(f"{root}/base/model.safetensors")
merged = tensors(f"{root}/merged1/model.safetensors")
model = json.load(open(f"{root}/base/config.json"))
C, F, L = model["hidden_size"], model["intermediate_size"], model["num_hidden_layers"]
D = C // model["num_attention_heads"]
KD = model["num_key_value_heads"] * D
want = {"q_proj": (C, C), "k_proj": (KD, C), "v_proj": (KD, C), "o_proj": (C, C), "gate_proj": (F, C),
        "up_proj": (F, C), "down_proj": (C, F)}
assert len(ad) == 2 * 7 * L, sorted(ad)
moved = 0
for l in range(L):
    for mod, (out_dim, in_dim) in want.items():
        part = "self_attn" if mod in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
        key = f"base_model.model.model.layers.{l}.{part}.{mod}"
        sa, A = ad[key + ".lora_A.weight"]
        sb, B = ad[key + ".lora_B.weight"]
        assert sa == [4, in_dim] and sb == [out_dim, 4], (key, sa, sb)
        assert any(b != 0 for b in B), key + ": B never moved off zero"
        wname = f"model.layers.{l}.{part}.{mod}.weight"
        _, W = base[wname]
        _, M = merged[wname]
        worst = 0.0
        for o in range(out_dim):
            for i in range(in_dim):
                w = W[o * in_dim + i] + 2.0 * sum(B[o * 4 + j] * A[j * in_dim + i] for j in range(4))
                worst = max(worst, abs(w - M[o * in_dim + i]))
                moved = max(moved, abs(M[o * in_dim + i] - W[o * in_dim + i]))
        assert worst < 1e-6, (wname, worst)
# Everything the adapter does not touch is the base's, bit for bit.
for name, (shape, w) in base.items():
    if not any(m in name for m in want):
        assert merged[name][1] == w, name
assert moved > 1e-4, "the merged model equals the base"
m = json.loads(open(f"{root}/m1.jsonl").readline())
lp = m["lora"]["policy"]
assert lp["rank"] == 4 and lp["alpha"] == 8, lp
assert lp["trainable_parameters"] == sum(len(x[1]) for x in ad.values()), lp
assert m["merged"] == "merged1"
# actor.epochs 2: each epoch's tokens and seconds, the same tokens twice, together all the policy's.
ep = m["actor_epochs"]
assert len(ep) == 2 and ep[0]["tokens"] == ep[1]["tokens"] > 0, ep
assert sum(e["tokens"] for e in ep) == m["trained_tokens"], (ep, m["trained_tokens"])
assert all(e["seconds"] > 0 and abs(e["tokens_per_s"] - e["tokens"] / e["seconds"]) < 1e-6 * e["tokens_per_s"] for e in ep), ep
print("lora step 1: adapter of", lp["trainable_parameters"], "parameters; merged max |dW| %.2e" % moved)
PYEOF

validate ppo-metrics m1.jsonl

# ppo-step sample runs the adapter as its merged model: the same draws as the merged checkpoint.
$PPO sample --policy step1 -n 3 --max-new-tokens 5 --seed 9 -q < prompts.jsonl > s_adapter.jsonl
$PPO sample --policy merged1 -n 3 --max-new-tokens 5 --seed 9 -q < prompts.jsonl > s_merged.jsonl
$PPO sample --policy base -n 3 --max-new-tokens 5 --seed 9 -q < prompts.jsonl > s_base.jsonl
$PY - s_adapter.jsonl s_merged.jsonl s_base.jsonl <<'PYEOF'
import json, sys
a, m, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
def lps(rs): return [t.get("logprobs") for r in rs for t in r["episode"]["turns"] if t["role"] == "assistant"]
la, lm, lb = lps(a), lps(m), lps(b)
assert [r["episode"]["turns"] for r in a] and len(la) == len(lm)
for x, y in zip(la, lm):
    assert all(abs(u - v) < 1e-4 for u, v in zip(x, y)), (x, y)
assert la != lb, "the adapter samples exactly as the base"
PYEOF

# Step 2 continues the adapter folder (its rank wins; --lora-rank elsewhere is said and ignored), on
# episodes the adapter sampled (the base's would fail the rollout check: they are not step1's).
$PPO sample --policy step1 -n 6 --max-new-tokens 5 --seed 6 -q < prompts.jsonl | $PY -c '
import json, sys
for i, l in enumerate(sys.stdin):
    r = json.loads(l); r["reward"] = {"value": i % 3, "scheme": "milestone", "reason": "toy"}; print(json.dumps(r))' > episodes2.jsonl
$PPO --mode ppo --policy step1 --out step2 --config grpo.yaml --lora-rank 8 --seed 2 --no-store < episodes2.jsonl \
  > m2.jsonl 2> step2.err
grep -q "ignored" step2.err || fail "a different --lora-rank on an adapter folder was not said"
$PY - m2.jsonl step1/adapter_model.safetensors step2/adapter_model.safetensors <<'PYEOF'
import json, sys
m = json.loads(open(sys.argv[1]).readline())
assert m["step"] == 2, m["step"]
assert m["lora"]["policy"]["rank"] == 4
assert open(sys.argv[2], "rb").read() != open(sys.argv[3], "rb").read(), "step 2 left the adapter unchanged"
PYEOF
# Replacing an adapter folder with a newer one is allowed (it is a checkpoint), a foreign folder is not.
$PPO --mode ppo --policy step1 --out step2 --config grpo.yaml --seed 2 --no-store -q < episodes2.jsonl > /dev/null \
  || fail "an adapter folder at --out was not replaced"

# PPO with GAE: the critic is an adapter of its own (TOKEN_CLS + score head) on the same base.
$PPO --mode ppo --policy base --critic base --out gae1 --lora-rank 2 --seed 4 --no-store -q < episodes.jsonl > m3.jsonl
$PY - gae1/critic m3.jsonl <<'PYEOF'
import json, struct, sys
cfg = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert cfg["task_type"] == "TOKEN_CLS" and cfg["modules_to_save"] == ["score"], cfg
raw = open(sys.argv[1] + "/adapter_model.safetensors", "rb").read()
hdr = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert hdr["base_model.model.score.weight"]["shape"] == [1, 32], hdr["base_model.model.score.weight"]
m = json.loads(open(sys.argv[2]).readline())
assert m["lora"]["critic"]["rank"] == 2 and m["lora"]["policy"]["rank"] == 2, m["lora"]
PYEOF
validate ppo-metrics m3.jsonl
# The next step takes the critic adapter back.
$PPO --mode ppo --policy gae1 --critic gae1/critic --out gae2 --seed 4 --no-store -q < episodes.jsonl > /dev/null

# Refused, before any work (exit 1: usage; exit 2: bad input).
expect() {
  local want=$1; shift
  set +e; "$@" < episodes.jsonl > bad.out 2> bad.err; local rc=$?; set -e
  [ "$rc" = "$want" ] || { cat bad.err >&2; fail "exit $rc, wanted $want: $*"; }
}
expect 1 $PPO --mode ppo --policy base --out x1 --config grpo.yaml --lora-alpha 4 --no-store
expect 1 $PPO --mode ppo --policy base --out x2 --config grpo.yaml --lora-rank 2 --lora-targets q_proj,lm_head --no-store
grep -q "lm_head" bad.err || fail "the bad target module is not named"
mkdir -p orphan && cp step1/adapter_* orphan/
$PY - orphan/adapter_config.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["base_model_name_or_path"] = "/nonexistent/base"
json.dump(c, open(sys.argv[1], "w"))
PYEOF
expect 1 $PPO --mode ppo --policy orphan --out x3 --config grpo.yaml --no-store
grep -q "/nonexistent/base" bad.err || fail "the missing base is not named"
expect 2 $PPO --mode ppo --policy gae1/critic --out x4 --config grpo.yaml --no-store
grep -q "critic adapter" bad.err || fail "a critic adapter as policy is not named"
# PEFT writes null for a setting it was not given (task_type): the default, a policy. A mistyped setting
# is bad input naming the file and the key, not an internal error (it was exit 4).
mkdir -p peftnull mistyped && cp step1/adapter_* peftnull/ && cp step1/adapter_* mistyped/
$PY - peftnull/adapter_config.json mistyped/adapter_config.json <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["task_type"] = None
json.dump(c, open(sys.argv[1], "w"))
c["use_dora"] = "no"
json.dump(c, open(sys.argv[2], "w"))
PYEOF
$PPO --mode ppo --policy peftnull --out x5 --config grpo.yaml --no-store -q < episodes2.jsonl > /dev/null \
  || fail "a step from an adapter with task_type null failed"
[ -f x5/adapter_config.json ] || fail "a step from an adapter with task_type null wrote no adapter"
expect 2 $PPO --mode ppo --policy mistyped --out x6 --config grpo.yaml --no-store
grep -q "mistyped/adapter_config.json': use_dora: expected a boolean, got string \"no\"" bad.err || fail "the mistyped use_dora is not named: $(cat bad.err)"
[ ! -e x1 ] && [ ! -e x2 ] && [ ! -e x3 ] && [ ! -e x4 ] && [ ! -e x6 ] || fail "a refused step wrote a checkpoint"
echo "ok"
