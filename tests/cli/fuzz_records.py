#!/usr/bin/env python3
"""Mutation fuzzing of the tools' record readers (DESIGN.md §1 on bad input), seeded and repeatable.

Each case takes three records of a golden suite's input, replaces the second with a mutant of one of
them, and runs the tool on the four lines with a run store. A mutant is structural (a field deleted,
set to a value of another type or range, or nested thousands deep) or textual (the line cut short, a
byte inserted, a number spelled NaN, Infinity, 1e999, hex or with a leading zero). Whatever the
mutant, the tool must
  - exit 0 (the bad record passed on with an error section) or 2 (bad input), within the time limit;
    never 1 (its arguments are fine), 3, 4 or a signal;
  - write only JSON objects on stdout, each on its own line;
  - on exit 2, have kept the first record already (its result on stdout, or for run-store import its
    rows in the store: what came before the bad line is not lost) and name the bad line on stderr
    ("line 2").

usage: fuzz_records.py --bin DIR --src DIR --cases N [--seed S] [--tool NAME ...]
       fuzz_records.py --self-test --bin DIR   (the checker must flag a tool that breaks each rule)
Prints one FINDING block per broken case and a summary line; exit 1 if any case broke a rule.
"""
import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

# name: (argv, where a record already read is kept, golden inputs under tests/). "stdout": the tool writes
# each record's result as it goes; "store": run-store import writes none, it stores them; None: ppo-step
# advantages reads the whole input as one batch before it writes anything (ppo-step(1)).
TOOLS = {
    "kernel-check": (["kernel-check", "--compile-only", "--arch", "sm_90"], "stdout",
                     ["kernel-check/golden/good-bundles", "kernel-check/golden/plan-errors"]),
    "kernel-prof": (["kernel-prof"], "stdout", ["kernel-prof/golden/pass-through"]),
    "agent-run": (["agent-run", "--policy", "replay:@SRC/datasets/demo/replay.jsonl", "--max-turns", "20", "--seed", "1",
                   "--workspace-dir", "."], "stdout", ["@SRC/datasets/demo/tasks.jsonl"]),
    "reward-calc": (["reward-calc"], "stdout", ["reward-calc/golden/milestone-bar", "reward-calc/golden/speedup",
                                            "reward-calc/golden/violation-penalty", "reward-calc/golden/precision-matched"]),
    "ppo-step-advantages": (["ppo-step", "advantages"], None,
                            ["ppo-step/golden/advantages-gae", "ppo-step/golden/advantages-grpo"]),
    "ppo-step-tokenize": (["ppo-step", "tokenize", "--policy", "@POLICY"], "stdout",
                          ["ppo-step/golden/tokenize-agent-run", "ppo-step/golden/tokenize-roles",
                           "ppo-step/golden/tokenize-rendered"]),
    "run-store-import": (["run-store", "import"], "store",
                         ["reward-calc/golden/milestone-bar", "kernel-check/golden/good-bundles"]),
}
WEIRD = [None, True, False, 0, -1, 1, 2**63, 2**64 + 5, -2**63 - 1, 1e308, -1e308, 1.5, -0.0, 1e-320, "",
         "x" * 70000, "\u0000", "\ud7ff\ue000", [], {}, [None], {"": None}, "1e309", "../../etc/passwd", "a\nb",
         "NaN", 3.0]
TEXT_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e999", "-0", "99999999999999999999999", "0x10", "01"]
INSERTS = ["\udcff", "\x00", "\\", "\"", "}", "NaN", "Infinity", "-", "\udcc3"]
TIMEOUT_S = 60


def paths(v, p=()):
    yield p
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:20]):
            yield from paths(x, p + (i,))


def set_at(v, p, new):
    if not p:
        return new
    v[p[0]] = set_at(v[p[0]], p[1:], new)
    return v


def delete_at(v, p):
    c = v
    for k in p[:-1]:
        c = c[k]
    del c[p[-1]]
    return v


def structural(rng, line):
    rec = json.loads(line)
    p = rng.choice([p for p in paths(rec) if p])
    r = rng.random()
    if r < 0.3:
        return json.dumps(delete_at(rec, p)), "delete %s" % (p,)
    if r < 0.9:
        w = rng.choice(WEIRD)
        return json.dumps(set_at(rec, p, w), ensure_ascii=rng.random() < 0.5), "set %s = %s" % (p, repr(w)[:40])
    depth = rng.choice([50, 500, 5000])
    text = json.dumps(set_at(rec, p, "@@NEST@@"))
    return text.replace('"@@NEST@@"', "[" * depth + "0" + "]" * depth), "nest %s %d deep" % (p, depth)


def textual(rng, line):
    r = rng.random()
    if r < 0.3:
        i = rng.randrange(len(line))
        return line[:i], "cut at %d" % i
    if r < 0.6:
        i = rng.randrange(len(line))
        return line[:i] + rng.choice(INSERTS) + line[i:], "insert at %d" % i
    nums = list(re.finditer(r"(?<=[:\[,])-?\d+(\.\d+)?([eE][-+]?\d+)?", line))
    if not nums:
        return line + line, "line twice"
    m = rng.choice(nums)
    rep = rng.choice(TEXT_NUMBERS)
    return line[:m.start()] + rep + line[m.end():], "number %s as %s" % (m.group(0), rep)


def mutate(rng, line):
    return structural(rng, line) if rng.random() < 0.75 else textual(rng, line)


def read_lines(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return [l for l in f.read().splitlines() if l.strip()]


def run_tool(bin_dir, argv, work, lines, src=""):
    argv = [a.replace("@POLICY", os.path.join(work, "policy")).replace("@SRC", src) for a in argv]
    for f in os.listdir(work):
        if f.startswith("store.db"):
            os.remove(os.path.join(work, f))
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
    env = dict(os.environ, CUDA_AGENT_CACHE=os.path.join(work, "cache"))
    t0 = time.monotonic()
    try:
        p = subprocess.run([os.path.join(bin_dir, argv[0])] + argv[1:] + ["--store", os.path.join(work, "store.db")],
                           input=data, capture_output=True, timeout=TIMEOUT_S, cwd=work, env=env)
    except subprocess.TimeoutExpired:
        return None, b"", b"", time.monotonic() - t0
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def stored_rows(db):
    """Rows in the store's tables other than runs (0 when there is no store)."""
    if not os.path.exists(db):
        return 0
    con = sqlite3.connect(db)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return sum(con.execute('SELECT COUNT(*) FROM "%s"' % t).fetchone()[0] for t in tables
                   if t != "runs" and not t.startswith("sqlite_"))
    finally:
        con.close()


def broken_rules(rc, out, err, keeps, db):
    """The rules of the module docstring a run broke (empty when it kept them)."""
    bad = []
    if rc is None:
        bad.append("no exit within %d s" % TIMEOUT_S)
    elif rc not in (0, 2):
        bad.append("exit status %d" % rc if rc >= 0 else "killed by signal %d" % -rc)
    for line in out.splitlines():
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if not ok:
            bad.append("stdout line is not a JSON object: %r" % line[:80])
            break
    if rc == 2:
        if keeps == "stdout" and not out.strip():
            bad.append("exit 2 with nothing on stdout: the first record's result was lost")
        if keeps == "store" and stored_rows(db) == 0:
            bad.append("exit 2 with nothing in the store: the first record was lost")
        if b"line 2" not in err:
            bad.append("exit 2 without naming line 2 on stderr")
    return bad


def fuzz(a):
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="fuzz-records-")
    os.makedirs(os.path.join(work, "policy"))
    shutil.copy(os.path.join(a.src, "tests/nn_cuda/fixtures/tokenizer.json"), os.path.join(work, "policy"))
    tools = a.tool or sorted(TOOLS)
    def inputs(d):  # a golden case's folder under tests/, or a file under the tree (@SRC/...)
        return d.replace("@SRC", a.src) if d.startswith("@SRC/") else os.path.join(a.src, "tests", d, "in.jsonl")
    seeds = {t: sum((read_lines(inputs(d)) for d in TOOLS[t][2]), []) for t in tools}
    findings, statuses = 0, {}
    try:
        for i in range(a.cases):
            tool = tools[i % len(tools)]
            argv, keeps, _ = TOOLS[tool]
            base = seeds[tool]
            mutant, what = mutate(rng, rng.choice(base))
            lines = [base[0], mutant] + base[1:3]
            rc, out, err, dt = run_tool(a.bin, argv, work, lines, a.src)
            statuses.setdefault(tool, {}).setdefault(str(rc), 0)
            statuses[tool][str(rc)] += 1
            bad = broken_rules(rc, out, err, keeps, os.path.join(work, "store.db"))
            if bad:
                findings += 1
                print("FINDING %s case %d (%s), %.1f s: %s\n  stderr: %s" %
                      (tool, i, what, dt, "; ".join(bad), err.decode(errors="replace")[-500:].replace("\n", "\n  ")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d cases, seed %d, %d broke a rule; exit statuses by tool: %s" %
          (a.cases, a.seed, findings, json.dumps(statuses, sort_keys=True)))
    return 1 if findings else 0


def self_test(a):
    """Each rule flagged on a fake tool that breaks it, none on one that keeps them all."""
    work = tempfile.mkdtemp(prefix="fuzz-self-")
    tool = os.path.join(work, "fake")
    with open(tool, "w") as f:
        f.write('#!/bin/bash\nread -r first; [ "$FAKE" = lost ] || echo \'{"ok": 1}\'\ncase "$FAKE" in\n'
                '  segv) kill -SEGV $$ ;;\n  four) exit 4 ;;\n  text) echo "progress 50%"; exit 0 ;;\n'
                '  lost) echo "error: line 2: not JSON" >&2; exit 2 ;;\n  quiet) echo "bad input" >&2; exit 2 ;;\n'
                '  good) echo "error: line 2: not JSON" >&2; exit 2 ;;\nesac\n')
    os.chmod(tool, 0o755)
    want = {"segv": "killed by signal 11", "four": "exit status 4", "text": "not a JSON object",
            "lost": "first record's result was lost", "quiet": "without naming line 2", "good": None}
    failed = 0
    for mode, expect in want.items():
        os.environ["FAKE"] = mode
        rc, out, err, _ = run_tool(work, ["fake"], work, ["{}", "x", "{}"])
        got = "; ".join(broken_rules(rc, out, err, "stdout", os.path.join(work, "store.db")))
        ok = (expect is None and got == "") or (expect is not None and expect in got)
        print("%s %s: %s" % ("ok  " if ok else "FAIL", mode, got or "no rule broken"))
        failed += not ok
    got = "; ".join(broken_rules(2, b"", b"line 2", "store", os.path.join(work, "none.db")))
    ok = "nothing in the store" in got
    print("%s unstored: %s" % ("ok  " if ok else "FAIL", got or "no rule broken"))
    failed += not ok
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--src")
    ap.add_argument("--cases", type=int, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tool", action="append", choices=sorted(TOOLS))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test(a)
    if not a.src:
        ap.error("--src is required")
    return fuzz(a)


if __name__ == "__main__":
    sys.exit(main())
