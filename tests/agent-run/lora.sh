#!/bin/bash
# A served policy gets each new LoRA adapter before sampling: agent-run --load-lora DIR --server vllm|sglang
# against the scripted server acting as vLLM and then as SGLang on loopback (mock_openai.py's
# "lora_server": each accepts only its documented path and payload and logs what it received).
# For each: the adapter is loaded under its content name (ca-lora-<16 hex of sha256 over the two files'
# sha256>, computed here independently), every completion names it the server's way and is served by
# it, the episode records carry policy.adapter {name, path, id}; the next step's adapter unloads the
# earlier one and loads; an adapter already loaded is not loaded again; an adapter rewritten in place
# gets a new name and is loaded again (the server's copy of the old content cannot pass for it). A server that refuses the load: exit 3, nothing
# sampled, nothing written. A folder that is not an adapter: exit 2 naming the file, no request at all.
source "$CA_SRC/tests/agent-run/lib.sh"

# make_adapter DIR SEED: a PEFT-shaped adapter folder (a tiny safetensors file, F32).
make_adapter() {
  "$PY" - "$1" "$2" <<'PY'
import json, os, random, struct, sys
d, seed = sys.argv[1], int(sys.argv[2])
os.makedirs(d, exist_ok=True)
rnd = random.Random(seed)
tensors = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": [2, 4],
           "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight": [4, 2]}
header, blob = {}, b""
for k, shape in tensors.items():
    data = struct.pack("<8f", *[rnd.uniform(-1, 1) for _ in range(8)])
    header[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(header).encode()
with open(os.path.join(d, "adapter_model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + blob)
json.dump({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM",
           "base_model_name_or_path": "/served/base", "bias": "none"}, open(os.path.join(d, "adapter_config.json"), "w"))
PY
}
# content_name DIR: the name agent-run must give the adapter, computed from the files here.
content_name() {
  "$PY" - "$1" <<'PY'
import hashlib, json, sys
d = sys.argv[1]
h = {f: hashlib.sha256(open(d + "/" + f, "rb").read()).hexdigest() for f in ("adapter_config.json", "adapter_model.safetensors")}
print("ca-lora-" + hashlib.sha256(json.dumps(h, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16])
PY
}
# script KIND [KEY VALUE]: a server script of KIND with enough "Done." turns for every run below.
script() {
  "$PY" - "$@" > "$TMP/script.json" <<'PY'
import json, sys
s = {"expect_tools": ["read_file", "write_file", "edit_file", "list_files", "grep", "bash", "compile", "verify", "profile"],
     "lora_server": sys.argv[1], "steps": [{"message": {"content": "Done."}}] * 12}
if len(sys.argv) > 3:
    s[sys.argv[2]] = json.loads(sys.argv[3])
print(json.dumps(s))
PY
}
restart_mock() {  # KIND [KEY VALUE]
  if [ -n "$MOCK_PID" ]; then kill "$MOCK_PID"; wait "$MOCK_PID" 2>/dev/null || true; MOCK_PID=; fi
  rm -f "$TMP/port" "$TMP/requests.jsonl"
  script "$@"
  start_mock "$TMP/script.json"
}
run() {  # OUT ARGS...: agent-run against the mock; its status in RC, stderr in $TMP/err.txt
  local out=$1; shift
  set +e
  "$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --no-store --tasks "$TMP/task.jsonl" --seed 1 \
    --retry-base 0.05 "$@" > "$out" 2> "$TMP/err.txt"
  RC=$?
  set -e
}

make_adapter "$TMP/step-1" 1
make_adapter "$TMP/step-2" 2
N1=$(content_name "$TMP/step-1") N2=$(content_name "$TMP/step-2")
[ "$N1" != "$N2" ] || fail "two adapters of different content got one name"

for kind in vllm sglang; do
  restart_mock "$kind"
  make_adapter "$TMP/step-2" 2
  i=0
  for step in step-1 step-2 step-2; do
    i=$((i + 1))
    run "$TMP/$kind-$i.jsonl" --load-lora "$TMP/$step" --server "$kind"
    [ $RC = 0 ] || { cat "$TMP/err.txt"; fail "$kind: agent-run --load-lora $step: rc $RC"; }
    cp "$TMP/err.txt" "$TMP/$kind-$i.err"
  done
  grep -q "has adapter $N2 ($TMP/step-2) loaded already" "$TMP/$kind-3.err" || fail "$kind: no note of the adapter loaded already"
  grep -q "unloaded the earlier adapter $N1" "$TMP/$kind-2.err" || fail "$kind: no note of the unload"
  # The adapter rewritten in place (a folder reused): a new content, a new name, loaded again.
  make_adapter "$TMP/step-2" 3
  N3=$(content_name "$TMP/step-2")
  run "$TMP/$kind-4.jsonl" --load-lora "$TMP/step-2" --server "$kind" --keep-loras
  [ $RC = 0 ] || { cat "$TMP/err.txt"; fail "$kind: agent-run --load-lora step-2 rewritten: rc $RC"; }
  "$PY" - "$kind" "$TMP" "$N1" "$N2" "$N3" <<'PY' || fail "$kind: request assertions"
import json, sys
kind, tmp, n1, n2, n3 = sys.argv[1:]
log = [json.loads(l) for l in open(tmp + "/requests.jsonl")]
assert all(not e["violations"] for e in log), [(e["path"], e["violations"]) for e in log if e["violations"]]
pre = "/v1" if kind == "vllm" else ""
admin = [(e["path"], e["body"], e["status"]) for e in log if "lora_adapter" in e["path"]]
want = [(pre + "/load_lora_adapter", {"lora_name": n1, "lora_path": tmp + "/step-1"}, 200),
        (pre + "/unload_lora_adapter", {"lora_name": n1}, 200),
        (pre + "/load_lora_adapter", {"lora_name": n2, "lora_path": tmp + "/step-2"}, 200),
        # the third run: step-2 is listed already, nothing to load; the fourth keeps step-2 (--keep-loras)
        (pre + "/load_lora_adapter", {"lora_name": n3, "lora_path": tmp + "/step-2"}, 200)]
assert admin == want, json.dumps(admin, indent=1)
chats = [e for e in log if e["path"] == "/v1/chat/completions"]
assert [c["adapter"] for c in chats] == [n1, n2, n2, n3], [c["adapter"] for c in chats]
assert [c["adapter_path"] for c in chats] == [tmp + p for p in ("/step-1", "/step-2", "/step-2", "/step-2")]
for c in chats:
    if kind == "vllm":
        assert c["body"]["model"] == c["adapter"] and "lora_path" not in c["body"], c["body"]["model"]
    else:
        assert c["body"]["model"] == "mock-model:" + c["adapter"] and c["body"]["lora_path"] == c["adapter"], c["body"]
# Each load came before the completions it served; the unload of the earlier adapter before the next load.
order = [e["path"][len(pre):] if "lora_adapter" in e["path"] else "chat" for e in log]
assert order == ["/load_lora_adapter", "chat", "/unload_lora_adapter", "/load_lora_adapter", "chat", "chat",
                 "/load_lora_adapter", "chat"], order
for i, (step, name) in enumerate((("step-1", n1), ("step-2", n2), ("step-2", n2), ("step-2", n3))):
    recs = [json.loads(l) for l in open("%s/%s-%d.jsonl" % (tmp, kind, i + 1))]
    pol = recs[0]["episode"]["policy"]
    assert len(recs) == 1 and pol["adapter"] == {"name": name, "path": tmp + "/" + step, "id": name[len("ca-lora-"):]}, pol
    assert pol["server"] == kind and pol["model"] == "mock-model", pol
    assert recs[0]["episode"]["stop_reason"] == "done", recs[0]["episode"]["stop_reason"]
print("%s: %d admin requests, completions served by %s" % (kind, len(admin), [c["adapter"][:14] for c in chats]))
PY
  CA_SRC=$CA_SRC "$PY" "$CA_SRC/tests/validate_schema.py" episode "$TMP/$kind-1.jsonl" || fail "$kind: episodes do not validate"
done

# The server refuses the load (vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING: no such route; SGLang
# without --enable-lora: success false): exit 3, the refusal named, nothing sampled, nothing written.
for refusal in "vllm runtime_lora false" "sglang enable_lora false"; do
  restart_mock $refusal
  run "$TMP/o.jsonl" --load-lora "$TMP/step-1" --server "${refusal%% *}"
  [ $RC = 3 ] && [ ! -s "$TMP/o.jsonl" ] || fail "$refusal: rc $RC, $(wc -l < "$TMP/o.jsonl") records"
  grep -q "did not load $TMP/step-1 as $N1" "$TMP/err.txt" || fail "$refusal: the refusal is not named: $(cat "$TMP/err.txt")"
  ! grep -q chat/completions "$TMP/requests.jsonl" || fail "$refusal: sampled after a refused load"
done

# Not an adapter folder: exit 2 naming the file, before any request.
restart_mock vllm
mkdir -p "$TMP/full" "$TMP/no-weights" "$TMP/bad-config" "$TMP/pickle"
echo '{"model_type": "qwen2"}' > "$TMP/full/config.json"
cp "$TMP/step-1/adapter_config.json" "$TMP/no-weights/"
cp "$TMP/step-1/adapter_config.json" "$TMP/pickle/"; echo x > "$TMP/pickle/adapter_model.bin"
cp -r "$TMP/step-1/." "$TMP/bad-config/"; echo '{"peft_type": "PREFIX_TUNING", "r": 2}' > "$TMP/bad-config/adapter_config.json"
mkdir -p "$TMP/bad-weights"; cp "$TMP/step-1/adapter_config.json" "$TMP/bad-weights/"; echo garbage > "$TMP/bad-weights/adapter_model.safetensors"
for c in "full adapter_config.json" "no-weights adapter_model.safetensors" "pickle adapter_model.safetensors" \
         "bad-config adapter_config.json" "bad-weights adapter_model.safetensors" "missing missing"; do
  dir=${c%% *} file=${c##* }
  run "$TMP/o.jsonl" --load-lora "$TMP/$dir" --server vllm
  [ $RC = 2 ] && [ ! -s "$TMP/o.jsonl" ] || fail "--load-lora $dir: rc $RC (want 2)"
  grep -qF "$TMP/$dir" "$TMP/err.txt" && grep -qF "$file" "$TMP/err.txt" || fail "--load-lora $dir: $file not named: $(cat "$TMP/err.txt")"
  [ "$dir" != pickle ] || grep -q "adapter_model.bin is a pickle" "$TMP/err.txt" || fail "a pickled adapter is not called one"
done
[ ! -s "$TMP/requests.jsonl" ] || fail "requests were sent for a folder that is not an adapter: $(cat "$TMP/requests.jsonl")"

# Usage: --load-lora without --server, with a policy that is not served; --load-weights with vLLM.
run "$TMP/o.jsonl" --load-lora "$TMP/step-1"; [ $RC = 1 ] || fail "--load-lora without --server: rc $RC"
set +e
"$CA_BIN/agent-run" --policy "replay:$TMP/none.jsonl" --load-lora "$TMP/step-1" --server vllm --no-store \
  --tasks "$TMP/task.jsonl" > /dev/null 2>&1; rc=$?
set -e
[ $rc = 1 ] || fail "--load-lora with replay: rc $rc"
mkdir -p "$TMP/ckpt"; echo '{}' > "$TMP/ckpt/config.json"
run "$TMP/o.jsonl" --load-weights "$TMP/ckpt" --server vllm; [ $RC = 1 ] || fail "--load-weights --server vllm: rc $RC"
[ ! -s "$TMP/requests.jsonl" ] || fail "requests were sent on a usage error"
echo "lora: ok"
