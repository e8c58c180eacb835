#!/usr/bin/env bash
# Every option a tool's --help shows (each subcommand's too) is in its manual page or in
# cuda-agent(7), and every option a page lists after a .TP is one the tool still takes
# (man_options.py). First the checker on a fake tool it must fail on, both ways, then on this tree.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
HERE=$CA_SRC/tests/structure
check() { "$PY" "$HERE/man_options.py" "$@"; }

mkdir -p "$T/bin" "$T/man"
# A fake tool in CLI11's help layout: options -x,--long and --long, one subcommand with its own.
cat > "$T/bin/fake-tool" <<'TOOL'
#!/bin/bash
if [ "${1:-}" = sub ]; then
  printf 'Usage: fake-tool sub [OPTIONS]\n\nOptions:\n  -h,--help  Print\n  --sub-only FLOAT=3  Only here\n'
  exit 0
fi
printf 'Usage: fake-tool [OPTIONS] SUBCOMMAND\n\nOptions:\n  -h,--help   Print\n  -n,--count INT  How many\n  --shown TEXT  Documented\n  --hidden    Not documented\n  --rules,--policy TEXT  Two names\n\nSubcommands:\n  sub          A subcommand\n                 wrapped description\n'
TOOL
chmod +x "$T/bin/fake-tool"
cat > "$T/man/cuda-agent.7" <<'ROFF'
Every tool takes \fB\-\-help\fR.
ROFF
cat > "$T/man/fake-tool.1" <<'ROFF'
.SH OPTIONS
.TP
\fB\-n\fR \fIN\fR
How many (only the short name is written).
.TP
.B \-\-shown
Documented. \-\-hiddenness is another word, not the option.
.TP
\fB\-\-policy\fR \fIYAML\fR
The second name of a pair.
.TP
.B \-\-removed
An option the tool no longer takes.
ROFF
rc=0
check --bin "$T/bin" --man "$T/man" > "$T/out" 2> "$T/err" || rc=$?
[[ $rc == 1 ]] || fail "fake tool: exit $rc, expected 1 ($(cat "$T/err"))"
cat > "$T/want" <<'WANT'
fake-tool -: --hidden is not in man/fake-tool.1 (nor in cuda-agent.7)
fake-tool sub: --sub-only is not in man/fake-tool.1 (nor in cuda-agent.7)
fake-tool: man/fake-tool.1 lists --removed, which no --help of fake-tool shows
WANT
diff -u "$T/want" "$T/out" || fail "fake tool: the findings differ (above)"
pass "fake tool: an undocumented option, one in a subcommand and a stale .TP entry found; short names, pairs, cuda-agent(7) and word boundaries fine"

cat >> "$T/man/fake-tool.1" <<'ROFF'
.SH SUBCOMMANDS
\fBsub\fR takes \fB\-\-sub\-only\fR \fIS\fR and \-\-hidden.
ROFF
sed -i '/removed/,+1d' "$T/man/fake-tool.1"
check --bin "$T/bin" --man "$T/man" > "$T/out" 2> "$T/err" || fail "fake tool, documented: exit $? ($(cat "$T/out"))"
pass "fake tool, every option documented: no findings"

check --bin "$CA_BIN" --man "$CA_SRC/man" || fail "options missing from the manual pages, or listed there and gone (above)"
pass "man/: every option of the seven tools documented, none listed that a tool lacks"
