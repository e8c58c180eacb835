#!/usr/bin/env python3
"""Namespaces follow folders, by one rule (issue 35):

    libcommon/<area>/...   ca::<area>            (libcommon/nn_cuda/ -> ca::nn_cuda)
    libcommon/<file>       ca                    (or a name nested in it that is no area's or tool's)
    tools/<tool>/...       ca::<tool>, '-' as '_' (tools/kernel-check/ -> ca::kernel_check)

A namespace nested inside the folder's (ca::bundle::detail, an anonymous one) follows it too; an
enclosing one (ca around ca::nn) may hold namespaces and forward declarations only; other
libraries' namespaces (std, nlohmann, CLI, re2) may be opened for specializations and declarations. Checks every *.cpp *.hpp *.cu *.cuh under
tools/ and libcommon/ and lists path:line:namespace (expected ...) for each one that breaks the
rule and is not in --allow (entries `path:namespace`; a stale entry fails, so the list only shrinks).
Exit status: 0 all follow, 1 outliers (on stdout), 2 bad usage or unreadable input.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_functions import EXTENSIONS, blank, match_forward, read_allow, sources  # noqa: E402

FORWARD_DECL = re.compile(r"\b(?:class|struct|union)\s+[A-Za-z_][A-Za-z0-9_]*\s*;")
NAMESPACE = re.compile(r"\b(inline\s+)?namespace\b\s*([A-Za-z_][A-Za-z0-9_:]*)?\s*(=|\{)")


def expected(rel, areas, tools):
    parts = rel.split("/")
    if parts[0] == "tools":
        return "ca::" + parts[1].replace("-", "_")
    if parts[0] == "libcommon" and len(parts) > 2:
        return "ca::" + parts[1]
    return "ca"


def follows(path, want, areas, tools):
    if path[0] != "ca":
        return True  # another library's namespace
    if path[:len(want)] != want:
        return False
    if want == ["ca"] and len(path) > 1 and (path[1] in areas or path[1] in tools):
        return False  # a top-level libcommon file in an area's or a tool's namespace
    return True


def scan(text):
    """(line, qualified path as a list, body has code outside nested namespaces) per named
    namespace body, outermost first; anonymous namespaces are transparent."""
    s = blank(text)
    found = []

    def line_of(pos):
        return text.count("\n", 0, pos) + 1

    def walk(i, end, stack):
        has_code = False
        while i < end:
            m = NAMESPACE.search(s, i, end)
            chunk_end = m.start() if m else end
            if re.search(r"[^\s;]", FORWARD_DECL.sub(" ", s[i:chunk_end])):
                has_code = True
            if not m:
                break
            if m.group(3) == "=":  # an alias: namespace fs = std::filesystem;
                semi = s.find(";", m.end())
                i = end if semi < 0 else semi + 1
                continue
            brace = m.end() - 1
            close = match_forward(s, brace, "{", "}")
            if close < 0:
                raise ValueError("unbalanced '{' at line %d" % line_of(brace))
            name = m.group(2)
            path = stack + (name.split("::") if name else [])
            inner_code = walk(brace + 1, close, path)
            if name:
                found.append((line_of(m.start()), path, inner_code))
            elif inner_code:
                has_code = True
            i = close + 1
        return has_code

    walk(0, len(s), [])
    return found


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".")
    ap.add_argument("--allow", help="file of path:namespace entries allowed for now")
    args = ap.parse_args(argv)
    try:
        allow = read_allow(args.allow) if args.allow else {}
    except (OSError, ValueError) as e:
        print("namespaces: %s" % e, file=sys.stderr)
        return 2
    areas = {d for d in os.listdir(os.path.join(args.root, "libcommon"))
             if os.path.isdir(os.path.join(args.root, "libcommon", d))}
    tools = {d.replace("-", "_") for d in os.listdir(os.path.join(args.root, "tools"))
             if os.path.isdir(os.path.join(args.root, "tools", d))}
    bad, used = [], set()
    for rel in sources(args.root, ["tools", "libcommon"]):
        try:
            with open(os.path.join(args.root, rel), encoding="utf-8") as f:
                found = scan(f.read())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            print("namespaces: %s: %s" % (rel, e), file=sys.stderr)
            return 2
        want = expected(rel, areas, tools)
        for line, path, has_code in found:
            name = "::".join(path)
            ok = follows(path, want.split("::"), areas, tools)
            # An enclosing namespace (ca around ca::kernel_check) may hold only namespaces.
            if not ok and has_code is False and want.split("::")[:len(path)] == path:
                ok = True
            if ok:
                continue
            key = "%s:%s" % (rel, name)
            if key in allow:
                used.add(key)
                continue
            bad.append("%s:%d:%s (expected %s)" % (rel, line, name, want))
    for b in bad:
        print(b)
    stale = sorted(set(allow) - used)
    for s in stale:
        print("%s: allowlist entry names no outlier any more: remove it" % s)
    if bad:
        print("namespaces: %d namespace(s) do not follow their folder (libcommon/<area>/ -> ca::<area>, "
              "libcommon/<file> -> ca, tools/<tool>/ -> ca::<tool> with '-' as '_')" % len(bad), file=sys.stderr)
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
