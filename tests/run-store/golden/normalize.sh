#!/usr/bin/env bash
# The run-store golden cases' stdout without what changes from run to run: run ids (random: each
# distinct one becomes RUN-1, RUN-2, ... in order of appearance, RUN1____ in a table, so which rows
# share a run is still compared), the runs' times (started_at, ended_at), and in the runs table the
# version (the git revision of the build), the host and the binary's path (argv[0]).
exec $GOLDEN_NORM --number-key run_id RUN --number '^([0-9a-f]{8})  ' RUN \
  --sub '"(started_at|ended_at)":"[^"]*"' '"\1":"<time>"' \
  --sub '[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' 'YYYY-MM-DDTHH:MM:SS' \
  --sub '"version":"[^"]*"' '"version":"<version>"' --sub '"host":"[^"]*"' '"host":"<host>"' \
  --sub '"argv":\["[^"]*"' '"argv":["<bin>"'
