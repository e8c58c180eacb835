#!/usr/bin/env bash
# run-store report: the exact per-level numbers of a hand-written store (fixture/levels.jsonl, three
# levels), --select final against best, several stores read as one (and not written), the table,
# the JSON Schema, bad arguments (exit 1) and a missing or foreign store (exit 3 / 2).
set -euo pipefail
RS="$CA_BIN/run-store"
FIX="$CA_SRC/tests/run-store/fixture"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$RS" import --store "$T/all.db" -i "$FIX/levels.jsonl" 2> "$T/import.err" || fail "import of the fixture: $(cat "$T/import.err")"
"$RS" report --store "$T/all.db" --json > "$T/final.jsonl" 2> "$T/final.err"
"$RS" report "$T/all.db" --select best --json > "$T/best.jsonl" 2>/dev/null
grep -q "9 tasks in 3 levels, by the final candidate; 1 task without a candidate not counted" "$T/final.err" \
  || fail "stderr line: $(cat "$T/final.err")"

# The expected rows, worked out by hand from fixture/levels.jsonl (s_e, s_c: speedups of the
# selected candidate over eager and compile; pm: over the precision-matched baselines).
python3 - "$T/final.jsonl" "$T/best.jsonl" <<'PY'
import json, sys
def rows(path):
    return [json.loads(l) for l in open(path)]
final, best = rows(sys.argv[1]), rows(sys.argv[2])
cbrt = lambda x: x ** (1 / 3)

# --select final: each task by its episode's candidate.
#  level1: t1a c1a2 pass s_e 2.0 s_c 1.2 r 3 | t1b c1b2 pass 1.5/0.8 r 2 | t1c c1c1 fail r -1 |
#          t1d c1d1 pass 1.1/0.9, tf32 pm 0.8/0.6, r 2   (t9 has no candidate: not counted)
#  level2: t2a c2a1 pass 4.0/1.6, bf16 pm 2.0/1.25, r 3 | t2b c2b1 check passed, wrong when timed: fail, r -1 |
#          t2c c2c1 pass, not timed, no reward
#  torch#2: t3a c3a2 fail r -1 | t3b (no data_source, 2 ops) c3b1 pass 2.0/2.0 r 3
want_final = {
  "kernelbench#level1": dict(tasks=4, candidates=6, passed=3, pass_rate=3/4, timed=3,
      faster_than_eager=3/4, faster_than_compile=1/4, geomean_vs_eager=cbrt(2.0*1.5*1.1),
      geomean_vs_compile=cbrt(1.2*0.8*0.9), fast_1_0=1/4, fast_1_5=0.0, fast_2_0=0.0, rewards=4, reward_mean=6/4,
      timed_precision_matched=3, faster_than_eager_precision_matched=2/4, faster_than_compile_precision_matched=1/4,
      geomean_vs_eager_precision_matched=cbrt(2.0*1.5*0.8), geomean_vs_compile_precision_matched=cbrt(1.2*0.8*0.6),
      fast_1_0_precision_matched=1/4, fast_1_5_precision_matched=0.0, fast_2_0_precision_matched=0.0),
  "kernelbench#level2": dict(tasks=3, candidates=3, passed=2, pass_rate=2/3, timed=1,
      faster_than_eager=1/3, faster_than_compile=1/3, geomean_vs_eager=4.0, geomean_vs_compile=1.6,
      fast_1_0=1/3, fast_1_5=1/3, fast_2_0=0.0, rewards=2, reward_mean=1.0,
      timed_precision_matched=1, faster_than_eager_precision_matched=1/3, faster_than_compile_precision_matched=1/3,
      geomean_vs_eager_precision_matched=2.0, geomean_vs_compile_precision_matched=1.25,
      fast_1_0_precision_matched=1/3, fast_1_5_precision_matched=0.0, fast_2_0_precision_matched=0.0),
  "torch#2": dict(tasks=2, candidates=3, passed=1, pass_rate=1/2, timed=1,
      faster_than_eager=1/2, faster_than_compile=1/2, geomean_vs_eager=2.0, geomean_vs_compile=2.0,
      fast_1_0=1/2, fast_1_5=1/2, fast_2_0=0.0, rewards=2, reward_mean=1.0,
      timed_precision_matched=1, faster_than_eager_precision_matched=1/2, faster_than_compile_precision_matched=1/2,
      geomean_vs_eager_precision_matched=2.0, geomean_vs_compile_precision_matched=2.0,
      fast_1_0_precision_matched=1/2, fast_1_5_precision_matched=1/2, fast_2_0_precision_matched=0.0),
  "all": dict(tasks=9, candidates=12, passed=6, pass_rate=6/9, timed=5,
      faster_than_eager=5/9, faster_than_compile=3/9,
      geomean_vs_eager=(2.0*1.5*1.1*4.0*2.0) ** (1/5), geomean_vs_compile=(1.2*0.8*0.9*1.6*2.0) ** (1/5),
      fast_1_0=3/9, fast_1_5=2/9, fast_2_0=0.0, rewards=8, reward_mean=10/8,
      timed_precision_matched=5, faster_than_eager_precision_matched=4/9, faster_than_compile_precision_matched=3/9,
      geomean_vs_eager_precision_matched=(2.0*1.5*0.8*2.0*2.0) ** (1/5),
      geomean_vs_compile_precision_matched=(1.2*0.8*0.6*1.25*2.0) ** (1/5),
      fast_1_0_precision_matched=3/9, fast_1_5_precision_matched=1/9, fast_2_0_precision_matched=0.0),
}
# --select best: t1b by c1b1 (3.0/2.5, no reward) instead of c1b2; t3a by c3a1 (0.5/0.25, r 1) instead
# of the failed c3a2; t1c has no passing candidate, so its final one. level2 is the same.
want_best = {k: dict(v) for k, v in want_final.items()}
want_best["kernelbench#level1"].update(
    faster_than_compile=2/4, geomean_vs_eager=cbrt(2.0*3.0*1.1), geomean_vs_compile=cbrt(1.2*2.5*0.9),
    fast_1_0=2/4, fast_1_5=1/4, fast_2_0=1/4, rewards=3, reward_mean=4/3,
    faster_than_eager_precision_matched=2/4, faster_than_compile_precision_matched=2/4,
    geomean_vs_eager_precision_matched=cbrt(2.0*3.0*0.8), geomean_vs_compile_precision_matched=cbrt(1.2*2.5*0.6),
    fast_1_0_precision_matched=2/4, fast_1_5_precision_matched=1/4, fast_2_0_precision_matched=1/4)
want_best["torch#2"].update(
    passed=2, pass_rate=1.0, timed=2, faster_than_eager=1/2, faster_than_compile=1/2, geomean_vs_eager=(0.5*2.0) ** 0.5,
    geomean_vs_compile=(0.25*2.0) ** 0.5, fast_1_0=1/2, fast_1_5=1/2, rewards=2, reward_mean=2.0,
    timed_precision_matched=2, geomean_vs_eager_precision_matched=(0.5*2.0) ** 0.5,
    geomean_vs_compile_precision_matched=(0.25*2.0) ** 0.5)
want_best["all"].update(
    passed=7, pass_rate=7/9, timed=6, faster_than_eager=5/9, faster_than_compile=4/9,
    geomean_vs_eager=(2.0*3.0*1.1*4.0*0.5*2.0) ** (1/6), geomean_vs_compile=(1.2*2.5*0.9*1.6*0.25*2.0) ** (1/6),
    fast_1_0=4/9, fast_1_5=3/9, fast_2_0=1/9, rewards=7, reward_mean=(3-1+2+3-1+1+3)/7,
    timed_precision_matched=6, faster_than_eager_precision_matched=4/9, faster_than_compile_precision_matched=4/9,
    geomean_vs_eager_precision_matched=(2.0*3.0*0.8*2.0*0.5*2.0) ** (1/6),
    geomean_vs_compile_precision_matched=(1.2*2.5*0.6*1.25*0.25*2.0) ** (1/6),
    fast_1_0_precision_matched=4/9, fast_1_5_precision_matched=2/9, fast_2_0_precision_matched=1/9)

def check(got, want, select):
    assert [r["level"] for r in got] == list(want), [r["level"] for r in got]
    for r in got:
        assert r["schema"] == "cuda-agent/report/v1" and r["select"] == select, r
        for k, v in want[r["level"]].items():
            if isinstance(v, int):
                assert r[k] == v and isinstance(r[k], int), (select, r["level"], k, r[k], v)
            else:
                assert abs(r[k] - v) <= 1e-12 * max(1.0, abs(v)), (select, r["level"], k, r[k], v)
check(final, want_final, "final")
check(best, want_best, "best")
PY
[ $? = 0 ] || fail "report numbers"

# The rows follow schemas/report.schema.json.
for f in final best; do
  python3 "$CA_SRC/tests/validate_schema.py" report "$T/$f.jsonl" >/dev/null \
    || fail "--select $f rows do not validate against schemas/report.schema.json"
done

# Two shard stores read as one give what one store holds: level1's t1b has c1b1 in A and c1b2 (its
# episode's candidate) in B; the tasks are in both. Neither store is written.
grep -v '"candidate_id": "c1b2"' "$FIX/levels.jsonl" | grep -v '"task_id": "t[23]' > "$T/a.jsonl"
{ grep -v '"candidate_id"' "$FIX/levels.jsonl"; grep -E '"candidate_id": "(c1b2|c2|c3)' "$FIX/levels.jsonl"; } > "$T/b.jsonl"
"$RS" import --store "$T/A.db" -i "$T/a.jsonl" 2>/dev/null
"$RS" import --store "$T/B.db" -i "$T/b.jsonl" 2>/dev/null
# (The -wal/-shm files SQLite gives a reader of a WAL store are its own; the stores' bytes must not move.)
sums() { sha256sum "$T/A.db" "$T/B.db"; }
before=$(sums)
"$RS" report "$T/A.db" "$T/B.db" --json > "$T/ab.jsonl" 2>/dev/null
"$RS" report "$T/B.db" "$T/A.db" --select best --json > "$T/ba-best.jsonl" 2>/dev/null
[ "$(sums)" = "$before" ] || fail "report wrote to the stores it read"
cmp -s "$T/ab.jsonl" "$T/final.jsonl" || fail "A.db B.db read as one differ from one store: $(diff "$T/ab.jsonl" "$T/final.jsonl" | head -5)"
cmp -s "$T/ba-best.jsonl" "$T/best.jsonl" || fail "B.db A.db --select best differ from one store"
"$RS" merge "$T/merged.db" "$T/A.db" "$T/B.db" 2>/dev/null
"$RS" report "$T/merged.db" --json 2>/dev/null | cmp -s - "$T/final.jsonl" || fail "merged store differs from A+B read as one"

# The table (--table, or a terminal): both baseline families, the levels in natural order, rates in %.
"$RS" report --store "$T/all.db" --table > "$T/table.txt" 2>/dev/null
python3 - "$T/table.txt" <<'PY' || fail "table: $(cat "$T/table.txt")"
import sys
text = open(sys.argv[1]).read()
plain, matched = text.split("speedups over the precision-matched baselines")
assert plain.startswith("select: final"), text
for block in (plain, matched):
    lines = [l for l in block.splitlines() if l.strip() and not l.startswith("select:")]
    assert lines[0].split() == ["level", "tasks", "pass", ">eager", ">compile", "gm/eager", "gm/compile",
                                "fast_1.0", "fast_1.5", "fast_2.0", "r_mean"], lines[0]
    assert [l.split()[0] for l in lines[1:]] == ["kernelbench#level1", "kernelbench#level2", "torch#2", "all"], lines
    assert len({len(l) for l in lines}) == 1, "columns not aligned: %r" % lines
l1 = plain.splitlines()[2].split()
assert l1 == ["kernelbench#level1", "4", "75.0%", "75.0%", "25.0%", "1.489", "0.952", "25.0%", "0.0%", "0.0%", "1.500"], l1
l1m = [l for l in matched.splitlines() if l.startswith("kernelbench#level1")][0].split()
assert l1m[3:7] == ["50.0%", "25.0%", "1.339", "0.832"], l1m
PY

# Bad arguments: exit 1, and the message says what was wrong.
bad() {
  local want=$1 pattern=$2; shift 2
  set +e; "$RS" report "$@" > /dev/null 2> "$T/err"; local rc=$?; set -e
  [ "$rc" = "$want" ] || fail "report $* exited $rc, expected $want: $(cat "$T/err")"
  grep -q -- "$pattern" "$T/err" || fail "report $*: message lacks '$pattern': $(cat "$T/err")"
}
bad 1 "expected final or best" "$T/all.db" --select worst
bad 1 "exclude each other" "$T/all.db" --json --table
bad 1 "no-such-flag" "$T/all.db" --no-such-flag
bad 1 "html" "$T/all.db" --html
# A missing store: exit 3; a file that is not a run store: exit 2. Each named.
bad 3 "no store at '$T/missing.db'" "$T/missing.db"
bad 3 "no store at '$T/missing.db'" "$T/all.db" "$T/missing.db"
echo "not a database" > "$T/text.db"
bad 2 "'$T/text.db' is not a run store" "$T/text.db"
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE t (x)'); c.commit()" "$T/foreign.db"
bad 2 "'$T/foreign.db' is an SQLite file but not a cuda-agent run store" "$T/foreign.db"
# Levels in natural order (level2 before level10, torch#2 before torch#10); a task without data_source
# or ops is "unknown".
python3 -c '
import json
for i, src in enumerate(["torch#10", "kernelbench#level10", "torch#2", "kernelbench#level2", None]):
    task = {"task_id": "n%d" % i, "code": "#"}
    if src: task["data_source"] = src
    print(json.dumps(task))
    print(json.dumps({"task_id": "n%d" % i, "candidate_id": "m%d" % i, "check": {"status": "passed", "correct": True}}))
' > "$T/order.jsonl"
"$RS" import --store "$T/order.db" -i "$T/order.jsonl" 2>/dev/null
order=$("$RS" report "$T/order.db" --json 2>/dev/null | python3 -c 'import json, sys; print(" ".join(json.loads(l)["level"] for l in sys.stdin))')
[ "$order" = "kernelbench#level2 kernelbench#level10 torch#2 torch#10 unknown all" ] || fail "level order: $order"
# An empty store is not an error: no tasks, an "all" row of zeros.
"$RS" init --store "$T/empty.db" 2>/dev/null
"$RS" report "$T/empty.db" --json 2>/dev/null | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert len(rows) == 1 and rows[0]["level"] == "all" and rows[0]["tasks"] == 0 and rows[0]["pass_rate"] is None, rows
' || fail "empty store"
# The precision-matched family reads the reward's bar: the faster of the matched baseline and the
# plain one. An fp16 kernel 1.2x plain eager whose autocast baseline was slower (1.5x) counts 1.2x,
# never the 1.5x (reward-calc's matched_slower); one whose matched baseline is faster counts that.
printf '%s\n' \
  '{"task_id":"m1","candidate_id":"cm1","data_source":"kernelbench","level":9,"check":{"status":"passed","correct":true,"precision":"fp16"},"prof":{"status":"timed","correct":true,"time_us":{"median":10.0},"speedup_vs_eager":1.2,"speedup_vs_compile":1.1,"matched_precision":"fp16","speedup_vs_eager_precision_matched":1.5,"speedup_vs_compile_precision_matched":0.9}}' \
  > "$T/slower.jsonl"
"$RS" import --store "$T/slower.db" -i "$T/slower.jsonl" 2> /dev/null || fail "import of the matched-slower record"
"$RS" report --store "$T/slower.db" --json 2> /dev/null | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin][-1]
assert abs(r["geomean_vs_eager_precision_matched"] - 1.2) < 1e-9, r
assert abs(r["geomean_vs_compile_precision_matched"] - 0.9) < 1e-9, r
' || fail "precision-matched speedups: the bar is the faster of the matched and the plain baseline"
# A check that gave no verdict (compile-only: correct null, a NULL column) is no pass, and the report
# reads its row without the absent key (a const read of it was a read past the row's object, found under
# valgrind; jsonl.hpp's JSON_ASSERT now makes such a read exit 4).
printf '%s\n' '{"candidate_id":"v1","task_id":"tv","check":{"status":"compiled","correct":null}}' \
  '{"candidate_id":"v2","task_id":"tw","check":{"status":"passed","correct":true}}' > "$T/noverdict.jsonl"
"$RS" import --store "$T/noverdict.db" -i "$T/noverdict.jsonl" 2> /dev/null || fail "import of the no-verdict record"
"$RS" report --store "$T/noverdict.db" --json 2> "$T/noverdict.err" | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin][-1]
assert r["tasks"] == 2 and r["passed"] == 1, r
' || fail "a check without a verdict: $(cat "$T/noverdict.err")"
echo "run_store_report: ok"
