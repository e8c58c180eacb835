#!/usr/bin/env bash
# LoRA adapters' format and math without transformers (label cli): lora_parity.py --mode torch computes
# PEFT's forward in plain float64 torch from the files and checks the native CPU and merged paths.
set -euo pipefail
source "$CA_SRC/tests/lib.sh"
"$PY" -c "import torch" 2>/dev/null || fail "$PY has no torch (Debian: python3-torch)"
"$PY" "$CA_SRC/tests/nn_cuda/lora_parity.py" --mode torch --bin "$CA_BIN" --work "$T"
