#!/usr/bin/env bash
# Parity with Hugging Face transformers and tokenizers on the device (label gpu): see hf_parity.py.
set -euo pipefail
PY=${CUDA_AGENT_PYTHON:-python3}
if ! "$PY" -c "import torch, transformers, tokenizers, safetensors; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "hf_parity: $PY lacks torch with CUDA, transformers, tokenizers or safetensors: this is a device test" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" "$(cd "$(dirname "$0")" && pwd)/hf_parity.py" --bin "$CA_BIN" --src "$CA_SRC" --work "$work"
