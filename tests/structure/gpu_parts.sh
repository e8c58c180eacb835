#!/usr/bin/env bash
# scripts/gpu-parts.txt splits the gpu label into parts a device call can run (issue 35: the label
# whole at one commit): every gpu test is in exactly one part, no part names a test that is not
# one, and each part's regex (scripts/gpu-part-regex.sh, what device-session.sh's GPU_PART runs)
# selects exactly its names.
set -u
. "$(dirname "$0")/../lib.sh"
BUILD=$(cd "$CA_BIN/.." && pwd)
list() { ctest --test-dir "$BUILD" -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p' | sort; }
list -L gpu > "$T/label.txt"
[ -s "$T/label.txt" ] || fail "ctest -N -L gpu lists no test in $BUILD"
awk '!/^#/ && NF { for (i = 2; i <= NF; i++) print $i }' "$CA_SRC/scripts/gpu-parts.txt" | sort > "$T/parts.txt"
dup=$(uniq -d "$T/parts.txt")
[ -z "$dup" ] || fail "in more than one part: $dup"
missing=$(comm -23 "$T/label.txt" "$T/parts.txt")
[ -z "$missing" ] || fail "gpu tests in no part of scripts/gpu-parts.txt: $missing"
extra=$(comm -13 "$T/label.txt" "$T/parts.txt")
[ -z "$extra" ] || fail "scripts/gpu-parts.txt names tests that are not in the gpu label: $extra"
for p in $(awk '!/^#/ && NF { print $1 }' "$CA_SRC/scripts/gpu-parts.txt"); do
  re=$(bash "$CA_SRC/scripts/gpu-part-regex.sh" "$p") || fail "part $p: no regex"
  list -L gpu -R "$re" > "$T/sel.txt"
  awk -v p="$p" '$1 == p { for (i = 2; i <= NF; i++) print $i }' "$CA_SRC/scripts/gpu-parts.txt" | sort > "$T/want.txt"
  cmp -s "$T/sel.txt" "$T/want.txt" || fail "part $p's regex selects $(tr '\n' ' ' < "$T/sel.txt"), not $(tr '\n' ' ' < "$T/want.txt")"
done
bash "$CA_SRC/scripts/gpu-part-regex.sh" 99 > /dev/null 2>&1 && fail "a part that does not exist gave a regex"
pass "scripts/gpu-parts.txt: $(wc -l < "$T/label.txt") gpu tests, each in one part; each part's regex selects exactly its tests"
