#!/usr/bin/env bash
# Every tool in bin/: --help exits 0 with an example, --version names the git revision, a bad flag
# exits 1, and its man page renders without warnings.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
tools=(run-store ops-synth agent-run kernel-check kernel-prof reward-calc ppo-step)
found=0
for t in "${tools[@]}"; do
  exe="$CA_BIN/$t"
  [ -x "$exe" ] || continue
  found=$((found + 1))
  "$exe" --help > /tmp/help.$$ || fail "$t --help exit $?"
  grep -q "Example" /tmp/help.$$ || fail "$t --help has no example"
  "$exe" --version | grep -q "git" || fail "$t --version lacks the git revision"
  set +e; "$exe" --no-such-flag >/dev/null 2>&1; rc=$?; set -e
  [ "$rc" = 1 ] || fail "$t with a bad flag should exit 1, got $rc"
  page="$CA_SRC/man/$t.1"
  [ -f "$page" ] || fail "$t has no man page man/$t.1"
  warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null || true)
  [ -z "$warnings" ] || fail "man/$t.1 renders with warnings: $warnings"
done
rm -f /tmp/help.$$
[ "$found" -ge 1 ] || fail "no tools found in $CA_BIN"
MANWIDTH=80 man -l "$CA_SRC/man/cuda-agent.7" | grep -q "RECORDS" || fail "cuda-agent(7)"

# A reader that stops early (DESIGN.md's `... | head -n 6000`) is not a failure: the tool stops at
# once, says so on stderr and exits 0, so `set -o pipefail` pipelines pass; the lines it did write are
# whole. A tool with no worker children (ops-synth generate), reward-calc over many records, and
# agent-run, which writes from its episode threads (no crash, no new episodes).
P=/tmp/pipe.$$
# into_head N INPUT TOOL ARGS...: TOOL < INPUT | head -n N under pipefail; its exit status; stderr in $P.err
into_head() {
  local n=$1 input=$2 rc
  shift 2
  set +e
  ( set -o pipefail; "$@" < "$input" 2> "$P.err" | head -n "$n" > "$P.out" )
  rc=$?
  set -e
  return $rc
}
if [ -x "$CA_BIN/ops-synth" ]; then
  into_head 3 /dev/null "$CA_BIN/ops-synth" generate -n 20000 --sizes tiny --no-store \
    || fail "ops-synth generate | head -n 3 under pipefail: exit $?: $(cat "$P.err")"
  [ "$(wc -l < "$P.out")" = 3 ] || fail "head got $(wc -l < "$P.out") lines"
  grep -q "output closed by its reader" "$P.err" || fail "no message about the closed output: $(cat "$P.err")"
  if [ -x "$CA_BIN/reward-calc" ]; then
    "$CA_BIN/ops-synth" generate -n 3000 --sizes tiny --no-store 2>/dev/null > "$P.in"
    into_head 2 "$P.in" "$CA_BIN/reward-calc" --no-store -q || fail "reward-calc | head -n 2 under pipefail: exit $?"
  fi
  if [ -x "$CA_BIN/agent-run" ]; then
    echo '{"content": "Nothing to do."}' > "$P.script"
    python3 -c '
import json
for i in range(60):
    print(json.dumps({"code": "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a):\n        return a * %d.0\n"
                      "def get_inputs():\n    return [torch.randn(8)]\n" % i}))' > "$P.in"
    into_head 1 "$P.in" "$CA_BIN/agent-run" --policy "replay:$P.script" --no-store -j 2 \
      || fail "agent-run | head -n 1 under pipefail: exit $?: $(tail -3 "$P.err")"
    grep -q "output closed by its reader" "$P.err" || fail "agent-run: no note about the closed output"
    n=$(grep -c "episode [0-9]*: done" "$P.err" || true)
    [ "$n" -lt 60 ] || fail "agent-run ran all 60 episodes after its output was closed"
  fi
  rm -f "$P".*
fi
echo "tools_common: $found tools ok"
