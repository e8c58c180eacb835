#!/usr/bin/env bash
# schemas/check.schema.json describes the fields --resume and the GPU judge add: a real kernel-check
# record (compile-only here, no GPU) carries check.judged_by and validates; with check.redrawn_alone
# as the GPU judge writes it (a count of trials drawn again with the candidate's runner ended) it
# validates too; mistyped copies of either are rejected.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
V="$CA_SRC/tests/validate_schema.py"
$PY -c 'import jsonschema' 2>/dev/null || { echo "$PY has no jsonschema (Debian: python3-jsonschema): skipped" >&2; exit 77; }
export CUDA_AGENT_CACHE="$T/cache"
$PY "$CA_SRC/tests/kernel-check/make_candidate.py" "$CA_SRC/datasets/skill/bundles/scale_add" > "$T/in.jsonl"
"$CA_BIN/kernel-check" --compile-only --arch sm_90 --no-store < "$T/in.jsonl" > "$T/out.jsonl" 2> "$T/err" ||
  fail "kernel-check --compile-only: $(tail -3 "$T/err")"
$PY - "$T/out.jsonl" <<'PY' || fail "the compile-only record has no judged_by"
import json, re, sys
c = json.loads(open(sys.argv[1]).readline())["check"]
assert c["status"] == "compiled", c["status"]
assert re.fullmatch(r"[0-9a-f]{16}", c["judged_by"]), c.get("judged_by")
PY
CA_SRC="$CA_SRC" $PY "$V" check "$T/out.jsonl" || fail "a stored check with judged_by does not validate"
mutate() {  # python statement on c (the check section) -> $T/m.jsonl
  $PY - "$T/out.jsonl" "$1" > "$T/m.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).readline())
c = r["check"]
exec(sys.argv[2])
print(json.dumps(r))
PY
}
mutate 'c["redrawn_alone"] = 2'
CA_SRC="$CA_SRC" $PY "$V" check "$T/m.jsonl" || fail "a check with redrawn_alone does not validate"
for m in 'c["judged_by"] = 5' 'c["judged_by"] = "rules-v1"' 'c["judged_by"] = None' \
         'c["redrawn_alone"] = 0' 'c["redrawn_alone"] = "1"' 'c["redrawn_alone"] = 1.5'; do
  mutate "$m"
  if CA_SRC="$CA_SRC" $PY "$V" check "$T/m.jsonl" 2>/dev/null; then fail "the check schema accepted: $m"; fi
done
# The schema describes them (a type and a description), not only lets them through.
$PY - "$CA_SRC/schemas/check.schema.json" <<'PY' || fail "check.schema.json does not describe judged_by and redrawn_alone"
import json, sys
p = json.load(open(sys.argv[1]))["properties"]
for k in ("judged_by", "redrawn_alone"):
    assert p[k].get("type") and p[k].get("description"), k
PY
pass "check schema: judged_by, redrawn_alone"
