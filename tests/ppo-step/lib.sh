# Shared setup of ppo-step's shell tests, on tests/lib.sh (the temp dir, PY, fail): strict mode,
# the binary, the test folder, schema validation.
set -euo pipefail
source "$CA_SRC/tests/lib.sh"
PPO=$CA_BIN/ppo-step
HERE=$CA_TESTS   # tests/ppo-step (ca_shell_test passes the calling folder)
tmp=$T
# Validates JSON Lines against schemas/KIND; a device's Python may lack jsonschema (CI's has it).
validate() {
  if ! $PY -c "import jsonschema" 2>/dev/null; then
    echo "note: $2 not validated against the $1 schema (no jsonschema in $PY)" >&2
    return 0
  fi
  CA_SRC=$CA_SRC $PY "$CA_SRC/tests/validate_schema.py" "$1" "$2"
}
