#!/usr/bin/env bash
# bench/kernelbench/compare.py on made-up records of both judges: the counts of its JSON line, a
# candidate that both pass with the same reward, one the toolchain failed in kernel-prof's checked
# timed calls after kernel-check passed it (its row says prof_failed, and the reason shown is
# kernel-prof's, not the check's "all 6 calls match"), and a task verdict counted apart.
set -u
. "$(dirname "$0")/../lib.sh"
cat > "$T/cands.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "name": "level1/ok"}
{"task_id": "t2", "candidate_id": "c2", "name": "level2/prof"}
{"task_id": "t3", "candidate_id": "c3", "name": "level3/task"}
J
cat > "$T/tc.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "check": {"status": "passed", "reason": "all 6 calls match the reference"}, "prof": {"status": "timed", "correct": true, "time_us": {"median": 10.0}}, "reward": {"value": 2}}
{"task_id": "t2", "candidate_id": "c2", "check": {"status": "passed", "reason": "all 6 calls match the reference"}, "prof": {"status": "failed", "correct": false, "reason": "checked call 12: outputs.0[3]: expected 0.25, got 0.3"}, "reward": {"value": -1}}
{"task_id": "t3", "candidate_id": "c3", "check": {"status": "task_insensitive", "reason": "the reference is the same for other inputs"}}
J
cat > "$T/judge.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "judge": {"status": "passed", "reward": 2, "time_us": {"median": 11.0}}}
{"task_id": "t2", "candidate_id": "c2", "judge": {"status": "passed", "reward": 3, "time_us": {"median": 5.0}}}
{"task_id": "t3", "candidate_id": "c3", "judge": {"status": "passed", "reward": 1}}
J
"$PY" "$CA_SRC/bench/kernelbench/compare.py" "$T/tc.jsonl" "$T/judge.jsonl" --cands "$T/cands.jsonl" \
  --toolchain-wall 7 --judge-wall 5 > "$T/out.txt" 2> "$T/err.txt" || fail "compare.py exited $?: $(tail -3 "$T/err.txt")"
grep -q '^level2/prof  *prof_failed  *passed  *DIFFER' "$T/out.txt" || fail "no prof_failed row: $(cat "$T/out.txt")"
grep -q 'tc: checked call 12: outputs.0\[3\]' "$T/out.txt" || fail "the prof_failed row's reason is not kernel-prof's: $(cat "$T/out.txt")"
grep -q 'tc: all 6 calls match' "$T/out.txt" && fail "a passed check's reason shown for a prof failure"
"$PY" - "$T/out.txt" <<'PY' || fail "the JSON line's counts"
import json, sys
j = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
want = {"candidates": 3, "verdicts_agree": 1, "rewards_agree": 1, "rewards_differ": 1, "task_unusable": 1,
        "toolchain_passed": 1, "judge_passed": 2, "toolchain_wall_s": 7.0, "judge_wall_s": 5.0}
bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
assert not bad, bad
PY
pass "compare.py: counts, prof_failed with kernel-prof's reason, task verdicts apart"
