#!/usr/bin/env bash
# No function over 80 lines in tools/ and libcommon/ without a `// long: <reason>` comment (issue
# 35): first the checker on its fixtures (it must fail where it should, and braces in literals and
# comments must not move a function's end), then on the tree, with long_functions.allow.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
HERE=$CA_SRC/tests/structure
check() { "$PY" "$HERE/long_functions.py" "$@"; }

# 1. Fixtures: exactly these are long and unvouched (path:line:name:length), and the run fails.
rc=0
check --root "$HERE/fixtures" braces.cpp kinds.cpp > "$T/out" 2> "$T/err" || rc=$?
[[ $rc == 1 ]] || fail "fixtures: exit $rc, expected 1 ($(cat "$T/err"))"
cat > "$T/want" <<'WANT'
braces.cpp:12:b_long_after_open_braces:91
braces.cpp:103:c_long_with_close_braces:91
kinds.cpp:5:Widget::method:88
kinds.cpp:95:handler:88
kinds.cpp:185:<lambda>:87
kinds.cpp:452:empty_reason:88
kinds.cpp:718:plus_lambda:88
WANT
diff -u "$T/want" "$T/out" || fail "fixtures: the checker's list differs (above)"
grep -q '7 function(s) over 80 lines' "$T/err" || fail "fixtures: no summary on stderr"
pass "fixtures: seven long functions found (one a +[] lambda), vouched and short ones (80 lines, class bodies) not"

# 1b. Python (the reference worker): defs at module and class scope, by Python's parser; a nested
# def is its function's; `# long:` on the def line or above its decorators vouches.
"$PY" - "$T/pyfuncs.py" <<'GEN'
import sys
L = ["import functools", ""]
def add(head, n, indent="    "):  # a def of n lines in all: its head, then n - len(head) body lines
    L.extend(head + [indent + "x = %d" % i for i in range(n - len(head))] + [""])
add(["def short():"], 6)
add(["def long_plain():"], 85)
add(["# long: a reason, in the comment block above the decorators", "@functools.lru_cache(maxsize=None)",
     "def long_vouched():"], 87)
add(["def long_on_def_line():  # long: the reason on the def line"], 85)
add(["def long_empty_reason():  # long:"], 84)
add(["class Holder(object):", "    def method(self):"], 84, "        ")
add(["def outer():", "    def inner():"] + ["        y = %d" % i for i in range(59)], 90)
add(["def just_eighty():"], 80)
open(sys.argv[1], "w").write("\n".join(L))
GEN
rc=0
check --root "$T" pyfuncs.py > "$T/out" 2> "$T/err" || rc=$?
[[ $rc == 1 ]] || fail "python fixtures: exit $rc, expected 1 ($(cat "$T/err"))"
cat > "$T/want" <<'WANT'
pyfuncs.py:10:long_plain:85
pyfuncs.py:270:long_empty_reason:84
pyfuncs.py:356:Holder.method:83
pyfuncs.py:440:outer:90
WANT
diff -u "$T/want" "$T/out" || fail "python fixtures: the checker's list differs (above)"
printf 'def f(:\n' > "$T/bad.py"
rc=0; check --root "$T" bad.py > /dev/null 2> "$T/err" || rc=$?
[[ $rc == 2 ]] && grep -q 'bad.py' "$T/err" || fail "broken python: exit $rc, expected 2 naming the file"
pass "python fixtures: four long defs found (a method, a def with a nested one), vouched and 80-line ones not"

# 2. The allowlist: an entry excuses its function; one that names nothing long fails the run.
printf '%s\n' 'kinds.cpp:Widget::method' 'kinds.cpp:handler' 'kinds.cpp:<lambda>' 'kinds.cpp:empty_reason' 'kinds.cpp:plus_lambda' \
  > "$T/allow"
check --root "$HERE/fixtures" --allow "$T/allow" kinds.cpp > "$T/out" || fail "allowlist: exit $?, expected 0"
[[ ! -s $T/out ]] || fail "allowlist: unexpected output: $(cat "$T/out")"
echo 'kinds.cpp:just_eighty  # 80 lines is not long' >> "$T/allow"
rc=0; check --root "$HERE/fixtures" --allow "$T/allow" kinds.cpp > "$T/out" || rc=$?
[[ $rc == 1 ]] || fail "stale allowlist entry: exit $rc, expected 1"
grep -q '^kinds.cpp:just_eighty: allowlist entry names no long function' "$T/out" || fail "stale entry not named"
pass "allowlist: entries excuse, a stale entry fails"

# 3. A longer limit passes the fixtures; unreadable input is exit 2.
check --root "$HERE/fixtures" --max 91 braces.cpp kinds.cpp > "$T/out" || fail "--max 91: exit $?, expected 0"
printf 'int f() {\n  return "unterminated;\n}\n' > "$T/bad.cpp"
rc=0; check --root "$T" bad.cpp > /dev/null 2> "$T/err" || rc=$?
[[ $rc == 2 ]] && grep -q 'bad.cpp' "$T/err" || fail "broken source: exit $rc, expected 2 naming the file"
pass "limit and broken input"

# 4. The tree.
check --root "$CA_SRC" --allow "$HERE/long_functions.allow" tools libcommon \
  || fail "tools/ and libcommon/ have long functions without a reason (listed above)"
pass "tools/ and libcommon/: every function over 80 lines says why"
