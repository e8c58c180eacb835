#!/usr/bin/env bash
# ops-synth filter on the CPU worker: verdicts on planted bad tasks (stochastic, constant output,
# raising, NaN, input-independent, insensitive (a constant passes the published bound), ill-conditioned
# (fp32 reference far from float64), near copy of a fixture problem), generated tiny tasks mostly
# kept, -j 2 keeps input order, --keep-rejected, the store's filter rows; then import of the
# fixture KernelBench directories and of Ops-6K-style JSONL rows.
source "$(dirname "$0")/lib.sh"
PY=$(find_torch_python) || fail "no python with torch (set CUDA_AGENT_PYTHON)"
export CUDA_AGENT_PYTHON="$PY"
export CUDA_AGENT_WORKER_WRITE_DIRS="$T"  # tasks here leave marks for this script (the worker is confined)
FIX="$CA_SRC/datasets/ops/fixtures/kernelbench"

"$PY" "$HERE/planted/make_planted.py" "$FIX" > "$T/planted.jsonl"
"$OS" filter --device cpu -j 2 --keep-rejected --decontaminate "$FIX" --store "$T/f.db" \
  -i "$T/planted.jsonl" > "$T/out.jsonl" 2> "$T/err" || fail "filter failed: $(tail -5 "$T/err")"
cat "$T/err" >&2
python3 - "$T/planted.jsonl" "$T/out.jsonl" <<'PY' || fail "planted verdicts"
import json, sys
planted = [json.loads(l) for l in open(sys.argv[1])]
out = [json.loads(l) for l in open(sys.argv[2])]
assert [r["task_id"] for r in out] == [r["task_id"] for r in planted], "order or count changed"
bad = 0
for p, o in zip(planted, out):
    f = o["filter"]
    got = None if f["kept"] else f["reason"]
    print("%-22s expect %-16s got %-16s sim %.3f" % (p["name"], p["expect"], got, f.get("similarity", {}).get("max", -1)))
    if got != p["expect"]:
        bad += 1
# The drops the load measured say why, with the evidence.
by = {p["name"]: o["filter"] for p, o in zip(planted, out)}
ins = by["insensitive_bias"]["verdicts"]["input_sensitive"]
assert ins["pass"] is False and "constant answer" in ins["detail"] and len(ins["checks"]) == 2, ins
ill = by["ill_conditioned"]["verdicts"]["well_conditioned"]
assert ill["pass"] is False and ill["fp32_err_rel_l2"] > 0.05, ill
assert by["good_gelu_scale"]["verdicts"]["input_sensitive"]["pass"] is True
assert by["good_gelu_scale"]["verdicts"]["well_conditioned"]["pass"] is True
# The record's reference section keeps the measurement (kernel-check shows it; its own worker decides).
recs = {p["name"]: o for p, o in zip(planted, out)}
assert recs["insensitive_bias"]["reference"]["insensitive"] is True, recs["insensitive_bias"]["reference"]
assert recs["ill_conditioned"]["reference"]["ill_conditioned"] is True, recs["ill_conditioned"]["reference"]
assert recs["good_gelu_scale"]["reference"]["insensitive"] is False
sys.exit(1 if bad else 0)
PY
rows=$("$CA_BIN/run-store" query --store "$T/f.db" "SELECT COUNT(*) AS n FROM filter_results" 2>/dev/null || echo '{}')
echo "$rows" | grep -q '"n":9' || fail "store filter rows: $rows"

# --resume reuses the stored verdicts made with the same options (no worker call: the same verdicts,
# counted as reused); other options (--max-ms) are judged again.
"$OS" filter --device cpu -j 2 --keep-rejected --decontaminate "$FIX" --store "$T/f.db" --resume \
  -i "$T/planted.jsonl" > "$T/out_resumed.jsonl" 2> "$T/err_r" || fail "filter --resume: $(tail -5 "$T/err_r")"
grep -q "9 verdicts reused" "$T/err_r" || fail "--resume should reuse 9 verdicts: $(tail -2 "$T/err_r")"
python3 - "$T/out.jsonl" "$T/out_resumed.jsonl" <<'PY' || fail "--resume changed the verdicts"
import json, sys
a = [json.loads(l)["filter"] for l in open(sys.argv[1])]
b = [json.loads(l)["filter"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 9
for x, y in zip(a, b):
    assert x["reason"] == y["reason"] and x["verdicts"] == y["verdicts"] and x["options"] == y["options"], (x, y)
PY
rows=$("$CA_BIN/run-store" query --store "$T/f.db" "SELECT COUNT(*) AS n FROM filter_results" 2>/dev/null || echo '{}')
echo "$rows" | grep -q '"n":9' || fail "a resumed run must not add filter rows: $rows"
"$OS" filter --device cpu -j 2 --keep-rejected --decontaminate "$FIX" --store "$T/f.db" --resume --max-ms 50 \
  -i "$T/planted.jsonl" > /dev/null 2> "$T/err_r2" || fail "filter --resume --max-ms: $(tail -5 "$T/err_r2")"
grep -q "verdicts reused" "$T/err_r2" && fail "other options must be judged again: $(tail -2 "$T/err_r2")"

# GPU memory taken by other workers (simulated: forward raises torch's message for the first calls):
# the worker retries once, then ops-synth waits and asks again; a task that always fails so is
# dropped as gpu_memory, not blamed for runs_eager.
"$PY" - "$T" > "$T/oom.jsonl" <<'PY'
import json, sys
for name, limit in (("oom_twice", 2), ("oom_always", 1000)):
    count = "%s/%s.count" % (sys.argv[1], name)
    code = ("import os\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
            "    def forward(self, x):\n"
            "        n = int(open(%r).read()) if os.path.exists(%r) else 0\n"
            "        open(%r, 'w').write(str(n + 1))\n"
            "        if n < %d:\n"
            "            raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB (simulated)')\n"
            "        return x * 2.0\n\n\n"
            "def get_inputs():\n    return [torch.randn(4, 8)]\n\n\ndef get_init_inputs():\n    return []\n"
            % (count, count, count, limit))
    print(json.dumps({"task_id": name, "code": code}))
PY
"$OS" filter --device cpu --no-store --keep-rejected --memory-wait 0.1 --memory-retries 2 -i "$T/oom.jsonl" \
  > "$T/oom_out.jsonl" 2> "$T/err_oom" || fail "filter (gpu memory): $(tail -3 "$T/err_oom")"
python3 - "$T/oom_out.jsonl" "$T" <<'PY' || fail "verdicts lost to GPU memory"
import json, sys
a, b = [json.loads(l)["filter"] for l in open(sys.argv[1])]
print("oom_twice: kept %s after %s retries; oom_always: %s after %s" % (a["kept"], a.get("memory_retries"),
      b["reason"], b.get("memory_retries")))
assert a["kept"] is True and a["memory_retries"] == 1, a
assert b["kept"] is False and b["reason"] == "gpu_memory" and b["memory_retries"] == 2, b
assert "out of memory" in b["verdicts"]["runs_eager"]["detail"], b["verdicts"]["runs_eager"]
assert int(open(sys.argv[2] + "/oom_always.count").read()) == 6  # 3 requests, each tried twice by the worker
PY
grep -q '"gpu_memory":1' "$T/err_oom" || fail "the summary should count gpu_memory: $(tail -1 "$T/err_oom")"

# Generated tiny tasks: most are kept; -j 3 emits in input order; without --keep-rejected only kept.
"$OS" generate -n 24 --seed 3 --sizes tiny --no-store > "$T/gen.jsonl" 2>/dev/null
"$OS" filter --device cpu -j 3 --no-store -i "$T/gen.jsonl" > "$T/kept.jsonl" 2> "$T/err2" || fail "filter gen: $(tail -3 "$T/err2")"
tail -1 "$T/err2" >&2
python3 - "$T/gen.jsonl" "$T/kept.jsonl" <<'PY' || fail "generated tasks filter"
import json, sys
gen = [json.loads(l)["task_id"] for l in open(sys.argv[1])]
kept = [json.loads(l) for l in open(sys.argv[2])]
ids = [k["task_id"] for k in kept]
assert all(k["filter"]["kept"] for k in kept)
assert ids == [g for g in gen if g in set(ids)], "not in input order"
assert len(kept) >= 16, "only %d of 24 generated tasks kept" % len(kept)
assert all("params" in k for k in kept), "params not filled from load"
PY

# A line that is not JSON: exit 2 naming the line.
printf '%s\nnot json\n' "$(head -1 "$T/gen.jsonl")" > "$T/bad.jsonl"
set +e; "$OS" filter --device cpu --no-store -i "$T/bad.jsonl" > /dev/null 2> "$T/err3"; rc=$?; set -e
[ "$rc" = 2 ] && grep -q "line 2" "$T/err3" || fail "bad line: rc $rc, $(cat "$T/err3")"
# A record without code: passed on with an error section; --strict: exit 2.
echo '{"task_id":"0000000000000001"}' > "$T/nocode.jsonl"
"$OS" filter --device cpu --no-store -i "$T/nocode.jsonl" > "$T/nc.jsonl" 2>/dev/null
grep -q '"error"' "$T/nc.jsonl" || fail "record without code should get an error section"
set +e; "$OS" filter --strict --device cpu --no-store -i "$T/nocode.jsonl" >/dev/null 2>&1; rc=$?; set -e
[ "$rc" = 2 ] || fail "--strict: rc $rc"

# import: fixture KernelBench levels (specs from the worker) and Ops-6K rows.
"$OS" import --no-store "$FIX" > "$T/kb.jsonl" 2> "$T/err4" || fail "import kb: $(cat "$T/err4")"
python3 - "$T/kb.jsonl" <<'PY' || fail "import kernelbench"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 5, len(recs)
conv = [r for r in recs if r["name"] == "3_Conv2d_Standard"][0]
assert conv["data_source"] == "kernelbench#level1", conv["data_source"]
assert conv["outputs"][0]["shape"] == [4, 16, 30, 30], conv["outputs"]
assert conv["init_inputs"] == [3, 16, 3], conv["init_inputs"]
assert any(p["name"] == "conv2d.weight" for p in conv["params"]), conv["params"]
PY
python3 - "$T/gen.jsonl" > "$T/ops6k.jsonl" <<'PY'
import json, sys
for l in list(open(sys.argv[1]))[:3]:
    r = json.loads(l)
    print(json.dumps({"ops": r["ops"], "data_source": r["data_source"], "code": r["code"]}))
PY
"$OS" import --no-store -j 2 "$T/ops6k.jsonl" > "$T/imp.jsonl" 2>/dev/null || fail "import ops6k"
python3 - "$T/gen.jsonl" "$T/imp.jsonl" <<'PY' || fail "import ops6k rows"
import json, sys
gen = [json.loads(l) for l in open(sys.argv[1])][:3]
imp = [json.loads(l) for l in open(sys.argv[2])]
assert len(imp) == 3
for g, i in zip(gen, imp):
    assert i["ops"] == g["ops"] and i["data_source"] == g["data_source"]
    assert [o["shape"] for o in i["outputs"]] == [o["shape"] for o in g["outputs"]], (i["outputs"], g["outputs"])
    assert i["init_inputs"] == g["init_inputs"]
PY
CA_SRC="$CA_SRC" "$PY" "$CA_SRC/tests/validate_schema.py" task "$T/imp.jsonl" || fail "imported records: schema"
# A row whose task_id is a number: a bad record naming the field (exit 0), the rows around it imported.
python3 - "$T/ops6k.jsonl" > "$T/numid.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][:2]
rows.insert(1, dict(rows[0], task_id=17))
for r in rows: print(json.dumps(r))
PY
"$OS" import --no-store "$T/numid.jsonl" > "$T/numid.out" 2> "$T/numid.err" || fail "import with a numeric task_id: exit $?: $(cat "$T/numid.err")"
python3 - "$T/numid.out" <<'PY' || fail "import with a numeric task_id: $(cat "$T/numid.out")"
import json, sys
out = [json.loads(l) for l in open(sys.argv[1])]
assert len(out) == 3, len(out)
assert out[1]["error"]["field"] == "task_id", out[1].get("error")
assert "error" not in out[0] and "error" not in out[2] and out[2]["outputs"], out
PY
echo "ops-synth filter/import (cpu): ok"
