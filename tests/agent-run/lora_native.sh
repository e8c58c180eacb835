#!/bin/bash
# native:ADAPTER samples with a LoRA adapter: agent-run loads the base the adapter's config names and
# merges the adapter (W += (alpha/r) B A) before sampling. An adapter with non-zero A and B on a small
# random model is written here (PEFT's key names, three target modules), and so is its merged
# checkpoint, in plain Python from the files (not through the code under test): with one seed, the
# adapter's episodes are the merged checkpoint's token for token (logprobs within 1e-4) and not the
# base's. The records name the adapter (name, path, content id computed here) and its base. An adapter
# whose base is missing, a critic adapter, broken weights: refused before any episode, nothing written.
source "$CA_SRC/tests/agent-run/lib.sh"

cat > "$TMP/model.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
"$CA_BIN/ppo-step" init --model-config "$TMP/model.json" --out "$TMP/base" --seed 3 -q || fail "ppo-step init"
cp "$CA_SRC/tests/nn_cuda/fixtures/tokenizer.json" "$TMP/base/"

# The adapter (rank 2, alpha 8: scaling 4) and the merged checkpoint, both from Python.
"$PY" - "$TMP" <<'PY' || fail "writing the adapter and its merged checkpoint"
import array, json, os, random, shutil, struct, sys
tmp = sys.argv[1]
sys.path.insert(0, os.path.join(os.environ["CA_SRC"], "tests"))
from safetensors_f32 import read
def write(path, tensors):
    header, blob = {}, b""
    for name in sorted(tensors):
        shape, data = tensors[name]
        raw = data.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)
cfg = json.load(open(tmp + "/base/config.json"))
C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
KD = cfg["num_key_value_heads"] * C // cfg["num_attention_heads"]
r, alpha = 2, 8.0
sites = {"q_proj": ("self_attn", C, C), "v_proj": ("self_attn", KD, C), "down_proj": ("mlp", C, F)}
rnd = random.Random(7)
base = read(tmp + "/base/model.safetensors")
adapter, merged = {}, dict(base)
for l in range(L):
    for mod, (part, out_dim, in_dim) in sites.items():
        A = array.array("f", [rnd.uniform(-0.5, 0.5) for _ in range(r * in_dim)])
        B = array.array("f", [rnd.uniform(-0.5, 0.5) for _ in range(out_dim * r)])
        key = "base_model.model.model.layers.%d.%s.%s" % (l, part, mod)
        adapter[key + ".lora_A.weight"] = ([r, in_dim], A)
        adapter[key + ".lora_B.weight"] = ([out_dim, r], B)
        wname = "model.layers.%d.%s.%s.weight" % (l, part, mod)
        shape, W = base[wname]
        assert shape == [out_dim, in_dim], (wname, shape)
        M = array.array("f", [W[o * in_dim + i] + alpha / r * sum(B[o * r + j] * A[j * in_dim + i] for j in range(r))
                              for o in range(out_dim) for i in range(in_dim)])
        merged[wname] = (shape, M)
os.makedirs(tmp + "/adapter")
write(tmp + "/adapter/adapter_model.safetensors", adapter)
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha, "lora_dropout": 0.0,
           "target_modules": ["v_proj", "q_proj", "down_proj"], "base_model_name_or_path": tmp + "/base",
           "bias": "none", "use_dora": False, "use_rslora": False, "fan_in_fan_out": False},
          open(tmp + "/adapter/adapter_config.json", "w"), indent=2)
os.makedirs(tmp + "/merged")
write(tmp + "/merged/model.safetensors", merged)
for f in ("config.json", "tokenizer.json"):
    shutil.copy(tmp + "/base/" + f, tmp + "/merged/" + f)
PY

sample() {  # POLICY-DIR OUT
  "$CA_BIN/agent-run" --policy "native:$1" --no-store --tasks "$TMP/task.jsonl" --episodes-per-task 2 \
    --max-turns 2 --max-tokens 24 --seed 5 > "$2" 2> "$TMP/err.txt" || { cat "$TMP/err.txt"; fail "agent-run native:$1"; }
}
sample "$TMP/adapter" "$TMP/adapter.jsonl"
sample "$TMP/merged" "$TMP/merged.jsonl"
sample "$TMP/base" "$TMP/base.jsonl"
"$PY" - "$TMP" <<'PY' || fail "native adapter assertions"
import hashlib, json, sys
tmp = sys.argv[1]
a, m, b = ([json.loads(l) for l in open("%s/%s.jsonl" % (tmp, k))] for k in ("adapter", "merged", "base"))
def turns(recs):
    return [t["assistant"] for r in recs for t in r["episode"]["turns"]]
ta, tm, tb = turns(a), turns(m), turns(b)
assert len(ta) == len(tm) >= 2 and all(t["token_ids"] for t in ta), (len(ta), len(tm))
for x, y in zip(ta, tm):
    assert x["token_ids"] == y["token_ids"], (x["token_ids"], y["token_ids"])
    worst = max(abs(u - v) for u, v in zip(x["logprobs"], y["logprobs"]))
    assert worst < 1e-4, worst
assert [t["token_ids"] for t in ta] != [t["token_ids"] for t in tb], "the adapter samples exactly as its base"
h = {f: hashlib.sha256(open(tmp + "/adapter/" + f, "rb").read()).hexdigest()
     for f in ("adapter_config.json", "adapter_model.safetensors")}
cid = hashlib.sha256(json.dumps(h, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
for r in a:
    p = r["episode"]["policy"]
    assert p["adapter"] == {"name": "ca-lora-" + cid, "path": tmp + "/adapter", "id": cid}, p
    assert p["base"] == tmp + "/base" and p["checkpoint"] == tmp + "/adapter" and p["model"] == "base", p
for r in m + b:
    assert r["episode"]["policy"]["adapter"] is None and "base" not in r["episode"]["policy"], r["episode"]["policy"]
print("native adapter: %d turns as the merged checkpoint's (%s tokens), not the base's" % (len(ta), [len(t["token_ids"]) for t in ta]))
PY
CA_SRC=$CA_SRC "$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/adapter.jsonl" || fail "episodes do not validate"

# Refused before any episode (nothing on stdout): a base that is not there (usage, as ppo-step says it),
# a critic adapter (bad input), weights of the wrong shape (bad input naming the file).
refuse() {  # WANT-RC DIR PATTERN
  set +e
  "$CA_BIN/agent-run" --policy "native:$2" --no-store --tasks "$TMP/task.jsonl" --seed 5 > "$TMP/o.jsonl" 2> "$TMP/err.txt"
  local rc=$?
  set -e
  [ $rc = "$1" ] && [ ! -s "$TMP/o.jsonl" ] || fail "native:$2: rc $rc (want $1), $(wc -l < "$TMP/o.jsonl") records: $(cat "$TMP/err.txt")"
  grep -qF "$3" "$TMP/err.txt" || fail "native:$2: '$3' not said: $(cat "$TMP/err.txt")"
}
for d in orphan critic shape; do cp -r "$TMP/adapter" "$TMP/$d"; done
"$PY" - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
def edit(d, **kv):
    c = json.load(open(tmp + "/%s/adapter_config.json" % d)); c.update(kv)
    json.dump(c, open(tmp + "/%s/adapter_config.json" % d, "w"))
edit("orphan", base_model_name_or_path="/nonexistent/base")
edit("critic", task_type="TOKEN_CLS", modules_to_save=["score"])
edit("shape", r=3)
PY
refuse 1 "$TMP/orphan" "/nonexistent/base"
refuse 2 "$TMP/critic" "critic"
refuse 2 "$TMP/shape" "adapter_model.safetensors"
echo "lora native: ok"
