#!/usr/bin/env bash
# --load-format dummy (issue 34's 32B shape): a folder holding only config.json, as `ppo-step init`
# writes it, trains as the folder `ppo-step init --seed S` writes would, with the step's --seed S: the
# same metrics and the same checkpoint byte for byte (full fine-tuning in bf16 and f32, a LoRA adapter
# with --merge, a critic started from the policy), while another seed gives other weights. The records
# and stderr say the weights are dummy. A bad value, an adapter folder or a trained checkpoint with the
# dummy format are usage errors (exit 1) naming the flag.
source "$(dirname "$0")/lib.sh"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

# The init'd folders and their config-only twins.
$PPO init --model-config "$HERE/toy_model.json" --out bf16 --dtype bf16 --seed 5 -q
$PPO init --model-config "$HERE/toy_model.json" --out f32 --seed 5 -q
for d in bf16 f32; do mkdir "dummy_$d" && cp "$d/config.json" "dummy_$d/"; done
grep -q '"torch_dtype": "bfloat16"' dummy_bf16/config.json || fail "init --dtype bf16 wrote no torch_dtype bfloat16"

printf '%s\n' '{"task_id":"a","prompt_token_ids":[0]}' '{"task_id":"b","prompt_token_ids":[0,7]}' > prompts.jsonl
$PPO sample --policy bf16 -n 4 --max-new-tokens 5 --seed 5 -q < prompts.jsonl > sampled.jsonl
$PY - sampled.jsonl > episodes.jsonl <<'PYEOF'
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    r = json.loads(line)
    r["reward"] = {"value": float(i % 3)}
    print(json.dumps(r))
PYEOF
# The rollout check off: a step on other weights (the other seed) must run, not stop at the check.
printf 'algorithm:\n  estimator: grpo\nactor:\n  lr: 1.0e-2\n  max_logprob_mismatch: 0\n' > grpo.yaml

# step NAME SEED ARGS...: one step, metrics in NAME.jsonl, stderr in NAME.err, checkpoint in NAME/.
step() {
  local name=$1 seed=$2
  shift 2
  $PPO "$@" --seed "$seed" --no-store --out "$name" < episodes.jsonl > "$name.jsonl" 2> "$name.err" \
    || { cat "$name.err" >&2; fail "$name: ppo-step exited $?"; }
}
# same A B: the metrics are equal but for the paths, times and load_format.
same() {
  $PY - "$1.jsonl" "$2.jsonl" <<'PYEOF' || fail "$1 and $2: the metrics differ"
import json, sys
a, b = (json.loads(open(p).readline()) for p in sys.argv[1:3])
assert a["load_format"] == "safetensors" and b["load_format"] == "dummy", (a["load_format"], b["load_format"])
def strip(m):
    for k in ("step_id", "policy", "critic", "out", "critic_out", "merged", "seconds", "phase_seconds", "tokens_per_s", "load_format"):
        m.pop(k, None)
    m["actor_epochs"] = [e["tokens"] for e in m.get("actor_epochs", [])]  # their times differ
    m.get("rollout_mismatch", {}).pop("extra_forward_seconds", None)
    for lo in m.get("lora", {}).values():
        lo.pop("base")
    return m
a, b = strip(a), strip(b)
bad = [k for k in a.keys() | b.keys() if a.get(k) != b.get(k)]
assert not bad, {k: (a.get(k), b.get(k)) for k in bad}
PYEOF
}

# Full fine-tuning, bf16 and f32 on disk: the same step, the same checkpoint written.
for d in bf16 f32; do
  step "full_$d" 5 --mode ppo --policy "$d" --config grpo.yaml
  step "full_dummy_$d" 5 --mode ppo --policy "dummy_$d" --load-format dummy --config grpo.yaml
  same "full_$d" "full_dummy_$d"
  cmp -s "full_$d/model.safetensors" "full_dummy_$d/model.safetensors" || fail "$d: the dummy step's checkpoint is not the init'd one's"
  grep -q "load-format dummy: the weights of 'dummy_$d' are random" "full_dummy_$d.err" || fail "$d: stderr does not say the weights are random"
  grep -q "dummy weights" "full_dummy_$d.err" || fail "$d: the step's summary does not say dummy"
  ! grep -q "random" "full_$d.err" || fail "$d: a step that read its weights says they are random"
done
validate ppo-metrics full_dummy_bf16.jsonl

# Another seed: other weights (the init'd folder keeps seed 5's), so the same step differs.
step other_init 6 --mode ppo --policy bf16 --config grpo.yaml
step other_dummy 6 --mode ppo --policy dummy_bf16 --load-format dummy --config grpo.yaml
$PY - other_init.jsonl other_dummy.jsonl full_bf16.jsonl <<'PYEOF' || fail "seed 6's dummy weights are seed 5's"
import json, sys
a, b, c = (json.loads(open(p).readline()) for p in sys.argv[1:4])
# The logprobs before any update see the weights only: seed 5's folder gives the same under either run seed.
key = lambda m: m["rollout_mismatch"]["logprob_abs_diff_mean"]
assert key(a) == key(c), (key(a), key(c))
assert key(b) != key(a) and key(b) > 1e-3, (key(a), key(b))
assert b["losses"] != a["losses"], (a["losses"], b["losses"])
PYEOF
! cmp -s other_init/model.safetensors other_dummy/model.safetensors || fail "seed 6's dummy checkpoint is seed 5's"

# LoRA on the dummy base, with --merge: the same adapter and merged checkpoint; the adapter names the
# folder as its base.
step lora 5 --mode ppo --policy bf16 --config grpo.yaml --lora-rank 2 --merge merged
step lora_dummy 5 --mode ppo --policy dummy_bf16 --load-format dummy --config grpo.yaml --lora-rank 2 --merge merged_dummy
same lora lora_dummy
cmp -s lora/adapter_model.safetensors lora_dummy/adapter_model.safetensors || fail "the dummy base's adapter differs"
cmp -s merged/model.safetensors merged_dummy/model.safetensors || fail "the dummy base's merged checkpoint differs"
[ ! -e lora_dummy/model.safetensors ] || fail "a LoRA step on a dummy base wrote full weights"
$PY - "$PWD" <<'PYEOF' || fail "the adapter does not name the dummy folder as its base"
import json, os, sys
cfg = json.load(open(f"{sys.argv[1]}/lora_dummy/adapter_config.json"))
assert os.path.samefile(cfg["base_model_name_or_path"], f"{sys.argv[1]}/dummy_bf16"), cfg["base_model_name_or_path"]
PYEOF

# A critic started from a dummy causal LM: the LM's draw (its head skipped), the value head zero.
step critic 5 --mode value-pretrain --critic bf16
step critic_dummy 5 --mode value-pretrain --critic dummy_bf16 --load-format dummy
same critic critic_dummy
cmp -s critic/model.safetensors critic_dummy/model.safetensors || fail "the dummy critic differs"

# Usage errors name the flag: a bad value; an adapter folder or a trained checkpoint (nothing to continue).
usage() {
  local what=$1
  shift
  set +e
  $PPO --mode ppo --config grpo.yaml --no-store --out never "$@" < episodes.jsonl > /dev/null 2> usage.err
  local rc=$?
  set -e
  [ "$rc" = 1 ] || { cat usage.err >&2; fail "$what: exit $rc, not 1"; }
  grep -q -- "--load-format" usage.err || { cat usage.err >&2; fail "$what: the error does not name --load-format"; }
  [ ! -e never ] || fail "$what: a checkpoint was written"
}
usage "a bad value" --policy dummy_bf16 --load-format random
usage "an adapter folder" --policy lora_dummy --load-format dummy
usage "a trained checkpoint" --policy full_dummy_bf16 --load-format dummy
grep -q "trainer_state" usage.err || fail "the trained checkpoint's refusal does not say why"
echo "ok: dummy weights are init's, bit for bit; another seed differs; bad uses are usage errors"
