#!/usr/bin/env python3
"""Where a profiled ppo-step spends its GPU time, by kind of kernel, and how fast each kind runs.

Reads the tables ppo-step prints with CA_NN_CUDA_PROFILE=1 (large.sh PROFILE=1 keeps them as
profile_CASE_REP.txt: a line "nn_cuda profile: TITLE: X ms of kernels", then one row per kernel
"  MS ms PCT% CALLS calls  NAME"). Several tables in one file are added up.

For issue 34 (45% of dense bf16 peak at the 1.5B shape and 8k tokens): the GEMMs' rate is exact,
from the shapes in their names ("gemm NT MxNxK bf16->f32": 2 M N K FLOPs a call). The attention
kernels' rate is what their tensor cores execute for one sequence of --tokens T (every launch is one
layer of one sequence, all heads), causal so half of T x T, in units of H T^2 D (H heads of width
D = hidden / heads, from --config): the forward 2 (S = QK^T, O = PV), dq 3 (S again, dP, dQ), dk/dv
4 (S, dP, dV, dK). The rest is memory-bound and is given as time only.

  python3 bench/ppo_step/profile_summary.py OUT/profile_full-1.5b_8192_1.txt --config OUT/config_1.5b.json --tokens 8192
Prints the table on stdout, and with --json one JSON object instead.
"""
import argparse
import json
import re
import sys

ROW = re.compile(r"^\s+([0-9.]+) ms\s+[0-9.]+%\s+(\d+) calls\s+(.+?)\s*$")
TITLE = re.compile(r"^nn_cuda profile: (.*): ([0-9.]+) ms of kernels\s*$")
GEMM = re.compile(r"^gemm [NT][NT] (\d+)x(\d+)x(\d+) ")
# Attention kernels by what a launch executes, in units of H T^2 D (see the docstring).
ATTENTION_UNITS = {"attention_forward": 2.0, "attention_backward_dq": 3.0, "attention_backward_dkv": 4.0}
# The families of the memory-bound kernels, by the start of their names (libcommon/nn_cuda/ops/).
FAMILIES = [
    ("attention_backward_delta", "attention (delta, kv sum)"), ("attention_backward_kv_sum", "attention (delta, kv sum)"),
    ("token_logprob", "log-probabilities (chunked head)"), ("rmsnorm", "rmsnorm"), ("rope", "rope"),
    ("swiglu", "swiglu"), ("embedding", "embedding"), ("adamw_step", "optimizer"), ("sum_squares", "optimizer"),
    ("scale_inplace", "optimizer"), ("convert", "copies and casts"), ("copy_rows", "copies and casts"),
    ("column_sum_add", "bias and norm-weight sums"),
]


def parse(lines):
    """(titles, {name: [ms, calls]}) from one or more profile tables; rows outside a table are refused."""
    titles, rows, in_table = [], {}, False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        t = TITLE.match(line)
        if t:
            titles.append(t.group(1))
            in_table = True
            continue
        r = ROW.match(line)
        if not r or not in_table:
            raise ValueError("line %d: not a row of an nn_cuda profile table: %r" % (n, line.rstrip()[:120]))
        acc = rows.setdefault(r.group(3), [0.0, 0])
        acc[0] += float(r.group(1))
        acc[1] += int(r.group(2))
    if not titles:
        raise ValueError("no 'nn_cuda profile:' table in the input")
    return titles, rows


def attention_kind(name):
    """'attention_forward' etc. for a tensor-core or plain attention kernel's name, else None."""
    base = name.split("<")[0]
    for kind in sorted(ATTENTION_UNITS, key=len, reverse=True):
        if base == kind or base == kind + "_tc":
            return kind
    return None


def summarize(rows, hidden, heads, tokens):
    """Families with ms, calls, FLOPs (None where not counted) and TFLOP/s."""
    fam = {}

    def add(key, ms, calls, flops):
        f = fam.setdefault(key, {"family": key, "ms": 0.0, "calls": 0, "flops": 0.0 if flops is not None else None})
        f["ms"] += ms
        f["calls"] += calls
        if flops is not None:
            f["flops"] = (f["flops"] or 0.0) + flops

    unit = None
    if hidden and heads and tokens:
        unit = heads * tokens * tokens * (hidden // heads)  # H T^2 D
    for name, (ms, calls) in rows.items():
        g = GEMM.match(name)
        if g:
            m, n, k = (int(x) for x in g.groups())
            add("gemm (cuBLASLt)", ms, calls, 2.0 * m * n * k * calls)
            continue
        kind = attention_kind(name)
        if kind:
            add("attention: " + kind.replace("attention_", ""), ms, calls,
                ATTENTION_UNITS[kind] * unit * calls if unit else None)
            continue
        label = next((lab for prefix, lab in FAMILIES if name.startswith(prefix)), "other: " + name.split("<")[0])
        add(label, ms, calls, None)
    total = sum(f["ms"] for f in fam.values())
    out = sorted(fam.values(), key=lambda f: -f["ms"])
    for f in out:
        f["share"] = f["ms"] / total if total else 0.0
        f["tflops"] = f["flops"] / (f["ms"] * 1e-3) / 1e12 if f["flops"] and f["ms"] > 0 else None
    return total, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", help="a file of nn_cuda profile tables ('-' for stdin)")
    ap.add_argument("--config", help="the model's config.json (hidden_size, num_attention_heads) for attention's rate")
    ap.add_argument("--tokens", type=int, help="the length of every sequence the step trained (large.sh's case :TOKENS)")
    ap.add_argument("--peak", type=float, default=989.0, help="dense bf16 peak in TFLOP/s (default 989, H100/H200 SXM)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    a = ap.parse_args()
    try:
        text = sys.stdin.read() if a.profile == "-" else open(a.profile).read()
        titles, rows = parse(text.splitlines())
        hidden = heads = None
        if a.config:
            c = json.load(open(a.config))
            hidden, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
    except (OSError, ValueError, KeyError) as e:
        print("profile_summary: %s" % (e if not isinstance(e, KeyError) else "config has no %s" % e), file=sys.stderr)
        return 2
    total, fams = summarize(rows, hidden, heads, a.tokens)
    if a.json:
        print(json.dumps({"tables": titles, "kernel_ms": round(total, 3), "peak_tflops": a.peak, "families": fams}))
        return 0
    print("%d table(s): %s; %.1f ms of kernels" % (len(titles), "; ".join(titles), total))
    print("%-34s %10s %6s %8s %9s %7s" % ("family", "ms", "share", "calls", "TFLOP/s", "of peak"))
    for f in fams:
        rate = "%9.1f %6.1f%%" % (f["tflops"], 100 * f["tflops"] / a.peak) if f["tflops"] else "%9s %7s" % ("-", "-")
        print("%-34s %10.1f %5.1f%% %8d %s" % (f["family"][:34], f["ms"], 100 * f["share"], f["calls"], rate))
    return 0


if __name__ == "__main__":
    sys.exit(main())
