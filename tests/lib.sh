# Shared head of the shell tests (source it): CA_BIN/CA_SRC checks, a temp dir removed on exit,
# fail/pass, a python with Debian's packages, and the golden-triple runner (golden_suite).
# It sets no shell options: each script says its own (`set -euo pipefail` or `set -u`).
#
#   T        a fresh temp dir, removed on exit (at_exit CMD adds more to do first, e.g. kill a server)
#   PY       $CUDA_AGENT_PYTHON, else /usr/bin/python3 (Debian's, with python3-torch), else python3.
#            `python3` on PATH may be a pyenv build without Debian's packages: do not use it for torch.
#   fail MSG           "FAIL: MSG" on stderr, exit 1
#   pass MSG           "ok   MSG" on stdout
#   golden_suite DIR   runs the golden cases under DIR (see below); its status is the suite's
: "${CA_BIN:?CA_BIN must point at the bin folder of a build}"
: "${CA_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
[ -d "$CA_BIN" ] || { echo "FAIL: CA_BIN=$CA_BIN is not a folder" >&2; exit 1; }
[ -f "$CA_SRC/tests/lib.sh" ] || { echo "FAIL: CA_SRC=$CA_SRC is not the source tree" >&2; exit 1; }

PY=${CUDA_AGENT_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

T=$(mktemp -d)
_ca_at_exit=()
at_exit() { _ca_at_exit+=("$1"); }
_ca_cleanup() {
  local cmd
  for cmd in "${_ca_at_exit[@]+"${_ca_at_exit[@]}"}"; do eval "$cmd" || true; done
  rm -rf "$T"
}
trap _ca_cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok   $*"; }

# golden_suite DIR: golden triples (input, command, expected output), like jq's and samtools' suites.
# Each DIR/<case>/ holds
#   cmd        one shell script, run by `bash -o pipefail` (a tool piped into $GOLDEN_NORM keeps the
#              tool's exit status) in a fresh empty working folder, with the tools on PATH,
#              CASE=<the case folder>, CA_SRC and CA_BIN; stdin is CASE/in.jsonl if there is
#              one, else /dev/null
#   out.jsonl  the expected stdout, compared byte for byte (a unified diff on failure)
#   rc         the expected exit status (default 0)
#   stderr     fixed strings, one a line, that stderr must each contain (optional)
# The run gets its own CUDA_AGENT_STORE and CUDA_AGENT_CACHE in its working folder, so nothing
# outside it is read or written by default, and CUDA_AGENT_DATA=$CA_SRC/datasets: the data of the
# tree under test, not of the tree the binaries were built from (their fallback). GOLDEN_NORM runs
# tests/golden_normalize.py (volatile fields out). UPDATE_GOLDEN=1 rewrites out.jsonl (and rc) from the current output: review the diff before
# committing. GOLDEN_ONLY=REGEX runs only the cases whose name matches.
golden_suite() {
  local suite=$1 dir name work rc want_rc problem failed=0 ran=0 updated=0 line nl=$'\n'
  export GOLDEN_NORM="$PY $CA_SRC/tests/golden_normalize.py"
  for dir in "$suite"/*/; do
    dir=${dir%/}
    name=$(basename "$dir")
    [[ -f $dir/cmd ]] || continue
    [[ -n ${GOLDEN_ONLY:-} && ! $name =~ $GOLDEN_ONLY ]] && continue
    ran=$((ran + 1))
    work="$T/golden/$name"
    mkdir -p "$work/run"
    want_rc=0
    [[ -f $dir/rc ]] && want_rc=$(<"$dir/rc")
    local input=/dev/null
    [[ -f $dir/in.jsonl ]] && input=$dir/in.jsonl
    rc=0
    (cd "$work/run" && CASE=$dir CA_SRC=$CA_SRC CA_BIN=$CA_BIN PATH="$CA_BIN:$PATH" \
       CUDA_AGENT_DATA="$CA_SRC/datasets" CUDA_AGENT_STORE="$work/run/store.db" CUDA_AGENT_CACHE="$work/run/cache" \
       bash -o pipefail "$dir/cmd" < "$input" > "$work/out" 2> "$work/err") || rc=$?
    if [[ ${UPDATE_GOLDEN:-0} == 1 ]]; then
      cmp -s "$work/out" "$dir/out.jsonl" || { cp "$work/out" "$dir/out.jsonl"; updated=$((updated + 1)); echo "updated $name" >&2; }
      if [[ $rc != "$want_rc" ]]; then
        if [[ $rc == 0 ]]; then rm -f "$dir/rc"; else echo "$rc" > "$dir/rc"; fi
        echo "updated $name: rc $want_rc -> $rc" >&2
        want_rc=$rc
      fi
    fi
    problem=""
    [[ $rc == "$want_rc" ]] || problem+=" exit $rc, expected $want_rc;"
    if [[ ! -f $dir/out.jsonl ]]; then
      problem+=" no out.jsonl (make it with UPDATE_GOLDEN=1);"
    elif ! cmp -s "$dir/out.jsonl" "$work/out"; then
      problem+=" stdout differs:$nl$(diff -u --label "expected $name/out.jsonl" --label "actual" "$dir/out.jsonl" "$work/out" | head -60)"
      problem+="$nl$($GOLDEN_NORM --explain "$dir/out.jsonl" "$work/out" 2>&1)"
    fi
    if [[ -f $dir/stderr ]]; then
      while IFS= read -r line || [[ -n $line ]]; do
        [[ -z $line ]] && continue
        grep -qF -- "$line" "$work/err" || problem+=" stderr lacks [$line];"
      done < "$dir/stderr"
    fi
    if [[ -n $problem ]]; then
      echo "FAIL $name:$problem" >&2
      [[ -s $work/err ]] && echo "  stderr: $(tail -5 "$work/err")" >&2
      failed=$((failed + 1))
    else
      echo "ok   $name" >&2
    fi
  done
  echo "golden $(basename "$(dirname "$suite")"): $ran cases, $failed failed$([[ ${UPDATE_GOLDEN:-0} == 1 ]] && echo ", $updated updated")" >&2
  [[ $ran -gt 0 && $failed == 0 ]]
}
