#!/bin/bash
# A served policy gets each new checkpoint before sampling: agent-run --load-weights DIR posts SGLang's
# /update_weights_from_disk {"model_path": DIR} to the scripted server on loopback before any
# episode; the completions after it are served from DIR (the server logs the weights it served each
# request with) and the episode records name DIR. A server that refuses, or lacks the endpoint, is an
# environment error (exit 3) before any episode: sampling the old weights would train the wrong policy.
source "$CA_SRC/tests/agent-run/lib.sh"
mkdir -p "$TMP/step-1" "$TMP/step-2"
echo '{"model_type": "qwen2"}' > "$TMP/step-1/config.json"
echo '{"model_type": "qwen2"}' > "$TMP/step-2/config.json"
start_mock "$HERE/scripts/reload.json"
for step in step-1 step-2; do
  "$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --load-weights "$TMP/$step" --no-store \
    --tasks "$TMP/task.jsonl" --seed 1 --retry-base 0.05 > "$TMP/$step.jsonl" 2> "$TMP/err.txt" \
    || { cat "$TMP/err.txt"; fail "agent-run --load-weights $step"; }
  grep -q "the server loaded $TMP/$step" "$TMP/err.txt" || fail "no note of the reload on stderr: $(cat "$TMP/err.txt")"
done
"$PY" - "$TMP/requests.jsonl" "$TMP" <<'PY' || fail "reload assertions"
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
tmp = sys.argv[2]
reloads = [e for e in log if e["path"] == "/update_weights_from_disk"]
chats = [e for e in log if e["path"].endswith("/chat/completions")]
assert [r["body"]["model_path"] for r in reloads] == [tmp + "/step-1", tmp + "/step-2"], reloads
assert all(r["status"] == 200 for r in reloads), reloads
assert len(chats) == 4, [e["path"] for e in log]
# Every completion came after its run's reload and from the weights it loaded.
for c, want in zip(chats, ["step-1", "step-1", "step-2", "step-2"]):
    assert c["weights"] == tmp + "/" + want, (c["n"], c["weights"], want)
first, second = reloads
assert first["n"] < chats[0]["n"] and chats[1]["n"] < second["n"] < chats[2]["n"], [(e["n"], e["path"]) for e in log]
for step in ("step-1", "step-2"):
    recs = [json.loads(l) for l in open("%s/%s.jsonl" % (tmp, step))]
    assert len(recs) == 1 and recs[0]["episode"]["policy"]["weights"] == tmp + "/" + step, recs[0]["episode"]["policy"]
    assert recs[0]["episode"]["stop_reason"] == "done", recs[0]["episode"]["stop_reason"]
print("reload: %d reloads, completions served from %s" % (len(reloads), [c["weights"][len(tmp) + 1:] for c in chats]))
PY
# A folder the server cannot load: exit 3, nothing sampled, nothing written.
set +e
n_before=$(wc -l < "$TMP/requests.jsonl")
"$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --load-weights "$TMP/missing" --no-store \
  --tasks "$TMP/task.jsonl" > "$TMP/o.jsonl" 2> "$TMP/err.txt"; rc=$?
[ $rc = 3 ] && [ ! -s "$TMP/o.jsonl" ] || fail "--load-weights of a missing folder: rc $rc, $(wc -l < "$TMP/o.jsonl") records"
grep -q "did not load $TMP/missing" "$TMP/err.txt" || fail "the refusal is not named: $(cat "$TMP/err.txt")"
[ "$(tail -n +$((n_before + 1)) "$TMP/requests.jsonl" | grep -c chat/completions)" = 0 ] || fail "sampled after a refused reload"
# HTTP 200 with a "success" that is not true (null, "true"): not loaded, exit 3 (it was exit 4, an
# internal error, from the JSON library's type check).
for answer in '{"success": null}' '{"success": "true"}'; do
  mkdir -p "$TMP/odd" && echo '{"model_type": "qwen2"}' > "$TMP/odd/config.json" && echo "$answer" > "$TMP/odd/answer.json"
  "$CA_BIN/agent-run" --policy "openai:http://127.0.0.1:$PORT/v1" --load-weights "$TMP/odd" --no-store \
    --tasks "$TMP/task.jsonl" > "$TMP/o.jsonl" 2> "$TMP/err.txt"; rc=$?
  [ $rc = 3 ] && [ ! -s "$TMP/o.jsonl" ] || fail "--load-weights answered $answer: rc $rc, $(wc -l < "$TMP/o.jsonl") records"
  grep -q "did not load $TMP/odd" "$TMP/err.txt" || fail "the odd answer $answer is not named: $(cat "$TMP/err.txt")"
done
# --load-weights with a policy that is not served: a usage error.
"$CA_BIN/agent-run" --policy "replay:$TMP/none.jsonl" --load-weights "$TMP/step-1" --no-store --tasks "$TMP/task.jsonl" \
  > /dev/null 2> "$TMP/err.txt"; rc=$?
[ $rc = 1 ] || fail "--load-weights with replay: rc $rc"
set -e
echo "reload: ok"
