#!/usr/bin/env bash
# The third adversarial round (issue 31's CPU bar), compile-only: every spelling of reduced precision
# reports its true precision, every heap spelling is a policy violation (or refused by the compiler),
# every kernel name in the ca_ namespace is refused; the honest controls compile. The cases are
# adversarial_round3.py's; the checking is adversarial_round2_cpu.sh's.
ADV_ROUND=3 exec bash "$(cd "$(dirname "$0")" && pwd)/adversarial_round2_cpu.sh"
