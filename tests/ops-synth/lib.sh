# Shared by the ops-synth shell tests, on tests/lib.sh (the temp dir T, fail): paths, a python
# with torch.
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lib.sh"
OS="$CA_BIN/ops-synth"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CUDA_AGENT_DATA="${CUDA_AGENT_DATA:-$CA_SRC/datasets}"
export CUDA_AGENT_PYTHONPATH="${CUDA_AGENT_PYTHONPATH:-${CA_PYTHONPATH:-$CA_SRC/libcommon/python}}"
find_torch_python() {
  for p in "${CUDA_AGENT_PYTHON:-}" python3 /usr/bin/python3 /usr/local/bin/python3; do
    [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1 && { echo "$p"; return 0; }
  done
  return 1
}
