#!/usr/bin/env bash
# The ctest regex of one part of scripts/gpu-parts.txt: scripts/gpu-part-regex.sh N
# (device-session.sh's GPU_PART=N; structure_gpu_parts checks the parts cover the gpu label).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PART" >&2; exit 1; }
names=$(awk -v p="$1" '$1 == p { $1 = ""; print }' "$(dirname "$0")/gpu-parts.txt" | xargs)
[ -n "$names" ] || { echo "gpu-part-regex.sh: no part $1 in scripts/gpu-parts.txt" >&2; exit 2; }
echo "^(${names// /|})\$"
