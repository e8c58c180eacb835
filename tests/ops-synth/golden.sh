#!/usr/bin/env bash
# Golden triples for ops-synth generate (and import --no-worker): fixed seeds, the records on stdout
# compared byte for byte. Nothing is normalized: a task record has no timestamp, host or path (the
# import case gives relative paths), and the seed fixes everything else (see golden/*/cmd).
# UPDATE_GOLDEN=1 rewrites the expected files; tests/lib.sh (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/ops-synth/golden"
