# Shared setup of ppo-step's shell tests: strict mode, the binary, the test folder, a Python that
# runs the references, and a temporary folder removed on exit.
set -euo pipefail
PPO=$CA_BIN/ppo-step
HERE=$CA_TESTS   # tests/ppo-step (ca_shell_test passes the calling folder)
PY=${CUDA_AGENT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
