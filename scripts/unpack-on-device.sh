#!/usr/bin/env bash
# On the GPU machine: unpack .devcarry/build.tgz here and make the absolute source path recorded at
# pack time point at this checkout, so the CTest files work unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
tar -xzf .devcarry/build.tgz
src=$(cat .devcarry/source_path)
if [ "$src" != "$PWD" ] && [ ! -e "$src" ]; then
  mkdir -p "$(dirname "$src")"
  ln -s "$PWD" "$src"
fi
echo "unpacked; source path $src -> $PWD" >&2
