#!/usr/bin/env bash
# bench/kernelbench/compare.py on made-up records of both judges: the counts of its JSON line, a
# candidate that both pass with the same reward, one the toolchain failed in kernel-prof's checked
# timed calls after kernel-check passed it (its row says prof_failed, and the reason shown is
# kernel-prof's, not the check's "all 6 calls match"), a task verdict counted apart, and one whose
# judge record has a reward on busy time (the toolchain's metric) beside the one on events: the
# reward is compared on busy time, the events column apart.
set -u
. "$(dirname "$0")/../lib.sh"
cat > "$T/cands.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "name": "level1/ok"}
{"task_id": "t2", "candidate_id": "c2", "name": "level2/prof"}
{"task_id": "t3", "candidate_id": "c3", "name": "level3/task"}
{"task_id": "t4", "candidate_id": "c4", "name": "level3/gaps"}
J
cat > "$T/tc.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "check": {"status": "passed", "reason": "all 6 calls match the reference"}, "prof": {"status": "timed", "correct": true, "time_us": {"median": 10.0}}, "reward": {"value": 2}}
{"task_id": "t2", "candidate_id": "c2", "check": {"status": "passed", "reason": "all 6 calls match the reference"}, "prof": {"status": "failed", "correct": false, "reason": "checked call 12: outputs.0[3]: expected 0.25, got 0.3"}, "reward": {"value": -1}}
{"task_id": "t3", "candidate_id": "c3", "check": {"status": "task_insensitive", "reason": "the reference is the same for other inputs"}}
{"task_id": "t4", "candidate_id": "c4", "check": {"status": "passed"}, "prof": {"status": "timed", "correct": true, "time_us": {"median": 1700.0}, "baselines": {"eager": {"time_us": {"median": 1725.0}}}}, "reward": {"value": 1}}
J
cat > "$T/judge.jsonl" <<'J'
{"task_id": "t1", "candidate_id": "c1", "judge": {"status": "passed", "reward": 2, "time_us": {"median": 11.0}}}
{"task_id": "t2", "candidate_id": "c2", "judge": {"status": "passed", "reward": 3, "time_us": {"median": 5.0}}}
{"task_id": "t3", "candidate_id": "c3", "judge": {"status": "passed", "reward": 1}}
{"task_id": "t4", "candidate_id": "c4", "judge": {"status": "passed", "reward": 3, "time_us": {"median": 1790.0}, "baselines": {"eager": {"median": 8095.0}}, "reward_busy": 1, "busy_us": {"median": 1690.0}, "busy_baselines": {"eager": {"median": 1722.0}}}}
J
"$PY" "$CA_SRC/bench/kernelbench/compare.py" "$T/tc.jsonl" "$T/judge.jsonl" --cands "$T/cands.jsonl" \
  --toolchain-wall 7 --judge-wall 5 > "$T/out.txt" 2> "$T/err.txt" || fail "compare.py exited $?: $(tail -3 "$T/err.txt")"
grep -q '^level2/prof  *prof_failed  *passed  *DIFFER' "$T/out.txt" || fail "no prof_failed row: $(cat "$T/out.txt")"
grep -q 'tc: checked call 12: outputs.0\[3\]' "$T/out.txt" || fail "the prof_failed row's reason is not kernel-prof's: $(cat "$T/out.txt")"
grep -q 'tc: all 6 calls match' "$T/out.txt" && fail "a passed check's reason shown for a prof failure"
grep -q '^level3/gaps  *passed  *passed  *agree  *1  *1  *agree  *3  *DIFFER  *1700.0  *1690.0  *1725.0  *1722.0 ' "$T/out.txt" \
  || fail "the busy-time row: $(grep gaps "$T/out.txt")"
"$PY" - "$T/out.txt" <<'PY' || fail "the JSON line's counts"
import json, sys
j = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
want = {"candidates": 4, "verdicts_agree": 2, "rewards_agree": 2, "rewards_differ": 1, "events_agree": 1,
        "events_differ": 2, "task_unusable": 1, "toolchain_passed": 2, "judge_passed": 3, "toolchain_wall_s": 7.0,
        "judge_wall_s": 5.0}
bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k) != v}
assert not bad, bad
PY
pass "compare.py: counts, prof_failed with kernel-prof's reason, task verdicts apart, busy and event rewards"
