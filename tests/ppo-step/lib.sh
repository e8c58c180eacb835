# Shared setup of ppo-step's shell tests: strict mode, the binary, the test folder, a Python that
# runs the references, and a temporary folder removed on exit.
set -euo pipefail
PPO=$CA_BIN/ppo-step
HERE=$CA_TESTS   # tests/ppo-step (ca_shell_test passes the calling folder)
PY=${CUDA_AGENT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Validates JSON Lines against schemas/KIND; a device's Python may lack jsonschema (CI's has it).
validate() {
  if ! $PY -c "import jsonschema" 2>/dev/null; then
    echo "note: $2 not validated against the $1 schema (no jsonschema in $PY)" >&2
    return 0
  fi
  CA_SRC=$CA_SRC $PY "$CA_SRC/tests/validate_schema.py" "$1" "$2"
}
