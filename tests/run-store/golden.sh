#!/usr/bin/env bash
# Golden triples for run-store over stores built from fixed records (tests/run-store/fixture/
# levels.jsonl, golden/shard*.jsonl) by run-store import and merge: summary (JSON and table), report
# (final and best, JSON and table, two stores as one), export of every table, query, merge twice,
# bad input and usage errors. golden/normalize.sh takes out run ids, times, version, host, argv[0].
# UPDATE_GOLDEN=1 rewrites the expected files; tests/lib.sh (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/run-store/golden"
