#!/usr/bin/env python3
"""Takes the volatile fields out of a tool's stdout (stdin -> stdout) so golden files can be exact.

usage: golden_normalize.py [--drop KEY.PATH]... [--number-key KEY LABEL]... [--number REGEX LABEL]...
                           [--sub REGEX REPL]...
  --drop check.compile_ms   delete that key of every JSON line (dotted path; lists apply to each item)
  --number-key run_id RUN   each distinct value of KEY, at any depth, becomes RUN-1, RUN-2, ... in the
                            order they first appear (ids that are random but whose sharing matters)
  --number REGEX LABEL      text: each distinct match (group 1 if the REGEX has one) becomes LABEL1,
                            LABEL2, ... padded with '_' to the match's length (tables stay aligned)
  --sub REGEX REPL          text: re.sub on every line, after the JSON options
  --literal OLD NEW         text: every OLD (a plain string, e.g. the source tree's path) becomes NEW
  --explain EXPECTED ACTUAL the keys that differ in the first differing JSON lines of two files
                            (golden_suite prints it under the diff: records are long lines)
A line untouched by the JSON options is passed on byte for byte; a changed one is written compactly
(no spaces, keys in their order), as the tools write. Standard library only, so any python3 runs it.
"""
import json
import re
import sys


def drop(obj, path):
    if isinstance(obj, list):
        for item in obj:
            drop(item, path)
        return
    if not isinstance(obj, dict) or path[0] not in obj:
        return
    if len(path) == 1:
        del obj[path[0]]
    else:
        drop(obj[path[0]], path[1:])


def number_key(obj, key, label, seen):
    if isinstance(obj, list):
        return [number_key(v, key, label, seen) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k == key and isinstance(v, str):
            v = seen.setdefault(v, f"{label}-{len(seen) + 1}")
        else:
            v = number_key(v, key, label, seen)
        out[k] = v
    return out


def paths(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in b or k not in a:
                yield f"{where}.{k}: {'only expected' if k in a else 'only actual'}"
            else:
                yield from paths(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from paths(x, y, f"{where}[{i}]")
    elif a != b or type(a) is not type(b):
        ja, jb = json.dumps(a), json.dumps(b)
        yield f"{where or '.'}: {ja[:150]} -> {jb[:150]}"


def explain(expected, actual, most=5):
    a, b = open(expected).read().splitlines(), open(actual).read().splitlines()
    if len(a) != len(b):
        print(f"  {len(a)} lines expected, {len(b)} actual")
    shown = 0
    for n, (x, y) in enumerate(zip(a, b), 1):
        if x == y:
            continue
        try:
            diffs = list(paths(json.loads(x), json.loads(y)))
        except ValueError:
            continue
        print(f"  line {n}: " + ("; ".join(diffs[:8]) if diffs else "same JSON, other text"))
        shown += 1
        if shown == most:
            break
    return 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["--explain"]:
        return explain(args[1], args[2])
    drops, keys, numbers, subs = [], [], [], []
    while args:
        a = args.pop(0)
        if a == "--drop":
            drops.append(args.pop(0).split("."))
        elif a == "--number-key":
            keys.append((args.pop(0), args.pop(0), {}))
        elif a == "--number":
            numbers.append((re.compile(args.pop(0)), args.pop(0), {}))
        elif a == "--sub":
            subs.append((re.compile(args.pop(0)), args.pop(0)))
        elif a == "--literal":
            old, new = args.pop(0), args.pop(0)
            subs.append((re.compile(re.escape(old)), new.replace("\\", "\\\\")))
        else:
            sys.exit(f"golden_normalize: unknown option {a}\n{__doc__}")
    for line in sys.stdin:
        end = "\n" if line.endswith("\n") else ""
        text = line[: len(line) - len(end)]
        if (drops or keys) and text.lstrip().startswith("{"):
            try:
                rec = json.loads(text)
            except ValueError:
                rec = None
            if isinstance(rec, dict):
                for path in drops:
                    drop(rec, path)
                for key, label, seen in keys:
                    rec = number_key(rec, key, label, seen)
                new = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
                if json.loads(new) != json.loads(text):
                    text = new
        for rx, label, seen in numbers:
            def repl(m, label=label, seen=seen):
                g = 1 if m.re.groups else 0
                old = m.group(g)
                new = seen.setdefault(old, f"{label}{len(seen) + 1}")
                new = new.ljust(len(old), "_")
                s, e = m.span(g)
                return m.group(0)[: s - m.start()] + new + m.group(0)[e - m.start():]
            text = rx.sub(repl, text)
        for rx, repl in subs:
            text = rx.sub(repl, text)
        sys.stdout.write(text + end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
