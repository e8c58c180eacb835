#!/usr/bin/env python3
"""Mutation fuzzing of kernel-check's plan reader and binder on real plans and shapes (no GPU).

Seeds: the candidate records bind.sh leaves in OUT (bind_<level>.candidates.jsonl: KernelBench
bundles with their tasks' real specs, made by make_candidates.py --specs). Each case mutates one
record: its plan text (a token swapped for an extreme value, another of the plan's tokens or a
reference; a line deleted, repeated or moved) or its task's specs (a dimension 0, negative, 2^31,
2^62, fractional, a string or null; another dtype; more dimensions; a spec removed). Records go to
`kernel-check --compile-only` in batches of 8; every record must come back with a verdict (any
status: compiled, plan_error, ...), and the tool must exit 0, within the time limit. A batch that
breaks this is printed and written to OUT/fuzz_plans_<seed>_<batch>.jsonl for a rerun.

usage: bench/kernelbench/fuzz_plans.py [--bin build/bin] [--out bench/kernelbench/out] [--cases 400] [--seed 1]
Exit 0 when no batch broke the rule, 1 when one did, 2 when there are no seeds (run bind.sh first).
"""
import argparse
import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile

BATCH = 8
EXTREME = ["0", "-1", "1", "2147483647", "2147483648", "4294967296", "9223372036854775807", "-9223372036854775808",
           "1e308", "1.5", "-0.0", "nan", "inf", "x", "inputs.0", "outputs.0", "scratch.s", "params.weight", "[]", "{}",
           "cdiv(0, 0)", "1 / 0", "1 % 0", "-2147483648 / -1", "(1 << 63)", "1 << 64", "min()", "max(1)", "shape[99]"]
DIMS = [0, -1, 1, 2**31, 2**40, 2**62, 2**63, 1.5, "x", None]
DTYPES = ["F64", "I8", "BOOL", "U64", "F8", "", "f32", None, 3]


def mutate_plan(rng, plan):
    toks = list(re.finditer(r"[A-Za-z_][A-Za-z0-9_.\[\]]*|\d+(\.\d+)?", plan))
    lines = plan.split("\n")
    r = rng.random()
    if r < 0.55 and toks:
        m = rng.choice(toks)
        rep = rng.choice(EXTREME + [t.group(0) for t in rng.sample(toks, min(5, len(toks)))])
        return plan[:m.start()] + rep + plan[m.end():], "token %r -> %r" % (m.group(0), rep)
    i = rng.randrange(len(lines))
    if r < 0.7:
        del lines[i]
        return "\n".join(lines), "line %d deleted" % i
    if r < 0.85:
        lines.insert(i, lines[i])
        return "\n".join(lines), "line %d repeated" % i
    j = rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines), "lines %d and %d swapped" % (i, j)


def mutate_task(rng, task):
    specs = [(k, i) for k in ("inputs", "outputs", "params") for i in range(len(task.get(k) or []))]
    if not specs:
        return task, "no specs"
    k, i = rng.choice(specs)
    s = task[k][i]
    r = rng.random()
    if r < 0.6 and s.get("shape"):
        j = rng.randrange(len(s["shape"]))
        s["shape"][j] = rng.choice(DIMS)
        return task, "%s[%d].shape[%d] = %r" % (k, i, j, s["shape"][j])
    if r < 0.75:
        s["dtype"] = rng.choice(DTYPES)
        return task, "%s[%d].dtype = %r" % (k, i, s["dtype"])
    if r < 0.9:
        s["shape"] = (s.get("shape") or []) + [rng.choice([1, 2, 0])] * rng.choice([1, 3, 9])
        return task, "%s[%d] has %d dims" % (k, i, len(s["shape"]))
    del task[k][i]
    return task, "%s[%d] removed" % (k, i)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--out", default="bench/kernelbench/out")
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    seeds = [json.loads(l) for f in sorted(glob.glob(os.path.join(a.out, "bind_*.candidates.jsonl"))) for l in open(f)]
    if not seeds:
        print("fuzz_plans.py: no %s/bind_*.candidates.jsonl (run bench/kernelbench/bind.sh first)" % a.out, file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    env = dict(os.environ, CUDA_AGENT_CACHE=tempfile.mkdtemp(prefix="fuzz-plans-"))
    broken, statuses = 0, {}
    for b in range(0, a.cases, BATCH):
        recs, whats = [], []
        for _ in range(BATCH):
            r = json.loads(json.dumps(rng.choice(seeds)))
            if rng.random() < 0.65:
                r["bundle"]["plan"], what = mutate_plan(rng, r["bundle"]["plan"])
            else:
                r["task"], what = mutate_task(rng, r["task"])
            r.pop("candidate_id", None)
            recs.append(r)
            whats.append("%s: %s" % (r.get("name", "?"), what))
        data = "".join(json.dumps(r) + "\n" for r in recs).encode()
        try:
            p = subprocess.run([os.path.join(a.bin, "kernel-check"), "--compile-only", "--no-store", "-j", "2"],
                               input=data, capture_output=True, timeout=300, env=env)
            rc, out, err = p.returncode, p.stdout.decode(errors="replace").splitlines(), p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            rc, out, err = "timeout", [], ""
        for line in out:
            st = (json.loads(line).get("check") or {}).get("status", "error section")
            statuses[st] = statuses.get(st, 0) + 1
        if rc != 0 or len(out) != BATCH:
            broken += 1
            path = os.path.join(a.out, "fuzz_plans_%d_%d.jsonl" % (a.seed, b))
            open(path, "wb").write(data)
            print("BROKEN batch %d: exit %s, %d of %d records answered (%s)\n  %s\n  stderr: %s" %
                  (b, rc, len(out), BATCH, path, "\n  ".join(whats), err[-400:]), flush=True)
    print(json.dumps({"cases": a.cases, "seed": a.seed, "seeds": len(seeds), "broken_batches": broken,
                      "statuses": dict(sorted(statuses.items()))}))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
