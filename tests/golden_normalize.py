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


def main():
    args = sys.argv[1:]
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
