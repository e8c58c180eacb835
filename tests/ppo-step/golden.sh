#!/usr/bin/env bash
# Golden triples for ppo-step's deterministic commands (input, command, expected output), like jq's and
# samtools' suites: `advantages` (GAE and GRPO with their options; bad records, --strict, a broken
# stream, usage), `config` (every key and default), `tokenize` (the role form, agent-run's form, turns
# rendered with a tokenizer; bad records, --strict, a broken stream) and --help. Outputs are compared
# byte for byte: any change of a number, key or message fails. The training step itself is not here
# (its metrics carry times); train.sh, toy_rl.sh and rollout_check.sh test it.
# UPDATE_GOLDEN=1 rewrites the expected files (review the diff before committing); tests/lib.sh
# (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/ppo-step/golden"
