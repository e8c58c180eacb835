#!/usr/bin/env bash
# Mutation fuzzing of every record reader (fuzz_records.py): 490 mutants across seven tools and
# subcommands, seeded, so a run repeats; each must end in exit 0 (the record passed on with its error
# section) or 2 (bad input naming line 2), with only JSON objects on stdout and the record before it
# kept. First the checker itself, on a fake tool that breaks each rule. FUZZ_CASES and FUZZ_SEED
# run a longer or another campaign by hand.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
F=$CA_SRC/tests/cli/fuzz_records.py
"$PY" "$F" --self-test --bin "$T" > "$T/self.txt" || { cat "$T/self.txt"; fail "the checker missed a broken rule (above)"; }
pass "checker: a signal, exit 4, a non-JSON stdout line, a lost record and an unnamed line are each caught"
"$PY" "$F" --bin "$CA_BIN" --src "$CA_SRC" --cases "${FUZZ_CASES:-490}" --seed "${FUZZ_SEED:-20261207}" > "$T/fuzz.txt" \
  || { cat "$T/fuzz.txt"; fail "mutated records broke a rule of DESIGN.md §1 (above)"; }
tail -1 "$T/fuzz.txt"
pass "every mutant answered as DESIGN.md §1 says"
