# Shared setup for agent-run's shell tests, on tests/lib.sh (the temp dir, PY, fail): the mock
# server, a task, assertions.
set -euo pipefail
: "${CA_BIN:?}" "${CA_SRC:?}"
source "$CA_SRC/tests/lib.sh"
HERE="$CA_SRC/tests/agent-run"
TMP=$T
MOCK_PID=
# AGENT_RUN_KEEP=DIR keeps the temp dir's files for a look afterwards.
at_exit '[ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null'
at_exit '[ -n "${AGENT_RUN_KEEP:-}" ] && cp -r "$TMP"/. "$AGENT_RUN_KEEP"/ 2>/dev/null'

# A small task record (KernelBench form).
cat > "$TMP/task.jsonl" <<'JSON'
{"task_id": "t-scale-add", "code": "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, a, b):\n        return a * 2.0 + b\n\ndef get_inputs():\n    return [torch.randn(4096), torch.randn(4096)]\n\ndef get_init_inputs():\n    return []\n"}
JSON

# start_mock SCRIPT: starts the mock server, sets PORT.
start_mock() {
  "$PY" "$HERE/mock_openai.py" "$1" "$TMP/port" "$TMP/requests.jsonl" 2>"$TMP/mock.err" &
  MOCK_PID=$!
  for _ in $(seq 100); do [ -s "$TMP/port" ] && break; sleep 0.1; done
  [ -s "$TMP/port" ] || fail "mock server did not start: $(cat "$TMP/mock.err")"
  PORT=$(cat "$TMP/port")
}

# py 'python code' FILE: runs assertions over a JSON Lines file (records in `recs`).
py() {
  "$PY" - "$2" <<PYEOF || fail "assertions failed"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
$1
PYEOF
}

# add_rewards IN OUT: rewards as reward-calc would give them to episodes without a kernel to check,
# alternating 3 and 0 so group-normalized advantages are not zero.
add_rewards() {
  "$PY" - "$1" > "$2" <<'PYEOF'
import json, sys
for i, l in enumerate(open(sys.argv[1])):
    r = json.loads(l)
    r["reward"] = {"value": [3, 0][i % 2], "scheme": "milestone", "reason": "test"}
    print(json.dumps(r))
PYEOF
}
