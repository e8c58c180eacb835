#!/bin/bash
# RFT on episodes without token ids (issue 18): the replay policy's episodes of three demo tasks are
# rendered by ppo-step with the policy's tokenizer and chat template, as the native policy would have
# been fed them and would have had to sample them. Checked against an independent decoder of the
# tokenizer.json (Python, below): the model tokens are exactly each assistant turn's text in Qwen2.5's
# tool format plus <|im_end|>, and no tool output is among them. Then two rft steps: the second step's
# loss on the same episodes (measured before its update) is below the first's (the first step lowered it).
source "$CA_TESTS/lib.sh"
AR=$CA_SRC/tests/agent-run
export CA_KERNEL_CHECK="$AR/fake-kernel-check.sh" CA_KERNEL_PROF="$AR/fake-kernel-prof.sh" FAKE_SPEEDUP=1.5
demo=$CA_SRC/datasets/demo
head -n 3 "$demo/tasks.jsonl" > "$tmp/tasks.jsonl"   # three of the demo's tasks keep it short
"$CA_BIN/agent-run" --policy "replay:$demo/replay.jsonl" --tasks "$tmp/tasks.jsonl" --no-store --max-turns 20 \
  --seed 1 -q > "$tmp/episodes.jsonl"
# Rewards as reward-calc gives them to bundles that passed and beat compile (the fake checker's verdicts).
$PY - "$tmp/episodes.jsonl" > "$tmp/rewarded.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    r["reward"] = {"value": 3, "scheme": "milestone", "reason": "test"}
    print(json.dumps(r))
PY
cat > "$tmp/model.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
$PPO init --model-config "$tmp/model.json" --out "$tmp/p0" --seed 3 -q
cp "$CA_SRC/tests/nn_cuda/fixtures/tokenizer.json" "$tmp/p0/"

$PPO tokenize --policy "$tmp/p0" --no-store -q < "$tmp/episodes.jsonl" > "$tmp/tokens.jsonl"
$PY - "$tmp/tokens.jsonl" "$tmp/p0/tokenizer.json" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
tj = json.load(open(sys.argv[2]))
# GPT-2's byte <-> unicode map, and the vocabulary with the added tokens.
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
piece = {i: t for t, i in tj["model"]["vocab"].items()}
special = {a["id"]: a["content"] for a in tj["added_tokens"]}
def decode(ids):
    out = b""
    for i in ids:
        out += special[i].encode() if i in special else bytes(byte_of[c] for c in piece[i])
    return out.decode("utf-8")
def assistant_text(a):
    s = a.get("content") or ""
    for c in a.get("tool_calls") or []:
        if s:
            s += "\n"
        s += '<tool_call>\n{"name": %s, "arguments": %s}\n</tool_call>' % (json.dumps(c["name"]), c["arguments"])
    return s
assert len(recs) == 3, len(recs)
total = model = 0
for r in recs:
    t, e = r["training_tokens"], r["episode"]
    assert t["rendered"] is True and len(t["ids"]) == len(t["mask"]), t.keys()
    ids, mask = t["ids"], t["mask"]
    runs = []  # (model?, ids)
    for i, m in zip(ids, mask):
        if runs and runs[-1][0] == (m == 1):
            runs[-1][1].append(i)
        else:
            runs.append((m == 1, [i]))
    turns = e["turns"]
    assert [m for m, _ in runs] == [False, True] * len(turns), ("runs", [m for m, _ in runs], len(turns))
    text = decode(ids)
    assert text.startswith("<|im_start|>system\n" + e["prompt"]["system"] + "\n\n# Tools\n"), text[:200]
    assert ("<|im_start|>user\n" + e["prompt"]["user"] + "<|im_end|>\n<|im_start|>assistant\n") in decode(runs[0][1])
    for k, turn in enumerate(turns):
        sampled = decode(runs[2 * k + 1][1])
        assert sampled == assistant_text(turn["assistant"]) + "<|im_end|>", (k, sampled[:300])
        if k + 1 < len(turns):
            fed = decode(runs[2 * k + 2][1])
            want = "\n<|im_start|>user" + "".join("\n<tool_response>\n%s\n</tool_response>" % x["content"]
                                                  for x in turn["tool_results"]) + "<|im_end|>\n<|im_start|>assistant\n"
            assert fed == want, (k, fed[:300], want[:300])
    assert t["response_start"] == len(runs[0][1]) and t["model_tokens"] == sum(mask)
    total += len(ids); model += sum(mask)
print("tokenize: 3 replay episodes, %d tokens, %d model tokens, every turn as the template renders it" % (total, model))
PY

printf 'rft:\n  lr: 2.0e-2\n  epochs: 1\n' > "$tmp/rft.yaml"
$PPO --mode rft --policy "$tmp/p0" --out "$tmp/p1" --config "$tmp/rft.yaml" --seed 1 --no-store -q \
  < "$tmp/rewarded.jsonl" > "$tmp/m1.jsonl"
$PPO --mode rft --policy "$tmp/p1" --out "$tmp/p2" --config "$tmp/rft.yaml" --seed 1 --no-store -q \
  < "$tmp/rewarded.jsonl" > "$tmp/m2.jsonl"
[ -f "$tmp/p2/tokenizer.json" ] || { echo "FAIL: the tokenizer did not travel with the checkpoint"; exit 1; }
$PY - "$tmp/m1.jsonl" "$tmp/m2.jsonl" <<'PY'
import json, sys
m1, m2 = (json.loads(open(f).readline()) for f in sys.argv[1:3])
l1, l2 = m1["losses"]["sft_loss"], m2["losses"]["sft_loss"]
print("rft on rendered replay episodes: %d episodes, %d of %d tokens trained; sft_loss %.4f -> %.4f" % (
    m1["episodes"], m1["model_tokens"], m1["tokens"], l1, l2))
assert m1["episodes"] == 3 and m1["optimizer_steps"]["actor"] == 1, m1
assert 0 < m1["model_tokens"] < m1["tokens"], "prompts and tool output must be masked"
assert l2 < l1 - 0.05, "the rft step did not lower the loss on its episodes: %g -> %g" % (l1, l2)
PY
# An iteration where nothing earned a reward: rft keeps nothing. An input error (exit 2) by default;
# with --empty-ok (a loop's iteration) a metrics line says so, exit 0, and no checkpoint is written.
sed 's/"value": 3/"value": -1/' "$tmp/rewarded.jsonl" > "$tmp/failed.jsonl"
set +e
$PPO --mode rft --policy "$tmp/p1" --out "$tmp/none" --no-store < "$tmp/failed.jsonl" > /dev/null 2> "$tmp/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -q "no trajectories to train on" "$tmp/err.txt" || { echo "FAIL: empty rft batch: rc $rc"; exit 1; }
$PPO --mode rft --policy "$tmp/p1" --out "$tmp/none" --no-store --empty-ok < "$tmp/failed.jsonl" > "$tmp/m0.jsonl" 2> "$tmp/err.txt" \
  || { echo "FAIL: --empty-ok exited non-zero: $(cat "$tmp/err.txt")"; exit 1; }
[ ! -e "$tmp/none" ] || { echo "FAIL: --empty-ok wrote a checkpoint"; exit 1; }
$PY - "$tmp/m0.jsonl" "$tmp/m1.jsonl" <<'PY'
import json, sys
m0, m1 = (json.loads(open(f).readline()) for f in sys.argv[1:3])
assert m0["trained"] is False and m0["episodes"] == 0 and m0["episodes_skipped"] == 3, m0
assert m1["trained"] is True and m1["sft_loss_first"] >= m1["sft_loss_last"] > 0, m1
PY
# Without a tokenizer.json in the checkpoint the episodes are bad records naming what is missing.
mkdir -p "$tmp/bare" && cp "$tmp/p0/config.json" "$tmp/p0/model.safetensors" "$tmp/bare/"
set +e
$PPO --mode rft --policy "$tmp/bare" --out "$tmp/p3" --no-store < "$tmp/rewarded.jsonl" > /dev/null 2> "$tmp/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -q "no tokenizer.json to render the turns with" "$tmp/err.txt" \
  || { echo "FAIL: rft without a tokenizer: rc $rc: $(head -3 "$tmp/err.txt")"; exit 1; }
echo "rft on rendered episodes: ok"
