#!/usr/bin/env bash
# Golden triples for reward-calc (input, command, expected output), like jq's and samtools' suites.
# Each golden/<case>/ holds in.jsonl (stdin), cmd (run with the tools on PATH; $CASE is the case's
# folder), out.jsonl (expected stdout, exact: reward records have no volatile field), and optionally
# rc (expected exit code, default 0) and stderr (fixed strings stderr must contain, one a line).
# UPDATE_GOLDEN=1 rewrites out.jsonl from the current output (review the diff before committing);
# tests/lib.sh (golden_suite) runs the cases.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/reward-calc/golden"
