#!/usr/bin/env python3
"""Check ops-synth task records with CPU torch.

usage: check_tasks.py FILE [--run N] [--every K] [--min-ok M] [--mix TOL] [--min-classes C]
  every record: `code` parses (ast), has Model / get_inputs / get_init_inputs, ids unique;
  --run N: run the first N records (or every K-th, --every) on CPU: build Model(*get_init_inputs()),
           forward(*get_inputs()), compare output shapes and dtypes with the declared `outputs`
           and input shapes with `inputs`; --min-ok M: at least M must pass (default: all run).
  --mix TOL: the share of each category (synth.category) is within TOL points of the published
           Ops-6K mix; --min-classes C: at least C distinct op classes (name pieces) used.
Prints one JSON summary line on stdout; failures on stderr. Exit 0 when every check holds.
"""
import argparse
import ast
import json
import sys
import time

PUBLISHED = {"1": 3.40, "2": 83.77, "3": 7.62, "4": 2.80, "5": 1.23, "module": 1.18}
DTYPES = {"F32": "torch.float32", "I64": "torch.int64", "F16": "torch.float16", "BF16": "torch.bfloat16"}


def run_one(rec, torch):
    ns = {}
    exec(compile(rec["code"], "<task %s>" % rec["task_id"], "exec"), ns)
    torch.manual_seed(0)
    init = ns["get_init_inputs"]()
    if init != rec["init_inputs"]:
        return "init_inputs %r != declared %r" % (init, rec["init_inputs"])
    model = ns["Model"](*init)
    inputs = ns["get_inputs"]()
    for i, (t, spec) in enumerate(zip(inputs, rec["inputs"])):
        if list(t.shape) != spec["shape"] or str(t.dtype) != DTYPES[spec["dtype"]]:
            return "input %d: %s %s, declared %s %s" % (i, list(t.shape), t.dtype, spec["shape"], spec["dtype"])
    if len(inputs) != len(rec["inputs"]):
        return "get_inputs gave %d tensors, declared %d" % (len(inputs), len(rec["inputs"]))
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(rec["outputs"]):
        return "%d outputs, declared %d" % (len(outs), len(rec["outputs"]))
    for i, (t, spec) in enumerate(zip(outs, rec["outputs"])):
        if list(t.shape) != spec["shape"] or str(t.dtype) != DTYPES[spec["dtype"]]:
            return "output %d: %s %s, declared %s %s" % (i, list(t.shape), t.dtype, spec["shape"], spec["dtype"])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--run", type=int, default=0)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--min-ok", type=int, default=-1)
    ap.add_argument("--mix", type=float, default=None)
    ap.add_argument("--min-classes", type=int, default=0)
    args = ap.parse_args()
    recs = [json.loads(l) for l in open(args.file) if l.strip()]
    failures = []
    ids = set()
    for i, r in enumerate(recs):
        if r["task_id"] in ids:
            failures.append("record %d: duplicate task_id %s" % (i, r["task_id"]))
        ids.add(r["task_id"])
        try:
            tree = ast.parse(r["code"])
        except SyntaxError as e:
            failures.append("record %d (%s): code does not parse: %s" % (i, r["name"], e))
            continue
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for need in ("Model", "get_inputs", "get_init_inputs"):
            if need not in names:
                failures.append("record %d (%s): no %s" % (i, r["name"], need))
    summary = {"records": len(recs), "unique_ids": len(ids)}
    cats = {}
    classes = set()
    for r in recs:
        c = r.get("synth", {}).get("category", r["data_source"].split("#")[-1])
        cats[c] = cats.get(c, 0) + 1
        if r["data_source"].startswith("torch#"):
            classes.update(r["name"].split("_"))
    summary["mix_percent"] = {k: round(100.0 * v / len(recs), 2) for k, v in sorted(cats.items())}
    summary["op_classes"] = len(classes)
    if args.mix is not None:
        for k, p in PUBLISHED.items():
            got = 100.0 * cats.get(k, 0) / len(recs)
            if abs(got - p) > args.mix:
                failures.append("mix: category %s is %.2f%%, published %.2f%% (tolerance %.1f points)" % (k, got, p, args.mix))
    if len(classes) < args.min_classes:
        failures.append("only %d op classes, need %d" % (len(classes), args.min_classes))
    if args.run:
        import torch
        torch.set_num_threads(1)
        picked = recs[:: args.every][: args.run]
        ok = 0
        t0 = time.time()
        for r in picked:
            try:
                err = run_one(r, torch)
            except Exception as e:  # the task raised
                err = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            if err:
                print("run %s (%s): %s" % (r["task_id"], r["name"], err), file=sys.stderr)
            else:
                ok += 1
        need = len(picked) if args.min_ok < 0 else args.min_ok
        summary.update({"ran": len(picked), "ran_ok": ok, "run_seconds": round(time.time() - t0, 2),
                        "torch": torch.__version__})
        if ok < need:
            failures.append("only %d of %d tasks ran with the declared shapes (need %d)" % (ok, len(picked), need))
    for f in failures[:50]:
        print("FAIL " + f, file=sys.stderr)
    summary["failures"] = len(failures)
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
