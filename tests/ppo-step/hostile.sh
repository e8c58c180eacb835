#!/usr/bin/env bash
# Exit 0 means what it says: hostile and broken inputs to ppo-step end with the right exit code and a
# message naming the file, key or record, and never with a checkpoint that is empty, cut, non-finite
# or mixed with an earlier one's weights.
# Tokenizer ids < 0 or >= 2^22 (2^32 wrapped to 0); config sizes and token ids past 32 bits; a token
# id past the vocabulary (that record left out, named); an all-NaN policy; a step that diverges; a
# stale weight file in --out or in a checkpoint; a config of 10^9 hidden units or 100,000 layers
# (refused before allocating, under a 3 GB address-space limit); a full disk (ulimit -f).
source "$(dirname "$0")/lib.sh"
cd "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect CODE PATTERN CMD...: runs CMD, asserts its exit code and that stderr matches PATTERN.
expect() {
  local want=$1 pattern=$2 rc=0
  shift 2
  "$@" > out.txt 2> err.txt || rc=$?
  [ "$rc" = "$want" ] || fail "$* exited $rc, expected $want: $(tail -3 err.txt)"
  grep -qE -- "$pattern" err.txt || fail "$*: stderr does not match '$pattern': $(tail -3 err.txt)"
}
ep() {  # ep ID TOKENS...: an rft episode (user turn 1 2, then the assistant's tokens)
  local id=$1; shift
  local ids; ids=$(IFS=,; echo "$*")
  printf '{"task_id":"%s","reward":1,"episode":{"turns":[{"role":"user","token_ids":[1,2]},{"role":"assistant","token_ids":[%s]}]}}\n' "$id" "$ids"
}

$PPO init --model-config "$HERE/toy_model.json" --out policy --seed 3 -q
{ ep a 3 4; ep b 5 6 7; } > good.jsonl

# --- Tokenizer ids: a negative id wrote out of bounds; 2^32 wrapped to 0. Refused naming the key.
mk_tok() {  # mk_tok DIR VOCAB_JSON [ADDED_JSON]
  mkdir -p "$1"; cp policy/config.json policy/model.safetensors "$1/"
  printf '{"model":{"type":"BPE","vocab":%s,"merges":[]},"added_tokens":%s,"pre_tokenizer":{"type":"ByteLevel"}}\n' \
    "$2" "${3:-[]}" > "$1/tokenizer.json"
}
mk_tok tneg '{"a":0,"b":-1}'
expect 2 "model.vocab\['b'\] is -1" $PPO --mode rft --policy tneg --out o1 --no-store < good.jsonl
mk_tok t32 '{"a":0,"b":4294967296}'
expect 2 "model.vocab\['b'\] is 4294967296" $PPO --mode rft --policy t32 --out o1 --no-store < good.jsonl
mk_tok tbig '{"a":0,"b":2147483647}'
expect 2 "model.vocab\['b'\] is 2147483647" $PPO --mode rft --policy tbig --out o1 --no-store < good.jsonl
mk_tok tadd '{"a":0}' '[{"content":"<x>","id":18446744073709551615,"special":true}]'
expect 2 "added_tokens\[0\].id is 18446744073709551615" $PPO --mode rft --policy tadd --out o1 --no-store < good.jsonl
[ ! -e o1 ] || fail "a refused tokenizer still wrote a checkpoint"

# --- Mistyped settings in tokenizer.json and config.json: bad input naming the file and the key (a
# type_error from the JSON library ended these as internal errors, exit 4).
mkdir -p tmis && cp policy/config.json policy/model.safetensors tmis/
for t in '"ignore_merges":1}}|model: ignore_merges: expected a boolean' \
         '"merges":[[1,2]]}}|model.merges entry 0 is neither' \
         '"merges":[]},"pre_tokenizer":{"type":7}}|pre_tokenizer: type: expected a string' \
         '"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[3]}}|a pre-tokenizer step is not an object' \
         '"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":5}}}|pre_tokenizer \(Split\): pattern.Regex: expected a string'; do
  printf '{"model":{"type":"BPE","vocab":{"a":0},%s\n' "${t%%|*}" > tmis/tokenizer.json
  expect 2 "tmis/tokenizer.json': ${t#*|}" $PPO --mode rft --policy tmis --out o1 --no-store < good.jsonl
done
for c in '"model_type": 5|model_type: expected a string, got number 5' '"tie_word_embeddings": "yes"|tie_word_embeddings: expected a boolean' \
         '"rope_parameters": {"rope_type": 1}|rope_parameters: rope_type: expected a string'; do
  $PY - "$HERE/toy_model.json" "{${c%%|*}}" <<'PY' > mistyped.json
import json, sys; c = json.load(open(sys.argv[1])); c.update(json.loads(sys.argv[2])); print(json.dumps(c))
PY
  expect 2 "${c#*|}" $PPO init --model-config mistyped.json --out o2 -q
done
echo '[1]' > mistyped.json
expect 2 "not a JSON object" $PPO init --model-config mistyped.json --out o2 -q

# --- Config sizes past 32 bits: 2^32 + 5 must not train as 5.
$PY - "$HERE/toy_model.json" <<'PY' > big_vocab.json
import json, sys; c = json.load(open(sys.argv[1])); c["vocab_size"] = 2**32 + 5; print(json.dumps(c))
PY
expect 2 "'vocab_size' is 4294967301, outside 32 bits" $PPO init --model-config big_vocab.json --out o2 -q
mkdir -p p32 && cp policy/model.safetensors p32/ && cp big_vocab.json p32/config.json
expect 2 "p32/config.json': 'vocab_size' is 4294967301" $PPO --mode rft --policy p32 --out o2 --no-store < good.jsonl
[ ! -e o2 ] || fail "a refused config still wrote a checkpoint"

# --- Token ids: past 32 bits (2^32 + 5 trained as 5), past the vocabulary (8): that record is bad and
# named by its line; the others train. --strict makes it fatal.
{ ep a 3 4; ep wide 3 4294967301; ep b 5 6; ep past 3 8; } > ids.jsonl
expect 0 "line 2: episode.turns\[1\].token_ids\[1\]: token id 4294967301 does not fit 32 bits" \
  $PPO --mode rft --policy policy --out o3 --no-store < ids.jsonl
grep -qE "line 4: episode.turns: token id 8 .*past the vocabulary of 'policy/config.json' \(vocab_size 8\)" err.txt \
  || fail "the record past the vocabulary is not named: $(cat err.txt)"
$PY -c 'import json,sys; m = json.load(open("out.txt")); assert m["episodes"] == 2 and m["bad_records"] == 2, m' \
  || fail "metrics: $(cat out.txt)"
expect 2 "line 2: episode.turns\[1\].token_ids\[1\]" $PPO --mode rft --policy policy --out o4 --no-store --strict < ids.jsonl
[ ! -e o4 ] || fail "--strict failure still wrote a checkpoint"

# --- An all-NaN policy: refused at load naming the tensor, never trained to exit 0.
mkdir -p pnan && cp policy/config.json pnan/
$PY - policy/model.safetensors pnan/model.safetensors <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
data = bytearray(raw[8 + n:])
nan = struct.pack("<f", float("nan"))
for i in range(0, len(data), 4): data[i:i + 4] = nan
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
expect 2 "checkpoint 'pnan': tensor '[a-z_.0-9]+' element 0 is nan" $PPO --mode rft --policy pnan --out o5 --no-store < good.jsonl
[ ! -e o5 ] || fail "a NaN policy wrote a checkpoint"

# --- A step that diverges (lr 1e38: the weights overflow): an error naming the step, no checkpoint.
printf 'rft:\n  lr: 1.0e+38\n  epochs: 6\n  grad_clip: 0\n' > diverge.yaml
expect 2 "step 1: .*(not finite|non-finite)" $PPO --mode rft --policy policy --out o6 --config diverge.yaml --no-store < good.jsonl
[ ! -e o6 ] || fail "a diverged step wrote a checkpoint"
ls -a | grep -q "staging" && fail "a staging folder was left behind: $(ls -a)"

# --- A coefficient that is not finite (YAML's .nan, .inf) is refused at load naming the key (exit 1,
# as any bad --config value): a .nan gamma or lr passed every range check and failed only after a step.
printf 'algorithm:\n  gamma: .nan\n' > nan_gamma.yaml
expect 1 "nan_gamma.yaml: 'algorithm.gamma': bad value \(not a finite number\)" \
  $PPO --mode rft --policy policy --out o6 --config nan_gamma.yaml --no-store < good.jsonl
printf 'rft:\n  lr: .inf\n  betas: [0.9, .nan]\n' > inf_lr.yaml
expect 1 "inf_lr.yaml: 'rft.lr': bad value \(not a finite number\)" \
  $PPO --mode rft --policy policy --out o6 --config inf_lr.yaml --no-store < good.jsonl
[ ! -e o6 ] || fail "a non-finite coefficient wrote a checkpoint"

# --- A stale weight file in --out: the new checkpoint replaces the old folder whole.
$PPO init --model-config "$HERE/toy_model.json" --out o7 --seed 9 -q
cp o7/model.safetensors o7/zz-stale.safetensors
# Old weights in another format beside the policy are not carried into the new checkpoint either;
# its other files (a tokenizer's, a chat template) are.
cp -r policy pextra && echo old > pextra/pytorch_model.bin && echo '{}' > pextra/pytorch_model.bin.index.json
echo tmpl > pextra/chat_template.jinja
$PPO --mode rft --policy pextra --out o7 --no-store -q < good.jsonl > /dev/null
[ ! -e o7/zz-stale.safetensors ] || fail "the stale weight file survived in --out: $(ls o7)"
[ ! -e o7/pytorch_model.bin ] && [ ! -e o7/pytorch_model.bin.index.json ] || fail "old .bin weights were copied: $(ls o7)"
[ "$(cat o7/chat_template.jinja)" = tmpl ] || fail "the policy's other files were not copied: $(ls o7)"
cmp -s o7/model.safetensors policy/model.safetensors && fail "the step did not write new weights"
$PPO sample --policy o7 -n 1 --max-new-tokens 2 --seed 1 -q <<< '{"task_id":"a","prompt_token_ids":[0]}' > /dev/null \
  || fail "the new checkpoint does not load"
# A checkpoint folder holding a tensor in two files is refused at load, naming both.
mkdir -p pdup && cp policy/config.json policy/model.safetensors pdup/ && cp policy/model.safetensors pdup/model-extra.safetensors
expect 2 "tensor '[^']+' is in both '.*pdup/model-extra.safetensors' and '.*pdup/model.safetensors'" \
  $PPO --mode rft --policy pdup --out o8 --no-store < good.jsonl
# A non-empty --out that is not a checkpoint is never replaced (exit 1, before any work).
mkdir -p notckpt && echo keep > notckpt/notes.txt
expect 1 "'notckpt' exists and is not a checkpoint" $PPO --mode rft --policy policy --out notckpt --no-store < good.jsonl
[ "$(cat notckpt/notes.txt)" = keep ] || fail "a non-checkpoint --out was touched"
expect 1 "exists and is not a checkpoint" $PPO init --model-config "$HERE/toy_model.json" --out notckpt -q
# --out the current folder (or one holding it) would leave the process in a deleted folder.
cp -r policy here
(cd here && expect 1 "'.' is the current folder" $PPO --mode rft --policy . --out . --no-store < ../good.jsonl)
(cd here && expect 1 "'..' is the current folder, or holds it" $PPO --mode rft --policy . --out .. --no-store < ../good.jsonl)
cmp -s here/model.safetensors policy/model.safetensors || fail "a refused --out . changed the folder"

# --- Sizes refused before allocating: the process may not even reserve 3 GB.
$PY - "$HERE/toy_model.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
json.dump(dict(c, hidden_size=1000000000), open("huge_hidden.json", "w"))
json.dump(dict(c, num_hidden_layers=100000), open("many_layers.json", "w"))
PY
for cfg in huge_hidden many_layers; do
  mkdir -p "p_$cfg" && cp policy/model.safetensors "p_$cfg/" && cp "$cfg.json" "p_$cfg/config.json"
done
expect 2 "p_huge_hidden/config.json': the model has more than 2\^60 parameters \(.*hidden_size 1000000000" \
  bash -c "ulimit -v 3000000; exec $PPO --mode rft --policy p_huge_hidden --out o9 --no-store" < good.jsonl
mkdir -p p_wide && cp policy/model.safetensors p_wide/  # the file is 32 wide, its config says 64
$PY -c 'import json,sys; c = json.load(open(sys.argv[1])); c["hidden_size"] = 64; json.dump(c, open("p_wide/config.json", "w"))' \
  "$HERE/toy_model.json"
expect 2 "p_wide/model.safetensors': tensor 'model.embed_tokens.weight' has shape \[8,32\], '.*config.json' wants \[8,64\]" \
  $PPO --mode rft --policy p_wide --out o9 --no-store < good.jsonl
expect 2 "checkpoint 'p_many_layers': tensor 'model.layers.2.input_layernorm.weight' is missing" \
  bash -c "ulimit -v 3000000; exec $PPO --mode rft --policy p_many_layers --out o9 --no-store" < good.jsonl
expect 2 "huge_hidden.json': .*(GiB|2\^60 parameters)" bash -c "ulimit -v 3000000; exec $PPO init --model-config huge_hidden.json --out o9 -q"
expect 2 "many_layers.json': .*GiB" bash -c "ulimit -v 3000000; exec $PPO init --model-config many_layers.json --out o9 -q"
[ ! -e o9 ] || fail "a refused size wrote a checkpoint"

# --- What a writer killed mid-write left beside --out (kill -9, OOM, preemption: a staging folder the
# size of a checkpoint, each time) is removed by the next writer; a live writer's is left be, and an
# earlier checkpoint moved aside when --out is missing is put back.
true & dead=$!; wait $dead
mkdir -p ".o7.staging-$dead-0" ".o7.old-$dead-3" ".o7.staging-$$-0"
echo junk > ".o7.staging-$dead-0/model.safetensors"
$PPO --mode rft --policy policy --out o7 --no-store -q < good.jsonl > /dev/null || fail "a step beside leftovers"
[ ! -e ".o7.staging-$dead-0" ] && [ ! -e ".o7.old-$dead-3" ] || fail "a dead writer's leftovers stay: $(ls -a)"
[ -d ".o7.staging-$$-0" ] || fail "a live writer's staging folder was removed"
rmdir ".o7.staging-$$-0"
mv o7 ".o7.old-$dead-5"
$PPO init --model-config "$HERE/toy_model.json" --out o7b -q  # another target: o7's leftovers are not its own
[ -d ".o7.old-$dead-5" ] || fail "a writer to another folder touched o7's leftovers"
$PPO --mode rft --policy policy --out o7 --no-store < good.jsonl > out.txt 2> err.txt || fail "a step over a moved-aside o7"
grep -q "put back the checkpoint 'o7'" err.txt || fail "the moved-aside checkpoint was not put back: $(cat err.txt)"
[ -f o7/config.json ] && [ ! -e ".o7.old-$dead-5" ] || fail "o7 not restored: $(ls -a)"

# --- A trainer state whose step is mistyped or negative: bad input naming the file and the key (any
# error here used to read "not JSON").
for st in '{"step": "3"}|step: expected an integer' '{"step": -4}|step -4 is negative' '{"step": |not JSON|parse'; do
  rm -rf ostate && cp -r o7 ostate && mkdir -p ostate/trainer_state && printf '%s\n' "${st%%|*}" > ostate/trainer_state/state.json
  expect 2 "ostate/trainer_state/state.json'.*(${st#*|})" $PPO --mode rft --policy ostate --out o11 --no-store < good.jsonl
done
[ ! -e o11 ] || fail "a refused trainer state still wrote a checkpoint"

# --- A full disk (EFBIG under ulimit -f, SIGXFSZ ignored as a full disk does not signal): exit 3,
# no checkpoint at all, and an earlier checkpoint at --out left as it was.
expect 3 "cannot write '.*': write failed: File too large" \
  bash -c "trap '' XFSZ; ulimit -f 4; exec $PPO --mode rft --policy policy --out o10 --no-store" < good.jsonl
[ ! -e o10 ] || fail "a failed write left a checkpoint: $(ls -R o10)"
ls -a | grep -q "staging" && fail "a staging folder was left behind: $(ls -a)"
cp -r o7 o7.before
expect 3 "File too large" bash -c "trap '' XFSZ; ulimit -f 4; exec $PPO --mode rft --policy policy --out o7 --no-store" < good.jsonl
diff -r o7 o7.before > /dev/null || fail "a failed step changed the earlier checkpoint at --out"
# --- A disk too small for the checkpoint init would write: exit 3 (the disk is short, not the config),
# the sizes in units people read (it said "need 0 GiB, more than the 0 GiB free", exit 2). A real
# small file system: a 64 KiB tmpfs in a private mount namespace, where the test may make one.
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir -p small
  rc=0
  unshare -m bash -c "mount -t tmpfs -o size=64k tmpfs small && exec $PPO init --model-config '$HERE/toy_model.json' --out small/o -q" \
    > out.txt 2> err.txt || rc=$?
  [ "$rc" = 3 ] || fail "init onto a 64 KiB disk exited $rc, expected 3: $(cat err.txt)"
  grep -qE "toy_model.json': 19232 parameters need 75\.1 KiB in F32, more than the 6[0-9.]+ KiB free on the disk of 'small/o'" err.txt \
    || fail "init onto a small disk: $(cat err.txt)"
else
  echo "note: no private tmpfs here (needs root and mount namespaces): init onto a small disk not tested"
fi
echo "ppo_step_hostile: ok"
