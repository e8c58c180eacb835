#!/usr/bin/env bash
# LoRA adapters against transformers + peft on the device (label gpu): see lora_parity.py --mode peft.
# Without torch (CUDA), transformers, peft or safetensors it fails, it does not skip: it is the bar.
set -euo pipefail
source "$CA_SRC/tests/lib.sh"
PY=${CUDA_AGENT_PYTHON:-python3}   # the device's python (pyenv/venv) has the packages, Debian's does not
if ! "$PY" -c "import torch, transformers, peft, safetensors; assert torch.cuda.is_available()" 2>"$T/import.err"; then
  echo "FAIL: $PY lacks torch with CUDA, transformers, peft or safetensors: this is a device test" >&2
  tail -3 "$T/import.err" >&2
  exit 1
fi
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PY" "$CA_SRC/tests/nn_cuda/lora_parity.py" --mode peft --bin "$CA_BIN" --work "$T"
