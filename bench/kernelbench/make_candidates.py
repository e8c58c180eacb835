#!/usr/bin/env python3
"""Candidate records (JSON Lines) for the KernelBench bundles under bench/kernelbench/bundles.

Each bundle folder is bundles/<level>/<task file stem>/ with plan.yaml and kernels/*.cu (or .cu
files beside plan.yaml); its task is <kb>/<level>/<stem>.py, read from the KernelBench checkout
(never copied into the repo). A bundle's uses.txt may name shared files of the level's _lib/ folder. One record per bundle:

    {"task_id", "candidate_id", "task": {"task_id", "code"}, "bundle": {"kernels": {...}, "plan": "..."}}

task_id is the id `ops-synth import` gives the file (sha256 of the canonical JSON {"code": code},
16 hex digits), candidate_id the id kernel-check gives the bundle (the same hash of
{"task_id", "bundle"}), so records line up with a store filled by the toolchain.

--specs adds the task's input, output and parameter specs (names, shapes, dtypes, init inputs)
and `reference: {mode, peak_bytes}`, found without allocating anything: get_inputs() and
Model(*get_init_inputs()) run with torch's factories on the meta device, and forward on meta
tensors. kernel-check --compile-only needs them to bind the plan (grids, argument types, gemm
sizes) on a machine without a GPU; its scratch cap follows reference.peak_bytes, the reference's
peak memory counted as the worker counts it off CUDA (libcommon/python/cuda_agent_worker/peak.py,
imported from there). Needs torch (any
1.13+); without --specs only the standard library is used. On a GPU the reference worker computes
the specs itself, so the GPU records are made without it.

usage: make_candidates.py [--kb DIR] [--bundles DIR] [--specs] [--only SUBSTR]... [-o FILE]
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def canonical(value):
    # nlohmann::json dump(-1) of a key-sorted object: no spaces, UTF-8 kept (libcommon/ids.cpp).
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_id(value):
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()[:16]


def find_bundles(root, only):
    out = []
    for level in sorted(os.listdir(root)):
        ldir = os.path.join(root, level)
        if not os.path.isdir(ldir):
            continue
        for stem in sorted(os.listdir(ldir)):
            bdir = os.path.join(ldir, stem)
            if not os.path.isfile(os.path.join(bdir, "plan.yaml")):
                continue
            key = "%s/%s" % (level, stem)
            if only and not any(o in key for o in only):
                continue
            out.append((level, stem, bdir))
    return out


def read_kernels(bdir):
    """The bundle's device code: .cu/.cuh/.h files beside plan.yaml or in kernels/, plus the files its
    uses.txt names (one per line, '#' comments) from the level's _lib/ folder, so kernels that several
    bundles share (a training-mode BatchNorm, a pooling) live in the repo once while every record
    still carries its whole bundle."""
    kernels = {}
    uses = os.path.join(bdir, "uses.txt")
    if os.path.isfile(uses):
        lib = os.path.join(os.path.dirname(bdir), "_lib")
        for n, line in enumerate(open(uses), 1):
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            path = os.path.join(lib, name)
            if "/" in name or not os.path.isfile(path):
                sys.exit("make_candidates: %s:%d: no file %s in %s" % (uses, n, name, lib))
            with open(path) as f:
                kernels[name] = f.read()
    for sub in ("", "kernels"):
        d = os.path.join(bdir, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith((".cu", ".cuh", ".h")):
                if name in kernels:
                    sys.exit("make_candidates: %s: %s twice (beside plan.yaml and in kernels/)" % (bdir, name))
                with open(os.path.join(d, name)) as f:
                    kernels[name] = f.read()
    return kernels


# ---- specs on the meta device (--specs) ---------------------------------------------------------

_FACTORIES = ("empty", "zeros", "ones", "rand", "randn", "randint", "full", "empty_like", "zeros_like",
              "ones_like", "rand_like", "randn_like", "randint_like", "full_like", "normal")

_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64",
           "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}


def _dtype_name(t):
    return _DTYPES.get(str(t.dtype).replace("torch.", ""), str(t.dtype).replace("torch.", "").upper())


def _spec(t, name=None):
    d = {"shape": list(t.shape), "dtype": _dtype_name(t)}
    if name is not None:
        d = dict(name=name, **d)
    return d


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return repr(v)


def task_specs(code, path):
    """Shapes and dtypes of inputs, outputs and params, with no tensor memory allocated."""
    import inspect
    import types
    import torch
    sys.path.insert(0, os.path.join(REPO, "libcommon", "python"))
    from cuda_agent_worker.peak import measure_peak

    saved = {}

    def on_meta(fn):
        def wrapped(*a, **k):
            if "device" in k or not fn.__name__.endswith("_like"):
                k["device"] = "meta"
            return fn(*a, **k)
        wrapped.__name__ = fn.__name__
        return wrapped
    mod = types.ModuleType("kb_task")
    mod.__file__ = path
    exec(compile(code, path, "exec"), mod.__dict__)
    for name in _FACTORIES:
        if hasattr(torch, name):
            saved[name] = getattr(torch, name)
            setattr(torch, name, on_meta(saved[name]))
    try:
        torch.manual_seed(0)
        init = mod.get_init_inputs() if hasattr(mod, "get_init_inputs") else []
        model = mod.Model(*init).to("meta")
        inputs = mod.get_inputs()
        inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        # The reference's peak memory as the worker measures it (the same function, on meta tensors):
        # compile-only's scratch cap follows the record's reference.peak_bytes.
        with torch.no_grad():
            peak, out = measure_peak(lambda: model(*inputs), "meta")
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    buffers = {k for k, _ in model.named_buffers()}  # said as "buffer": true (the worker says it too)
    try:
        names = [p.name for p in inspect.signature(model.forward).parameters.values()]
    except (TypeError, ValueError):
        names = []
    ins = []
    for i, x in enumerate(inputs):
        nm = names[i] if i < len(names) else "input%d" % i
        if isinstance(x, torch.Tensor):
            ins.append(dict(index=i, **_spec(x, nm)))
        else:
            ins.append({"index": i, "name": nm, "shape": None, "dtype": type(x).__name__})
    return {
        "inputs": ins,
        "outputs": [dict(index=i, **_spec(o)) for i, o in enumerate(outs)],
        "params": [dict(_spec(v, k), **({"buffer": True} if k in buffers else {})) for k, v in model.state_dict().items()],
        "init_inputs": _jsonable(list(init)),
        "reference": {"mode": "train" if model.training else "eval", "peak_bytes": peak},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kb", default=os.path.join(REPO, ".kb", "KernelBench"),
                    help="KernelBench checkout with level1..3 (default: .kb/KernelBench of the repo)")
    ap.add_argument("--bundles", default=os.path.join(HERE, "bundles"))
    ap.add_argument("--specs", action="store_true", help="add input/output/param specs (needs torch)")
    ap.add_argument("--only", action="append", default=[], help="only bundles whose level/stem contains this")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    if not os.path.isdir(args.kb):
        sys.exit("make_candidates: KernelBench folder %s not found (pass --kb DIR)" % args.kb)
    bundles = find_bundles(args.bundles, args.only)
    if not bundles:
        sys.exit("make_candidates: no bundles under %s%s" % (args.bundles, " matching --only" if args.only else ""))
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    for level, stem, bdir in bundles:
        task_path = os.path.join(args.kb, level, stem + ".py")
        if not os.path.isfile(task_path):
            sys.exit("make_candidates: %s has no task file %s" % (bdir, task_path))
        with open(task_path) as f:
            code = f.read()
        with open(os.path.join(bdir, "plan.yaml")) as f:
            plan = f.read()
        kernels = read_kernels(bdir)
        task_id = content_id({"code": code})
        task = {"task_id": task_id, "code": code}
        if args.specs:
            task.update(task_specs(code, task_path))
        bundle = {"kernels": kernels, "plan": plan}
        rec = {"task_id": task_id, "candidate_id": content_id({"task_id": task_id, "bundle": bundle}),
               "name": "%s/%s" % (level, stem), "task": task, "bundle": bundle}
        out.write(json.dumps(rec) + "\n")
        print("make_candidates: %s/%s task %s candidate %s (%d kernel files)"
              % (level, stem, task_id, rec["candidate_id"], len(kernels)), file=sys.stderr)
    if out is not sys.stdout:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
