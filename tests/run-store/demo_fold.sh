#!/usr/bin/env bash
# The demo's stages as a user runs them (examples/pipeline.sh tasks candidates check, CPU path):
# agent-run's locked compile/verify calls, each its own kernel-check run, are folded into the
# episode's run, so summary shows the import, agent-run and kernel-check once each (it printed 19 rows
# for the 8 tasks before), and report counts the demo's 8 tasks by level.
# Needs agent-run and kernel-check built next to run-store; without them it says so and exits 77.
set -euo pipefail
RS="$CA_BIN/run-store"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in agent-run kernel-check; do
  if [ ! -x "$CA_BIN/$tool" ]; then
    echo "SKIP: $CA_BIN/$tool is not built (cmake --build build --target $tool)" >&2
    exit 77
  fi
done

CA_FORCE_CPU=1 CA_OUT="$T" bash "$CA_SRC/examples/pipeline.sh" tasks candidates check 2> "$T/pipeline.err" \
  || fail "pipeline.sh: $(tail -5 "$T/pipeline.err")"
"$RS" summary --store "$T/run.db" --json > "$T/summary.jsonl"
python3 - "$T/summary.jsonl" "$T/candidates.jsonl" <<'PY' || fail "summary of the demo: $(cat "$T/summary.jsonl")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# The locked calls the episodes made: each compile or verify is one kernel-check run; on the CPU path
# nothing passes, so a profile call is one kernel-check run too and no kernel-prof runs.
calls = 0
for line in open(sys.argv[2]):
    by_tool = json.loads(line)["episode"]["counts"]["calls_by_tool"]
    calls += sum(by_tool.get(t, 0) for t in ("compile", "verify", "profile"))
assert calls >= 8, calls
assert [r["tool"] for r in rows] == ["run-store", "agent-run", "kernel-check"], [r["tool"] for r in rows]
agent = rows[1]
assert agent["episodes"] == 8 and agent["locked_calls"] == calls and agent["locked_checks"] == calls, (agent, calls)
assert rows[2]["checks"] == 8 and rows[2]["locked_calls"] == 0, rows[2]
PY
"$RS" summary --store "$T/run.db" --table > "$T/table.txt"
[ "$(wc -l < "$T/table.txt")" = 4 ] || fail "summary --table: $(cat "$T/table.txt")"
"$RS" report --store "$T/run.db" --json 2>/dev/null | python3 -c '
import json, sys
rows = {r["level"]: r for r in map(json.loads, sys.stdin)}
assert {k: r["tasks"] for k, r in rows.items()} == {"cuda-agent-demo#1": 4, "cuda-agent-demo#2": 3, "cuda-agent-demo#3": 1, "all": 8}, rows
# compile-only checks verify nothing: no task passed.
assert rows["all"]["passed"] == 0 and rows["all"]["pass_rate"] == 0.0, rows["all"]
' || fail "report of the demo"
echo "run_store_demo_fold: ok"
