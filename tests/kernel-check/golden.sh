#!/usr/bin/env bash
# Golden triples for kernel-check --compile-only (no GPU): good bundles of datasets/skill/bundles and
# tests/kernel-check/bundles, compile errors, plan errors, policy violations (default and --policy),
# input order under -j, bad input. golden/normalize.sh takes the volatile check fields out (and says
# why); golden/make_inputs.sh wrote the in.jsonl files. UPDATE_GOLDEN=1 rewrites the expected files;
# tests/lib.sh (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/kernel-check/golden"
