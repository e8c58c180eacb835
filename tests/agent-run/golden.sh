#!/usr/bin/env bash
# Golden triples for agent-run with the replay policy (scripted turns, so no model and no GPU) and
# the CPU stand-ins for kernel-check and kernel-prof (fake-kernel-*.sh): the demo's eight episodes at
# -j 1 and -j 3, a script calling every tool but bash (--submit final and best, --max-turns), bad input,
# usage, --help. golden/normalize.sh takes out the wall times and the source tree's path.
# UPDATE_GOLDEN=1 rewrites the expected files; tests/lib.sh (golden_suite) says how a case is laid out.
set -u
source "$(dirname "$0")/../lib.sh"
export CA_KERNEL_CHECK="$CA_SRC/tests/agent-run/fake-kernel-check.sh" CA_KERNEL_PROF="$CA_SRC/tests/agent-run/fake-kernel-prof.sh"
export FAKE_SPEEDUP=1.5 FAKE_LOG=
golden_suite "$CA_SRC/tests/agent-run/golden"
