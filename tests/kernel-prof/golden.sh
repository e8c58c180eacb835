#!/usr/bin/env bash
# Golden triples for kernel-prof's GPU-free paths: records it has nothing to time (failed checks, no
# check) pass through untouched, also dealt over --gpus 0,1; bad input; usage errors; --help. No
# case times a kernel (that needs a GPU and is never exact), so nothing is normalized.
# UPDATE_GOLDEN=1 rewrites the expected files; tests/lib.sh (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
golden_suite "$CA_SRC/tests/kernel-prof/golden"
