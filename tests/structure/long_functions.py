#!/usr/bin/env python3
"""No function over 80 lines without a comment saying why (issue 35).

Finds every function body in the given C++/CUDA sources (default: tools/ and libcommon/ under
--root, *.cpp *.hpp *.cu *.cuh) and fails, listing path:line:name:length, for each one longer than
--max lines that no `// long: <reason>` comment vouches for.

What counts as a function: a body that follows a signature at namespace or class scope (free
functions, methods, constructors, operators) and a lambda that sits at namespace or class scope (a
lambda assigned to a variable, or inside an initializer such as a command table). A function's
length runs from the first line of its signature to its closing brace. Whatever is inside a
function body (its lambdas, local classes) is part of that function, not a function of its own.
Namespace, class, struct, union, enum and extern "C" bodies are containers, not functions.

The scan blanks comments, string and character literals (raw strings too) and preprocessor lines
before it matches braces, so a brace in any of those never counts.

Where the comment goes: `// long: <reason>` (a reason is required) on the first line of the
signature, or in the block of `//` comment lines directly above it.

--allow FILE: entries `path:name` (one a line, `#` comments) that may be long without a comment:
files another change is rewriting. An entry that no longer names a long function fails the run,
so the list only shrinks.

Python sources (*.py: the reference worker under libcommon/python) by the same rule, read with
Python's own parser: a function is a def at module or class scope (a def inside a function is part
of it), from its `def` line to its last line; the comment is `# long: <reason>` on the `def` line or
in the block of `#` comment lines directly above it (or above its decorators).

Exit status: 0 all vouched for, 1 violations (listed on stdout), 2 bad usage or unreadable input.
"""
import argparse
import ast
import os
import re
import sys

EXTENSIONS = (".cpp", ".hpp", ".cu", ".cuh")  # C++ (namespaces.py reads these too)
PY_EXTENSIONS = (".py",)
LONG_COMMENT = re.compile(r"//\s*long:\s*\S")
PY_LONG_COMMENT = re.compile(r"#\s*long:\s*\S")
IDENT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def blank(text):
    """Returns text with comments, literals' contents and preprocessor lines replaced by spaces
    (newlines kept, so offsets and line numbers stay those of the source). A literal keeps its
    quotes, so `extern "C"` still reads as such."""
    out = list(text)
    n = len(text)
    i = 0
    at_line_start = True

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if at_line_start and c == "#":
            # A preprocessor directive, with its backslash continuations.
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            # A comment may start on a directive line and run past it: blank through its end.
            seg = text[i:j]
            k = seg.find("/*")
            if k >= 0 and seg.find("*/", k + 2) < 0 and "//" not in seg[:k]:
                end = text.find("*/", i + k + 2)
                j = n if end < 0 else end + 2
            wipe(i, j)
            i = j
            continue
        at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
            continue
        if c == '"':
            m = re.search(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$", text[max(0, i - 4):i])
            if m:  # raw string R"delim( ... )delim"
                paren = text.find("(", i + 1)
                if paren < 0:
                    raise ValueError("raw string without '('")
                delim = text[i + 1:paren]
                end = text.find(")" + delim + '"', paren + 1)
                if end < 0:
                    raise ValueError("unterminated raw string")
                wipe(i + 1, end + len(delim) + 1)
                i = end + len(delim) + 2
                continue
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n":
                    raise ValueError("newline inside a string literal")
                j += 1
            wipe(i + 1, j)
            i = j + 1
            continue
        if c == "'":
            # A digit separator (1'000'000) or a character literal ('{', u8'x', L'\'').
            k = i
            while k > 0 and (text[k - 1] in IDENT_CHARS or text[k - 1] in ".'"):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'":
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n":
                    raise ValueError("newline inside a character literal")
                j += 1
            wipe(i + 1, j)
            i = j + 1
            continue
        i += 1
    return "".join(out)


def match_forward(s, i, open_c, close_c):
    """Index of the bracket closing the one at s[i], or -1."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


def match_backward(s, i, open_c, close_c):
    """Index of the bracket opening the one at s[i], or -1."""
    depth = 0
    for j in range(i, -1, -1):
        if s[j] == close_c:
            depth += 1
        elif s[j] == open_c:
            depth -= 1
            if depth == 0:
                return j
    return -1


LAMBDA_TAIL_WORDS = re.compile(r"\s*\b(mutable|constexpr|consteval|noexcept|static)\s*$")
LAMBDA_BEFORE = set("(,={[:?;&|!+-*/%<>~^")


def is_lambda_tail(head):
    """True when head (the text before a '{') ends with a lambda's introducer:
    [captures] <template>? (params)? specifiers? (-> type)?"""
    s = head.rstrip()
    arrow = s.rfind("->")
    if arrow >= 0:
        before = s[:arrow].rstrip()
        if before.endswith(")") or before.endswith("]") or LAMBDA_TAIL_WORDS.search(before):
            s = before
    while True:
        m = LAMBDA_TAIL_WORDS.search(s)
        if not m:
            break
        s = s[:m.start()].rstrip()
    if s.endswith(")"):
        k = match_backward(s, len(s) - 1, "(", ")")
        if k < 0:
            return False
        s = s[:k].rstrip()
        if s.endswith(">"):
            k = match_backward(s, len(s) - 1, "<", ">")
            if k < 0:
                return False
            s = s[:k].rstrip()
    if not s.endswith("]"):
        return False
    k = match_backward(s, len(s) - 1, "[", "]")
    if k < 0:
        return False
    before = s[:k].rstrip()
    return before == "" or before[-1] in LAMBDA_BEFORE or re.search(r"\breturn$", before) is not None


def strip_template_prefix(h):
    while True:
        m = re.match(r"\s*template\s*<", h)
        if not m:
            return h
        k = match_forward(h, m.end() - 1, "<", ">")
        if k < 0:
            return h
        h = h[k + 1:]


ACCESS = re.compile(r"^\s*(?:(?:public|private|protected)\s*:(?!:)\s*)+")
CONTAINER = re.compile(r"^\s*(?:\[\[[^\]]*\]\]\s*)*(?:typedef\s+)?(?:inline\s+)?(namespace|class|struct|union|enum)\b")


def top_level(h, chars):
    """Positions in h of any of chars outside (), [] and {}."""
    depth = 0
    found = []
    for k, c in enumerate(h):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and c in chars:
            found.append(k)
    return found


def classify(head):
    """What a '{' at namespace or class scope opens, from the text before it since the last
    ';', '{' or '}': 'container', 'skip' (enum), 'function', 'lambda', 'member_init' (a braced
    member initializer inside a constructor's init list: the head goes on) or 'init'."""
    h = ACCESS.sub("", head)
    h = strip_template_prefix(h)
    h_ops = re.sub(r"\boperator\s*(?:\(\s*\)|\[\s*\]|[^\sA-Za-z0-9_(]+)", "operator@", h)
    if h_ops.count("(") > h_ops.count(")"):
        # Inside a call's arguments: `Registrar r(f, [](int) {`.
        return "lambda" if is_lambda_tail(h_ops) else "init"
    if top_level(h_ops, "="):
        return "lambda" if is_lambda_tail(h_ops) else "init"
    if re.match(r'^\s*extern\s*"', h_ops):
        return "container"
    m = CONTAINER.match(h_ops)
    if m and "(" not in h_ops.split(m.group(1), 1)[1].split(":")[0].replace("alignas(", ""):
        return "skip" if m.group(1) == "enum" else "container"
    if m and m.group(1) in ("namespace",):
        return "container"
    if "(" not in h_ops:
        return "init"
    # A constructor's init list `) : a_(x), b_{` - the brace after a member name is its initializer.
    if re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", h_ops) and re.search(r"[A-Za-z0-9_>]\s*$", h_ops):
        return "member_init"
    return "function"


ATTRIBUTES = re.compile(r"\b(?:__launch_bounds__|__attribute__|__declspec|alignas)\s*\((?:[^()]|\([^()]*\))*\)|\[\[[^\]]*\]\]")


def function_name(head, kind):
    h = ACCESS.sub("", head)
    h = ATTRIBUTES.sub(" ", strip_template_prefix(h))
    if kind == "lambda":
        eq = top_level(h, "=")
        if eq:
            m = re.search(r"([A-Za-z_][A-Za-z0-9_:]*)\s*(?:\[[^\]]*\])?\s*$", h[:eq[0]])
            if m:
                return m.group(1)
        return "<lambda>"
    m = re.search(r"((?:[A-Za-z_][A-Za-z0-9_]*\s*(?:<[^(){};]*>)?\s*::\s*)*~?\s*operator\s*(?:\(\s*\)|\[\s*\]|[^\sA-Za-z0-9_(]+|\s[A-Za-z_][A-Za-z0-9_:<>\s*&]*?))\s*\(", h)
    if m:
        return re.sub(r"\s+", "", m.group(1))
    m = re.search(r"((?:[A-Za-z_][A-Za-z0-9_]*\s*(?:<[^(){};]*>)?\s*::\s*)*~?[A-Za-z_][A-Za-z0-9_]*)\s*\(", h)
    return re.sub(r"\s+", "", m.group(1)) if m else "<unnamed>"


class Scanner:
    def __init__(self, text):
        self.src = text
        self.s = blank(text)
        self.line_starts = [0]
        for k, c in enumerate(text):
            if c == "\n":
                self.line_starts.append(k + 1)
        self.functions = []  # (first line, name, length, signature offset)

    def line_of(self, pos):
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def close_of(self, i):
        j = match_forward(self.s, i, "{", "}")
        if j < 0:
            raise ValueError("unbalanced '{' at line %d" % self.line_of(i))
        return j

    def scan(self):
        end = self.scope(0, len(self.s), [], "container")
        if end != len(self.s):
            raise ValueError("unbalanced '}' at line %d" % self.line_of(end))
        return self.functions

    def scope(self, i, end, names, mode):
        """Walks a container ('container': namespace, class or file) or an initializer ('init')
        from i up to end (a '}' or the file's end); returns where it stopped."""
        head_start = i
        s = self.s
        while i < end:
            c = s[i]
            if c == "}":
                return i
            if c == ";":
                head_start = i + 1
                i += 1
                continue
            if c != "{":
                i += 1
                continue
            head = s[head_start:i]
            kind = classify(head) if mode == "container" else ("lambda" if is_lambda_tail(head) else "init")
            close = self.close_of(i)
            if kind == "member_init":
                i = close + 1
                continue
            if kind in ("function", "lambda"):
                sig = head_start + (len(head) - len(ACCESS.sub("", head).lstrip()))
                if mode == "init":
                    # In an initializer the head holds earlier elements too: start at the '['.
                    sig = self.lambda_start(head_start, i)
                name = function_name(head, kind)
                if names and kind == "function" and "::" not in name:
                    name = names[-1] + "::" + name
                first = self.line_of(sig)
                self.functions.append((first, name, self.line_of(close) - first + 1, sig))
            elif kind == "container":
                m = re.search(r"\b(?:namespace|class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(?:alignas\s*\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_:]*)", ACCESS.sub("", head))
                inner = names + ([m.group(1)] if m and not head.lstrip().startswith("namespace") else [])
                stop = self.scope(i + 1, close, inner, "container")
                if stop != close:
                    raise ValueError("unbalanced braces at line %d" % self.line_of(stop))
            elif kind == "init":
                self.scope(i + 1, close, names, "init")
            i = close + 1
            head_start = i
        return i

    def lambda_start(self, head_start, brace):
        """Where the lambda that ends at brace begins: its '['."""
        depth = 0
        k = brace - 1
        s = self.s
        # The introducer's '[' is the last '[' at depth 0 (ignoring () and <> of its parameters).
        while k >= head_start:
            c = s[k]
            if c in ")]":
                depth += 1
            elif c in "([":
                depth -= 1
                if depth == 0 and c == "[":
                    return k
            k -= 1
        return head_start

    def vouched(self, sig):
        """A `// long: reason` on the signature's first line or in the comment block above it."""
        lines = self.src.split("\n")
        first = self.line_of(sig) - 1
        if LONG_COMMENT.search(lines[first]):
            return True
        k = first - 1
        while k >= 0 and lines[k].strip().startswith("//"):
            if LONG_COMMENT.search(lines[k]):
                return True
            k -= 1
        return False


class PyScanner(object):
    """Python's functions, as Scanner gives C++'s: (first line, name, length, def node)."""

    def __init__(self, text, path):
        self.lines = text.split("\n")
        try:
            self.tree = ast.parse(text, filename=path)
        except SyntaxError as e:
            raise ValueError("line %s: %s" % (e.lineno, e.msg))

    def scan(self):
        out = []

        def visit(body, prefix):
            for n in body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((n.lineno, prefix + n.name, n.end_lineno - n.lineno + 1, n))
                elif isinstance(n, ast.ClassDef):
                    visit(n.body, prefix + n.name + ".")
        visit(self.tree.body, "")
        return out

    def vouched(self, node):
        """A `# long: reason` on the def line or in the comment block above it (and its decorators)."""
        if PY_LONG_COMMENT.search(self.lines[node.lineno - 1]):
            return True
        top = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        k = top - 1
        while k >= 0 and self.lines[k].strip().startswith("#"):
            if PY_LONG_COMMENT.search(self.lines[k]):
                return True
            k -= 1
        return False


def sources(root, dirs, extensions=EXTENSIONS):
    for d in dirs:
        base = os.path.join(root, d)
        if os.path.isfile(base):
            yield d
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(extensions):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def read_allow(path):
    allow = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            if ":" not in entry:
                raise ValueError("%s: line %d: expected path:name, got %r" % (path, lineno, entry))
            allow[entry] = lineno
    return allow


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=".", help="the source tree (default: .)")
    ap.add_argument("--max", type=int, default=80, help="the most lines without a reason (default 80)")
    ap.add_argument("--allow", help="file of path:name entries allowed to be long for now")
    ap.add_argument("--list", action="store_true", help="print every function over --max, vouched or not")
    ap.add_argument("paths", nargs="*", default=["tools", "libcommon"],
                    help="folders or files under --root (default: tools libcommon)")
    args = ap.parse_args(argv)
    try:
        allow = read_allow(args.allow) if args.allow else {}
    except (OSError, ValueError) as e:
        print("long_functions: %s" % e, file=sys.stderr)
        return 2
    used = set()
    bad = []
    scanned = 0
    for rel in sources(args.root, args.paths, EXTENSIONS + PY_EXTENSIONS):
        try:
            with open(os.path.join(args.root, rel), encoding="utf-8") as f:
                text = f.read()
            sc = PyScanner(text, rel) if rel.endswith(".py") else Scanner(text)
            functions = sc.scan()
        except (OSError, UnicodeDecodeError, ValueError) as e:
            print("long_functions: %s: %s" % (rel, e), file=sys.stderr)
            return 2
        scanned += 1
        for first, name, length, sig in functions:
            if length <= args.max:
                continue
            ok = sc.vouched(sig)
            key = "%s:%s" % (rel, name)
            if args.list:
                print("%s:%d:%s:%d%s" % (rel, first, name, length, "" if ok else (" (allowed)" if key in allow else " (no reason)")))
            if ok:
                continue
            if key in allow:
                used.add(key)
                continue
            bad.append("%s:%d:%s:%d" % (rel, first, name, length))
    if scanned == 0:
        print("long_functions: no sources under %s" % ", ".join(args.paths), file=sys.stderr)
        return 2
    stale = sorted(set(allow) - used)
    if args.list:
        return 0
    for b in bad:
        print(b)
    for s in stale:
        print("%s: allowlist entry names no long function any more: remove it" % s)
    if bad:
        print("long_functions: %d function(s) over %d lines without a `// long: <reason>` (`# long:`) comment on "
              "the signature's first line or just above it: cut them at their seams, or say why"
              % (len(bad), args.max), file=sys.stderr)
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
