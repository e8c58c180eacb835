#!/usr/bin/env python3
"""Validate JSON Lines records against schemas/<kind>.schema.json (draft 2020-12).

usage: validate_schema.py KIND [FILE]   (FILE default stdin; KIND e.g. task, check, prof)
A section kind (check, prof, reward, episode) validates that section of each record.
Exit 0 when every record validates, 1 otherwise (each failure printed with its line).
"""
import json
import os
import sys

import jsonschema

SECTIONS = {"check", "prof", "reward", "episode"}


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    kind = sys.argv[1]
    src = os.environ.get("CA_SRC", os.path.join(os.path.dirname(__file__), ".."))
    with open(os.path.join(src, "schemas", kind + ".schema.json")) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    stream = open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin
    bad = count = 0
    for lineno, line in enumerate(stream, 1):
        if not line.strip():
            continue
        record = json.loads(line)
        target = record.get(kind) if kind in SECTIONS else record
        if target is None:
            continue
        count += 1
        for err in validator.iter_errors(target):
            bad += 1
            print(f"line {lineno}: {kind}: {'/'.join(map(str, err.path))}: {err.message}", file=sys.stderr)
    if count == 0:
        print(f"no {kind} records to validate", file=sys.stderr)
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
