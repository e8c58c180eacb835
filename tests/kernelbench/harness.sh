#!/usr/bin/env bash
# bench/kernelbench's CPU harness on a fixture of our own (a tiny task and a bundle whose kernel comes
# from the level's _lib/ through uses.txt; no KernelBench text): make_candidates.py --specs (meta
# device) and bind.sh (kernel-check --compile-only) count bound, failed and missing tasks, and
# make_candidates names a uses.txt line whose file is missing.
set -u
. "$(dirname "$0")/../lib.sh"
FX=$CA_SRC/tests/kernelbench/fixture
BIND=$CA_SRC/bench/kernelbench/bind.sh
export BIN=$CA_BIN PYTHON=$PY

# 1. The fixture's level: one task binds, one has no bundle -> exit 2 and the counts say so.
KB=$FX/KernelBench BUNDLES=$FX/bundles OUT=$T/o1 bash "$BIND" level3 >"$T/o1.txt" 2>"$T/o1.err"
rc=$?
[ $rc -eq 2 ] || fail "bind.sh with a task lacking a bundle exited $rc, expected 2 ($(cat "$T/o1.err"))"
tail -1 "$T/o1.txt" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert (d["tasks"],d["bound"],d["missing"],d["failed"])==(2,1,1,0), d' ||
  fail "counts: $(tail -1 "$T/o1.txt")"
grep -q '^1_ReluScale .*compiled .*plan and rules checks passed' "$T/o1.txt" || fail "1_ReluScale did not bind: $(cat "$T/o1.txt")"
grep -q '^2_NoBundle .*missing' "$T/o1.txt" || fail "2_NoBundle not reported missing"
"$PY" - "$T/o1/bind_level3.candidates.jsonl" <<'PY' || fail "the record does not carry the _lib kernel named in uses.txt"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
k = r["bundle"]["kernels"]
assert list(k) == ["fx_relu.cu"] and "fx_relu_scale" in k["fx_relu.cu"], k
assert r["task"]["inputs"][0]["shape"] == [16, 64] and r["task"]["outputs"][0]["shape"] == [16, 64], r["task"]
PY
pass "bind.sh: 1 bound, 1 missing, exit 2; uses.txt's _lib file is in the record; specs from the meta device"

# 2. ONLY= the bound task: exit 0.
ONLY=1_ KB=$FX/KernelBench BUNDLES=$FX/bundles OUT=$T/o2 bash "$BIND" level3 >"$T/o2.txt" 2>"$T/o2.err" ||
  fail "bind.sh ONLY=1_ exited $? ($(cat "$T/o2.err"))"
pass "bind.sh ONLY=1_: every task asked binds, exit 0"

# 3. A plan that does not bind (a float where the kernel takes int) is counted failed, with the reason.
cp -r "$FX/bundles" "$T/b3"
sed -i 's/args: \[inputs.0, scratch.h, B \* F, 2.0\]/args: [inputs.0, scratch.h, 2.5, 2.0]/' "$T/b3/level3/1_ReluScale/plan.yaml"
ONLY=1_ KB=$FX/KernelBench BUNDLES=$T/b3 OUT=$T/o3 bash "$BIND" level3 >"$T/o3.txt" 2>"$T/o3.err"
rc=$?
[ $rc -eq 2 ] || fail "a plan that does not bind: exit $rc, expected 2"
grep -q '^1_ReluScale .*plan_error' "$T/o3.txt" || fail "the failed bind is not reported as plan_error: $(cat "$T/o3.txt")"
tail -1 "$T/o3.txt" | grep -q '"failed": 1' || fail "failed count: $(tail -1 "$T/o3.txt")"
pass "a plan that does not bind: plan_error, counted failed, exit 2"

# 4. uses.txt naming a file _lib lacks: make_candidates stops naming uses.txt and its line.
cp -r "$FX/bundles" "$T/b4"
printf 'fx_relu.cu\nnot_there.cu\n' >"$T/b4/level3/1_ReluScale/uses.txt"
if "$PY" "$CA_SRC/bench/kernelbench/make_candidates.py" --kb "$FX/KernelBench" --bundles "$T/b4" -o "$T/o4.jsonl" 2>"$T/o4.err"; then
  fail "make_candidates accepted a uses.txt naming a missing file"
fi
grep -q 'uses.txt:2: no file not_there.cu' "$T/o4.err" || fail "make_candidates' message: $(cat "$T/o4.err")"
pass "a uses.txt line naming a missing file: make_candidates stops naming uses.txt:2"

# 5. floor_margin.py: the floor each judged record needs, 0 within K * error + floor_min, else (measured - K * error) / f,
# from the trial closest to its bound; passed records only in the summary; a broken line skipped.
"$PY" - "$T/fm.jsonl" <<'PY'
import json, sys
cal = {"outputs.0": {"precision": "fp32", "k": 8, "floor": 3e-5, "ref_err_rel_l2": 1e-7, "fp32_err_rel_l2": 1e-7,
                     "varying_fraction": 0.5}}
def trial(seed, variant, m):
    return {"seed": seed, "warm": seed == 0, "variant": variant,
            "tolerance": {"mode": "calibrated", "output": "outputs.0", "measured_rel_l2": m, "bound_rel_l2": 1.58e-5}}
recs = [{"name": "honest", "check": {"status": "passed", "calibration": cal, "trials": [trial(0, "plain", 2e-6), trial(1, "shift_scale", 5e-6)]}},
        {"name": "under-k", "check": {"status": "passed", "calibration": cal, "trials": [trial(0, "plain", 5e-7)]}},
        {"name": "low-f", "check": {"status": "passed", "trials": [trial(0, "plain", 1.8e-6)],
                                    "calibration": {"outputs.0": dict(cal["outputs.0"], varying_fraction=0.003)}}},
        {"name": "exploit", "check": {"status": "incorrect", "calibration": cal, "trials": [trial(0, "plain", 4e-5)]}}]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(json.dumps(r) for r in recs) + "\n{not json\n")
PY
"$PY" "$CA_SRC/bench/kernelbench/floor_margin.py" "$T/fm.jsonl" >"$T/fm.txt" 2>"$T/fm.err" || fail "floor_margin.py exited $?: $(cat "$T/fm.err")"
grep -q '^honest .*shift_scale .*floor needed 8.40e-06' "$T/fm.txt" || fail "floor_margin: the honest record's need: $(cat "$T/fm.txt")"
grep -q '^under-k .*floor needed 0.00e+00' "$T/fm.txt" || fail "floor_margin: K * error alone: $(cat "$T/fm.txt")"
grep -q '^exploit .*floor needed 7.84e-05' "$T/fm.txt" || fail "floor_margin: the exploit's need: $(cat "$T/fm.txt")"
grep -q '^low-f .*floor needed 0.00e+00' "$T/fm.txt" || fail "floor_margin: within floor_min (a tenth of the floor here) needs none: $(cat "$T/fm.txt")"
"$PY" -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1])["floor_needed_by_passed"]["fp32"]; assert s["passed"] == 3 and s["of"] == "honest" and abs(s["largest_need"] - 8.4e-6) < 1e-12, s' "$T/fm.txt" ||
  fail "floor_margin: summary $(tail -1 "$T/fm.txt")"
grep -q ':5: not JSON, skipped' "$T/fm.err" || fail "floor_margin: the broken line: $(cat "$T/fm.err")"
pass "floor_margin.py: each record's floor need, the passed records' largest in the summary, a broken line named and skipped"

# 5b. run.sh compare in a folder whose judge stage wrote nothing: exit 1 naming it, and an earlier
# compare.txt is gone (batches.sh prints compare.txt as the batch's result).
mkdir -p "$T/c5"; echo '{"candidate_id": "c"}' > "$T/c5/toolchain.jsonl"; : > "$T/c5/judge.jsonl"
echo "level3/old  agree" > "$T/c5/compare.txt"
OUT=$T/c5 PYTHON=$PY bash "$CA_SRC/bench/kernelbench/run.sh" compare > "$T/c5.txt" 2> "$T/c5.err"
rc=$?
[ "$rc" = 1 ] && grep -q "no $T/c5/judge.jsonl" "$T/c5.err" && [ ! -e "$T/c5/compare.txt" ] ||
  fail "run.sh compare without judge records: rc=$rc $(cat "$T/c5.err"); compare.txt: $(cat "$T/c5/compare.txt" 2>&1)"
pass "run.sh compare without judge records: exit 1, no earlier compare.txt left"

# 6. batches.sh: each batch through cands, toolchain (60% of the seconds left) and judge compare (the
# rest less 15 s), ONLY as given, one folder each, the shared compile caches exported; a batch that
# would start with MIN_LEFT or less left is skipped and says so. run.sh is a stub here (KB_RUN_SH).
cat > "$T/run_stub.sh" <<'STUB'
echo "stages=$* ONLY=${ONLY:-} STAGE_TIMEOUT=${STAGE_TIMEOUT:-} shared=${KB_SHARED_COMPILE_CACHE:-} inductor=${TORCHINDUCTOR_CACHE_DIR:-}" >> "$OUT/calls.txt"
case "$*" in
  toolchain) echo 12.5 > "$OUT/toolchain.wall"; echo "reward-calc: 2 read" > "$OUT/reward.err"; sleep "${STUB_SLEEP:-0}" ;;
  "judge compare") echo 7.5 > "$OUT/judge.wall"; printf 'candidate  verdict\nlevel3/x  agree\n  an indented note\n' > "$OUT/compare.txt" ;;
esac
STUB
OUT=$T/b6 BUDGET=500 KB_RUN_SH=$T/run_stub.sh bash "$CA_SRC/bench/kernelbench/batches.sh" "level3/1_ level3/2_" "level3/3_" > "$T/b6.txt" 2> "$T/b6.err" ||
  fail "batches.sh exited $?: $(cat "$T/b6.err")"
[ "$(grep -c '^stages=' "$T/b6/kb1/calls.txt")" = 3 ] && [ "$(grep -c '^stages=' "$T/b6/kb2/calls.txt")" = 3 ] || fail "batches.sh: stages per batch: $(cat "$T"/b6/kb*/calls.txt)"
grep -q '^stages=cands ONLY=level3/1_ level3/2_ ' "$T/b6/kb1/calls.txt" || fail "batches.sh: ONLY of batch 1: $(cat "$T/b6/kb1/calls.txt")"
"$PY" - "$T/b6/kb1/calls.txt" "$T/b6" <<'PY' || fail "batches.sh: stage timeouts or caches: $(cat "$T/b6/kb1/calls.txt")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
tc = int(re.search(r"STAGE_TIMEOUT=(\d+)", lines[1]).group(1)); jd = int(re.search(r"STAGE_TIMEOUT=(\d+)", lines[2]).group(1))
assert lines[1].startswith("stages=toolchain") and 290 <= tc <= 300, lines[1]          # 60% of ~500 s
assert lines[2].startswith("stages=judge compare") and 475 <= jd <= 485, lines[2]      # ~500 s less 15
assert all("shared=1 inductor=%s/compile-cache/inductor" % sys.argv[2] in l for l in lines), lines
PY
grep -q '^batch 2 \[level3/3_\]: judge rc=0 7.5 s' "$T/b6.txt" && grep -q '^level3/x  agree' "$T/b6.txt" && ! grep -q 'indented' "$T/b6.txt" ||
  fail "batches.sh: stdout: $(cat "$T/b6.txt")"
OUT=$T/b7 BUDGET=62 MIN_LEFT=60 STUB_SLEEP=3 KB_RUN_SH=$T/run_stub.sh bash "$CA_SRC/bench/kernelbench/batches.sh" "level3/1_" "level3/2_" > "$T/b7.txt" 2>&1 ||
  fail "batches.sh (short budget) exited $?"
grep -q '^batch 2 \[level3/2_\]: skipped, [0-9]* s left' "$T/b7.txt" && [ ! -d "$T/b7/kb2" ] || fail "batches.sh: the batch past the budget: $(cat "$T/b7.txt")"
# The same OUT again: its batch folders hold the first run's records; refused before anything runs.
OUT=$T/b6 BUDGET=500 KB_RUN_SH=$T/run_stub.sh bash "$CA_SRC/bench/kernelbench/batches.sh" "level3/1_" > "$T/b8.txt" 2> "$T/b8.err"
rc=$?
[ "$rc" = 2 ] && grep -q "kb1 holds an earlier run's records" "$T/b8.err" && [ "$(grep -c '^stages=' "$T/b6/kb1/calls.txt")" = 3 ] ||
  fail "batches.sh over an earlier run: rc=$rc $(cat "$T/b8.err") $(cat "$T/b6/kb1/calls.txt")"
pass "batches.sh: three stages a batch with ONLY, 60%/rest-15 s stage limits, shared caches; a batch past the budget skipped; an earlier run's folder refused"
