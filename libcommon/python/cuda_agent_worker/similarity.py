"""AST similarity of a task's Model class to a set of programs (decontamination against the
evaluation set; the published filter dropped tasks whose maximum similarity exceeded 0.9).

A program becomes the preorder sequence of its Model class's AST node types, keeping what says
which computation it is (attribute and call names such as `conv2d`, `relu`, operators) and
abstracting what does not (local names, `self.<attr>` names, constants, docstrings). Two sequences
compare with difflib's ratio (2*matches / total length), so 1.0 is the same structure."""
import ast
import difflib
import os

# Names kept verbatim: module aliases that say which library call it is.
_KEPT_NAMES = {"torch", "nn", "F", "functional", "math", "np", "numpy"}


def _tokens(node, out):
    if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
            and isinstance(node.value.value, str):
        return  # docstring
    out.append(type(node).__name__)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            out.append("self.*")
        else:
            out.append("." + node.attr)
    elif isinstance(node, ast.Name):
        out.append(node.id if node.id in _KEPT_NAMES else "*")
    elif isinstance(node, ast.keyword):
        out.append("kw:" + str(node.arg))
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.expr_context,)):
            continue
        _tokens(child, out)


def model_tokens(code):
    tree = ast.parse(code)
    target = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            target = node
            break
    out = []
    _tokens(target if target is not None else tree, out)
    return out


def similarity(a_tokens, b_tokens):
    if not a_tokens and not b_tokens:
        return 1.0
    return difflib.SequenceMatcher(None, a_tokens, b_tokens, autojunk=False).ratio()


def _raise(e):
    raise e


def programs_in_dir(path):
    # An unreadable folder is an error, never zero programs (a decontamination that compared nothing).
    progs = []
    for root, dirs, files in os.walk(path, onerror=_raise):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                full = os.path.join(root, f)
                with open(full, encoding="utf-8", errors="replace") as fh:
                    progs.append({"name": os.path.relpath(full, path), "code": fh.read()})
    return progs


def run(req):
    if "code" not in req:
        raise ValueError("similarity needs 'code'")
    programs = req.get("programs")
    if programs is None:
        if "dir" not in req:
            raise ValueError("similarity needs 'programs' or 'dir'")
        programs = programs_in_dir(req["dir"])
    mine = model_tokens(req["code"])
    scored = []
    skipped = []
    for p in programs:
        try:
            scored.append((similarity(mine, model_tokens(p["code"])), p["name"]))
        except SyntaxError as e:
            skipped.append({"name": p.get("name"), "error": "SyntaxError: %s" % e})
    scored.sort(key=lambda x: (-x[0], x[1]))
    best = scored[0] if scored else (0.0, None)
    return {"max": best[0], "program": best[1], "n": len(scored),
            "top": [{"name": n, "similarity": s} for s, n in scored[:5]], "skipped": skipped}
