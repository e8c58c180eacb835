#!/bin/bash
# Progress on a terminal (issue 18): with stderr a terminal (a pseudo-terminal here) the long stages
# draw "done/total unit, rate, time left" on one line, redrawn in place and cleared at the end; with
# stderr a file or a pipe they print no such line at all. Checked on agent-run (episodes), ppo-step's
# record loop (tokenize; the loop kernel-prof and reward-calc share) and a ppo-step training step.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
tmp=$T
demo=$CA_SRC/datasets/demo
export CA_KERNEL_CHECK="$CA_SRC/tests/agent-run/fake-kernel-check.sh" CA_KERNEL_PROF="$CA_SRC/tests/agent-run/fake-kernel-prof.sh"

# on_tty OUT CMD...: runs CMD with stdin, stdout and stderr on a pseudo-terminal (stdout redirected
# by CMD itself), writes everything the terminal showed to OUT; exits with CMD's status.
on_tty() {
  local out=$1; shift
  "$PY" - "$out" "$@" <<'PY'
import os, pty, sys
out = open(sys.argv[1], "wb")
def read(fd):
    data = os.read(fd, 65536)
    out.write(data)
    return data
status = pty.spawn(["bash", "-c", sys.argv[2]], read)
sys.exit(os.waitstatus_to_exitcode(status))
PY
}

# agent-run: 8 tasks from a file, so the total is known.
on_tty "$tmp/agent.tty" "'$CA_BIN/agent-run' --policy 'replay:$demo/replay.jsonl' --tasks '$demo/tasks.jsonl' --no-store \
  --max-turns 20 --seed 1 > '$tmp/episodes.jsonl'" || fail "agent-run on a terminal"
[ "$(wc -l < "$tmp/episodes.jsonl")" = 8 ] || fail "agent-run wrote $(wc -l < "$tmp/episodes.jsonl") records, not 8"
"$CA_BIN/agent-run" --policy "replay:$demo/replay.jsonl" --tasks "$demo/tasks.jsonl" --no-store --max-turns 20 --seed 1 \
  > /dev/null 2> "$tmp/agent.err"

cat > "$tmp/model.json" <<'JSON'
{"model_type": "qwen2", "vocab_size": 320, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
 "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
"$CA_BIN/ppo-step" init --model-config "$tmp/model.json" --out "$tmp/p0" --seed 3 -q
cp "$CA_SRC/tests/nn_cuda/fixtures/tokenizer.json" "$tmp/p0/"
on_tty "$tmp/tokenize.tty" "'$CA_BIN/ppo-step' tokenize --policy '$tmp/p0' --no-store -i '$tmp/episodes.jsonl' > '$tmp/tokens.jsonl'" \
  || fail "ppo-step tokenize on a terminal"
"$CA_BIN/ppo-step" tokenize --policy "$tmp/p0" --no-store -i "$tmp/episodes.jsonl" > /dev/null 2> "$tmp/tokenize.err"
"$PY" - "$tmp/episodes.jsonl" > "$tmp/rewarded.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]).readlines()[:2]:   # two episodes: the CPU trainer takes seconds per sequence
    r = json.loads(l); r["reward"] = {"value": 3, "scheme": "milestone"}; print(json.dumps(r))
PY
on_tty "$tmp/train.tty" "'$CA_BIN/ppo-step' --mode rft --policy '$tmp/p0' --out '$tmp/p1' --no-store -i '$tmp/rewarded.jsonl' > '$tmp/m.jsonl'" \
  || fail "ppo-step --mode rft on a terminal"
"$CA_BIN/ppo-step" --mode rft --policy "$tmp/p0" --out "$tmp/p2" --no-store -i "$tmp/rewarded.jsonl" > /dev/null 2> "$tmp/train.err"

"$PY" - "$tmp" <<'PY' || fail "progress assertions"
import re, sys
tmp = sys.argv[1]
def check(name, tool, unit, total):
    tty = open("%s/%s.tty" % (tmp, name), "rb").read().decode("utf-8", "replace")
    lines = re.findall(r"\r%s: (\d+)/(\d+) %s, [0-9.]+/s(?:, (\d+:\d\d) left)?\x1b\[K" % (tool, unit), tty)
    assert lines, "%s: no progress line on the terminal: %r" % (name, tty[-600:])
    assert all(int(t) == total for _, t, _ in lines), (name, lines)
    assert int(lines[0][0]) >= 1 and all(int(d) <= total for d, _, _ in lines), (name, lines)
    # Cleared at the end: after the last progress line comes the erase, before the summary line.
    last = tty.rfind("\r%s: " % tool + lines[-1][0] + "/")
    assert "\r\x1b[K" in tty[last:], (name, "not cleared", tty[last:last + 300])
    err = open("%s/%s.err" % (tmp, name), "rb").read().decode("utf-8", "replace")
    assert "\r" not in err and "\x1b" not in err, (name, "a progress line on a stderr that is not a terminal", err[:300])
    assert err.strip(), (name, "the summary line is still there")
    print("%s: %d progress line(s) on the terminal (%s), none in a file" % (name, len(lines), lines[-1][0] + "/" + lines[-1][1]))
check("agent", "agent-run", "episodes", 8)
check("tokenize", "ppo-step", "records", 8)
check("train", "ppo-step", "sequence passes", 2)
PY
echo "progress: ok"
