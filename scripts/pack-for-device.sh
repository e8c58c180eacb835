#!/usr/bin/env bash
# Pack a build tree's binaries and CTest files into .devcarry/ so a GPU machine without this
# machine's build dependencies can run `ctest -L gpu` on them (see scripts/unpack-on-device.sh).
# usage: scripts/pack-for-device.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p .devcarry
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >> .git/info/exclude
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$build"
cp -a "$build/bin" "$stage/$build/"
# PACK_ONLY="kernel-check kernel-prof ...": only these binaries travel (the limit is on the whole
# carry); the CPU-only unit tests never need to.
if [ -n "${PACK_ONLY:-}" ]; then
  for f in "$stage/$build/bin"/*; do
    case " $PACK_ONLY " in *" $(basename "$f") "*) ;; *) rm -rf "$f" ;; esac
  done
fi
# Strip debug info: the binaries travel under a 64 MiB limit.
find "$stage/$build/bin" -type f -perm -u+x -exec sh -c 'file "$1" | grep -q ELF && strip --strip-debug "$1"' _ {} \;
(cd "$build" && find . -name 'CTestTestfile.cmake' -o -name 'CTestCustom.cmake' | while read -r f; do
   mkdir -p "$stage/$build/$(dirname "$f")"; cp "$f" "$stage/$build/$f"; done)
tar -C "$stage" -czf .devcarry/build.tgz "$build"
echo "packed $(du -h .devcarry/build.tgz | cut -f1) from $build (absolute source path: $PWD)" >&2
echo "$PWD" > .devcarry/source_path
