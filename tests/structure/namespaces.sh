#!/usr/bin/env bash
# Namespaces follow folders by one rule (issue 35): libcommon/<area>/ -> ca::<area>, libcommon/<file>
# -> ca, tools/<tool>/ -> ca::<tool> with '-' as '_'. First the checker on a small tree it must
# fail on, then on this tree, with no allowlist: every outlier was renamed (issue 35).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
HERE=$CA_SRC/tests/structure
check() { "$PY" "$HERE/namespaces.py" "$@"; }

R=$T/tree
mkdir -p "$R/libcommon/area" "$R/tools/my-tool"
cat > "$R/libcommon/top.hpp" <<'CPP'
namespace ca { int top(); }
namespace ca::log { void info(); }
namespace std { template <> struct hash<int>; }
CPP
cat > "$R/libcommon/area/a.hpp" <<'CPP'
// "namespace ca::wrong {" in a comment and a string does not count
namespace ca { class Forward; }
namespace ca::area { const char* s = "namespace ca::wrong {"; namespace detail { int x; } }
namespace ca::area::detail { int y; }
namespace fs = std::filesystem;
namespace { int hidden; }
CPP
cat > "$R/tools/my-tool/b.cpp" <<'CPP'
namespace ca { namespace my_tool { int ok(); } }
namespace ca::mytool { int wrong(); }
CPP
cat > "$R/libcommon/area/c.cpp" <<'CPP'
namespace ca { int code_in_ca(); }
namespace ca::my_tool { int wrong(); }
CPP
cat > "$R/libcommon/d.cpp" <<'CPP'
namespace ca::area { int wrong(); }
CPP
rc=0
check --root "$R" > "$T/out" 2> "$T/err" || rc=$?
[[ $rc == 1 ]] || fail "fixture tree: exit $rc, expected 1 ($(cat "$T/err"))"
cat > "$T/want" <<'WANT'
libcommon/d.cpp:1:ca::area (expected ca)
libcommon/area/c.cpp:1:ca (expected ca::area)
libcommon/area/c.cpp:2:ca::my_tool (expected ca::area)
tools/my-tool/b.cpp:2:ca::mytool (expected ca::my_tool)
WANT
diff -u <(sort "$T/want") <(sort "$T/out") || fail "fixture tree: the outliers listed differ (above)"
pass "fixture tree: four outliers found; nesting, forward declarations, aliases, literals fine"

printf '%s\n' 'libcommon/d.cpp:ca::area' 'libcommon/area/c.cpp:ca' 'libcommon/area/c.cpp:ca::my_tool' \
  'tools/my-tool/b.cpp:ca::mytool' > "$T/allow"
check --root "$R" --allow "$T/allow" > "$T/out" || fail "allowlisted fixture: exit $?, expected 0"
echo 'tools/my-tool/b.cpp:ca::my_tool' >> "$T/allow"
rc=0; check --root "$R" --allow "$T/allow" > "$T/out" || rc=$?
[[ $rc == 1 ]] && grep -q 'ca::my_tool: allowlist entry names no outlier' "$T/out" || fail "stale entry: exit $rc"
pass "allowlist: entries excuse, a stale one fails"

check --root "$CA_SRC" \
  || fail "namespaces in tools/ and libcommon/ that do not follow their folder (listed above)"
pass "tools/ and libcommon/: every namespace follows its folder"
