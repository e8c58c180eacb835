#!/usr/bin/env bash
# The judge services under attack on the CPU (issue 32): binding, the shared secret, client tasks,
# content ids and --resume, body bounds, 100-continue, EMFILE, admission, a client that leaves, no
# GPU, a compiler killed from outside. The cases are in judge_services.py.
exec python3 "$(dirname "$0")/judge_services.py"
