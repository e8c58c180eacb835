#!/usr/bin/env python3
"""Print one candidate record (JSON line) for a bundle folder: kernels = its *.cu/*.cuh files,
plan = plan.yaml as text, task = task.json (unless --no-task).

usage: make_candidate.py DIR [--no-task] [--replace FILE OLD NEW]... [--plan-replace OLD NEW]...
       [--add-file NAME TEXT] [--task-set KEY JSON]
Standard library only, so any python3 runs it.
"""
import json
import os
import sys


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    d = args.pop(0)
    kernels, plan, with_task = {}, None, True
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        if name.endswith((".cu", ".cuh", ".h")):
            kernels[name] = open(path).read()
        elif name == "plan.yaml":
            plan = open(path).read()
    task = json.load(open(os.path.join(d, "task.json")))
    while args:
        a = args.pop(0)
        if a == "--no-task":
            with_task = False
        elif a == "--replace":
            f, old, new = args.pop(0), args.pop(0), args.pop(0)
            if old not in kernels[f]:
                sys.exit(f"make_candidate: '{old}' not in {f}")
            kernels[f] = kernels[f].replace(old, new)
        elif a == "--plan-replace":
            old, new = args.pop(0), args.pop(0)
            if old not in plan:
                sys.exit(f"make_candidate: '{old}' not in plan.yaml")
            plan = plan.replace(old, new)
        elif a == "--add-file":
            name = args.pop(0)  # (the right side of an assignment is evaluated first)
            kernels[name] = args.pop(0)
        elif a == "--task-set":
            key = args.pop(0)
            task[key] = json.loads(args.pop(0))
        else:
            sys.exit(f"make_candidate: unknown option {a}")
    rec = {"task_id": task["task_id"], "bundle": {"kernels": kernels, "plan": plan}}
    if with_task:
        rec["task"] = task
    print(json.dumps(rec))
    return 0


if __name__ == "__main__":
    sys.exit(main())
