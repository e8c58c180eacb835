#!/usr/bin/env python3
"""The simple in-process judge a benchmark measures the toolchain against.

One Python process: PyTorch for the task's reference, its eager and torch.compile baselines and
the plan's library steps (gemm -> torch.mm/addmm through cuBLASLt, as the plan's gemm is, with
its bias+ReLU/GELU epilogue fused where torch can (_addmm_activation); conv -> torch conv2d); CuPy (RawModule, NVRTC)
for the bundle's own kernels. It reads the candidate records kernel-check reads
({"task_id", "candidate_id", "task": {"task_id", "code"}, "bundle": {"kernels", "plan"}}) and
writes one JSON line per candidate with its verdict, times, speedups and the milestone reward.

Checking: a warm call, then --trials calls, each on fresh inputs from get_inputs() under its own
seed, outputs NaN-poisoned before the call, compared with the task's Model on the same inputs
(TF32 off): |got - want| <= atol + rtol * |want| everywhere, NaN/Inf only where the reference has
them, ||got - want|| / ||want|| <= --max-rel-l2; inputs and params must not change.
Timing: candidate, eager and torch.compile by one method: CUDA events around each call, the L2
flushed (a memset of twice its size) before every call, warm-up calls, the median of --runs calls
(fewer when a side's calls would pass --budget-s). Baselines are measured once per task.
Reward (milestone): -1 failed; 3 if more than 5% faster than both eager and compile; 2 if more
than 5% faster than eager; 1 otherwise. within_noise says where a 5% margin falls inside the
p10-p90 spread of the two sides.

It does not confine the compiler, run the candidate in a child, guard buffers or enforce a
watchdog: it is the simple judge, trusting honest bundles. A CUDA fault (illegal address) ends
the CUDA context: every later candidate in the run is then a runtime_error.

usage: reference_judge.py [-i FILE] [-o FILE] [--device cuda:0] [--trials 5] [--seed N] ...
       reference_judge.py --selftest     (CPU: the YAML reader, expressions, signatures, binding of
                                          every bundle on meta tensors, gemm/conv steps on small tasks)
"""
import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
import types

import numpy as np
import torch
import torch.nn.functional as F


class Verdict(Exception):
    def __init__(self, status, reason):
        Exception.__init__(self, reason)
        self.status, self.reason = status, reason


# ---- YAML: PyYAML when installed, else a reader for the subset plans use -------------------------

def _scalar(s):
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~", ""):
        return None
    if re.fullmatch(r"[-+]?\d+", s):
        return int(s)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+)([eE][-+]?\d+)?", s):
        return float(s)
    return s


def _flow(s, i=0):
    """A flow value at s[i:]: [..], {..} or a scalar ending at , ] } outside brackets."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] in "[{":
        close, out = ("]", []) if s[i] == "[" else ("}", {})
        i += 1
        while True:
            while i < len(s) and s[i] in " ,":
                i += 1
            if i >= len(s):
                raise ValueError("unclosed '%s' in %r" % ("[" if close == "]" else "{", s))
            if s[i] == close:
                return out, i + 1
            if close == "]":
                v, i = _flow(s, i)
                out.append(v)
            else:
                j = s.index(":", i)
                key = _scalar(s[i:j])
                v, i = _flow(s, j + 1)
                out[key] = v
    depth, j = 0, i
    if i < len(s) and s[i] in "'\"":
        j = s.index(s[i], i + 1) + 1
        return _scalar(s[i:j]), j
    while j < len(s):
        c = s[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        j += 1
    return _scalar(s[i:j]), j


def _split_key(text):
    m = re.match(r"^((?:'[^']*')|(?:\"[^\"]*\")|[^:'\"]+):(?:\s+(.*))?$", text)
    return (None, None) if not m else (_scalar(m.group(1)), (m.group(2) or "").strip())


def mini_yaml(text):
    lines = []
    for raw in text.splitlines():
        body = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if body.strip():
            lines.append([len(body) - len(body.lstrip(" ")), body.strip()])

    def block(i, ind):
        if lines[i][1].startswith("- ") or lines[i][1] == "-":
            seq = []
            while i < len(lines) and lines[i][0] == ind and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
                rest = lines[i][1][1:].strip()
                if not rest:
                    v, i = block(i + 1, lines[i + 1][0])
                elif _split_key(rest)[0] is not None and not rest.startswith(("[", "{")):
                    lines[i] = [ind + 2, rest]          # "- key: v" opens a mapping at ind + 2
                    v, i = block(i, ind + 2)
                else:
                    v, i = _flow(rest)[0], i + 1
                seq.append(v)
            return seq, i
        out = {}
        while i < len(lines) and lines[i][0] == ind and not lines[i][1].startswith("- "):
            key, val = _split_key(lines[i][1])
            if key is None:
                raise ValueError("plan line %r is not 'key: value'" % lines[i][1])
            i += 1
            if val:
                out[key] = _flow(val)[0]
            elif i < len(lines) and (lines[i][0] > ind or (lines[i][0] == ind and lines[i][1].startswith("- "))):
                out[key], i = block(i, lines[i][0])
            else:
                out[key] = None
        return out, i
    if not lines:
        return None
    value, end = block(0, lines[0][0])
    if end != len(lines):
        raise ValueError("plan line %r: unexpected indentation" % lines[end][1])
    return value


def load_plan(plan):
    """The plan as kernel-check reads it: inside [..] and {..} a comma or bracket within parentheses or an
    index (cdiv(N, 256), shape[0]) stays in its scalar, which PyYAML would tear apart. So the subset reader
    above goes first; PyYAML (where installed) only for a plan it cannot read."""
    if isinstance(plan, dict):
        data = plan
    else:
        try:
            data = mini_yaml(plan)
        except Exception as first:
            try:
                import yaml
                data = yaml.safe_load(plan)
            except Exception:
                raise Verdict("plan_error", "plan: not valid YAML: %s" % first)
    if not isinstance(data, dict) or "forward" not in data:
        raise Verdict("plan_error", "plan: expected a map with forward (and dims, scratch, init)")
    return data


# ---- expressions: + - * / % ( ), cdiv min max, dims, X.shape[i], X.numel, init.N ---------------

_TOK = re.compile(r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)"
                  r"|(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*(?:\[\s*-?\d+\s*\])?)|(?P<op>[-+*/%(),]))")


def _cdiv_int(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _arith(op, a, b):
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise Verdict("plan_error", "integer division by zero")
        q = _cdiv_int(a, b)                         # C: truncation toward zero
        return q if op == "/" else a - b * q
    return a / b if op == "/" else float(np.fmod(a, b))


def evaluate(text, lookup):
    """Value (int or float) of a plan expression; lookup(path) resolves names."""
    if isinstance(text, bool):
        raise Verdict("plan_error", "expression %r is a boolean" % text)
    if isinstance(text, (int, float)):
        return text
    toks, pos, s = [], 0, str(text)
    while pos < len(s):
        m = _TOK.match(s, pos)
        if not m or m.end() == pos:
            if s[pos:].strip() == "":
                break
            raise Verdict("plan_error", "expression %r: cannot read %r" % (s, s[pos:]))
        kind = m.lastgroup
        toks.append((kind, m.group(kind)))
        pos = m.end()
    toks.append(("end", None))
    at = [0]

    def peek():
        return toks[at[0]]

    def take(expect=None):
        t = toks[at[0]]
        if expect is not None and t[1] != expect:
            raise Verdict("plan_error", "expression %r: expected %r" % (s, expect))
        at[0] += 1
        return t

    def atom():
        kind, v = take()
        if kind == "num":
            return float(v) if any(c in v for c in ".eE") else int(v)
        if v == "(":
            r = expr()
            take(")")
            return r
        if v in ("-", "+"):
            r = atom()
            return -r if v == "-" else r
        if kind == "path" and peek()[1] == "(":
            take("(")
            args = [expr()]
            while peek()[1] == ",":
                take(",")
                args.append(expr())
            take(")")
            if v == "cdiv" and len(args) == 2:
                a, b = args
                if isinstance(a, int) and isinstance(b, int):
                    return -((-a) // b) if b > 0 else _cdiv_int(a + b + 1, b)
                return float(np.ceil(a / b))
            if v in ("min", "max") and args:
                return (min if v == "min" else max)(args)
            raise Verdict("plan_error", "expression %r: unknown function %s/%d" % (s, v, len(args)))
        if kind == "path":
            return lookup(v)
        raise Verdict("plan_error", "expression %r: unexpected %r" % (s, v))

    def term():
        r = atom()
        while peek()[1] in ("*", "/", "%"):
            r = _arith(take()[1], r, atom())
        return r

    def expr():
        r = term()
        while peek()[1] in ("+", "-"):
            r = _arith(take()[1], r, term())
        return r
    r = expr()
    if peek()[0] != "end":
        raise Verdict("plan_error", "expression %r: trailing %r" % (s, peek()[1]))
    return r


# ---- kernel signatures from the sources ---------------------------------------------------------

_PTR_DTYPES = {  # pointee (const/restrict dropped) -> torch dtypes it may point at; None = any
    "float": ("float32",), "float2": ("float32",), "float4": ("float32",), "double": ("float64",),
    "double2": ("float64",), "__half": ("float16",), "half": ("float16",), "__half2": ("float16",),
    "__nv_bfloat16": ("bfloat16",), "nv_bfloat16": ("bfloat16",), "__nv_bfloat162": ("bfloat16",),
    "int": ("int32",), "int2": ("int32",), "int4": ("int32",), "int32_t": ("int32",),
    "unsigned": ("int32",), "unsigned int": ("int32",), "uint32_t": ("int32",),
    "long long": ("int64",), "long long int": ("int64",), "int64_t": ("int64",), "long": ("int64",),
    "unsigned long long": ("int64",), "uint64_t": ("int64",), "short": ("int16",), "int16_t": ("int16",),
    "char": ("int8", "uint8", "bool"), "signed char": ("int8",), "int8_t": ("int8",),
    "unsigned char": ("uint8", "bool"), "uint8_t": ("uint8", "bool"), "bool": ("bool",), "void": None,
}
_SCALARS = {"int": np.int32, "signed": np.int32, "int32_t": np.int32, "unsigned": np.uint32,
            "unsigned int": np.uint32, "uint32_t": np.uint32, "long long": np.int64, "long long int": np.int64,
            "long": np.int64, "int64_t": np.int64, "ptrdiff_t": np.int64, "unsigned long long": np.uint64,
            "unsigned long": np.uint64, "size_t": np.uint64, "uint64_t": np.uint64, "short": np.int16,
            "int16_t": np.int16, "char": np.int8, "int8_t": np.int8, "unsigned char": np.uint8,
            "uint8_t": np.uint8, "bool": np.bool_, "float": np.float32, "double": np.float64}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}


def strip_comments(src):
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)


def _balanced(s, i, open_c="(", close_c=")"):
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced %s" % open_c)


def _split_top(s, sep=","):
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def parse_param(text):
    """'const float* __restrict__ x' -> {'pointer': True, 'base': 'float', 'text': ...}."""
    t = re.sub(r"=.*$", "", text).replace("*", " * ").replace("&", " & ")
    words = [w for w in t.split() if w not in _QUALIFIERS]
    stars = words.count("*")
    words = [w for w in words if w not in ("*", "&")]
    known = set(" ".join(_PTR_DTYPES).split()) | set(" ".join(_SCALARS).split())
    if len(words) > 1 and words[-1] not in known:
        words = words[:-1]                          # the parameter's name
    base = " ".join(w for w in words if w != "signed" or len(words) == 1)
    base = {"unsigned int": "unsigned int", "long int": "long", "long long int": "long long"}.get(base, base)
    return {"text": text.strip(), "pointer": stars > 0, "base": base}


def parse_signatures(kernels):
    """{kernel base name: [{'params': [...], 'template': [(kind, name)], 'file': f}]} for every __global__."""
    sigs = {}
    for fname, src in sorted(kernels.items()):
        s = strip_comments(src)
        for m in re.finditer(r"\b__global__\b", s):
            head = s[max(s.rfind(";", 0, m.start()), s.rfind("}", 0, m.start())) + 1:m.start()]
            tm = re.search(r"template\s*<(.*)>\s*(extern\s*\"C\"\s*)?$", head.strip(), flags=re.S)
            template = []
            if tm:
                for p in _split_top(tm.group(1)):
                    w = p.replace("=", " = ").split()
                    if len(w) >= 2:
                        template.append(("type" if w[0] in ("typename", "class") else "value", w[1]))
            i = m.end()
            name = None
            while i < len(s):
                im = re.compile(r"\s*([A-Za-z_]\w*)\s*(\()?").match(s, i)
                if not im:
                    break
                if im.group(2) and im.group(1) in ("__launch_bounds__", "__attribute__", "__declspec", "alignas"):
                    i = _balanced(s, im.end() - 1) + 1
                    continue
                if im.group(2):
                    name = im.group(1)
                    close = _balanced(s, im.end() - 1)
                    params = [parse_param(p) for p in _split_top(s[im.end():close]) if p.strip() not in ("", "void")]
                    break
                i = im.end()
            if name:
                sigs.setdefault(name, []).append({"params": params, "template": template, "file": fname})
    return sigs


def signature_for(sigs, expr, nargs):
    base = expr.split("<")[0].strip()
    if base not in sigs:
        raise Verdict("plan_error", "kernel '%s' is not defined in the bundle's sources" % base)
    cands = [sg for sg in sigs[base] if len(sg["params"]) == nargs] or sigs[base]
    sg = cands[0]
    if len(sg["params"]) != nargs:
        raise Verdict("plan_error", "kernel %s takes %d arguments, %d given" % (base, len(sg["params"]), nargs))
    targs = _split_top(expr[expr.index("<") + 1:expr.rindex(">")]) if "<" in expr else []
    subst = {n: targs[k] for k, (kind, n) in enumerate(sg["template"]) if kind == "type" and k < len(targs)}
    params = []
    for p in sg["params"]:
        p = dict(p)
        if p["base"] in subst:
            p["base"] = subst[p["base"]]
        params.append(p)
    return params


# ---- the task: reference model, seeded inputs, pinned precision ---------------------------------

@contextlib.contextmanager
def blas_cublaslt(on):
    """torch's matmuls through cuBLASLt (torch >= 2.3 can be told; older: its own choice), as the
    plan's gemm steps run: the same library, its own heuristic's algorithm."""
    pref = getattr(torch.backends.cuda, "preferred_blas_library", None) if on else None
    if pref is None:
        yield
        return
    saved = pref()
    pref("cublaslt")
    try:
        yield
    finally:
        pref(saved)


def set_tf32(on):
    """TF32 for matmul and cuDNN conv (torch >= 2.9: fp32_precision; older: the allow_tf32 flags)."""
    for obj, legacy, attr in ((torch.backends.cuda.matmul, torch.backends.cuda.matmul, "allow_tf32"),
                              (getattr(torch.backends.cudnn, "conv", None), torch.backends.cudnn, "allow_tf32")):
        try:
            if obj is not None and hasattr(obj, "fp32_precision"):
                obj.fp32_precision = "tf32" if on else "ieee"
                continue
        except Exception:
            pass
        setattr(legacy, attr, bool(on))


def seed_all(seed):
    import random
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


class Task(object):
    """The task's Model built on the device (its default device while it is built and while
    get_inputs() draws, so gigabyte inputs are made there, not on the CPU and copied)."""

    def __init__(self, task, device, work_dir):
        self.task_id, self.device = task["task_id"], torch.device(device)
        path = os.path.join(work_dir, "task_%s.py" % re.sub(r"\W", "_", str(self.task_id))[:40])
        with open(path, "w") as f:           # a real file: torch.compile and tracebacks read it
            f.write(task["code"])
        self.module = types.ModuleType("kb_task_" + re.sub(r"\W", "_", str(self.task_id)))
        self.module.__file__ = path
        sys.modules[self.module.__name__] = self.module
        exec(compile(task["code"], path, "exec"), self.module.__dict__)
        seed_all(0)
        self.init_inputs = list(self.module.get_init_inputs()) if hasattr(self.module, "get_init_inputs") else []
        with self._on_device():
            self.model = self.module.Model(*self.init_inputs)
        self.model = self.model.to(self.device)
        self.state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        import inspect
        try:
            self.input_names = [p.name for p in inspect.signature(self.model.forward).parameters.values()]
        except (TypeError, ValueError):
            self.input_names = []
        self.baselines = {}
        self.compiled = None

    def _on_device(self):
        if self.device.type != "cpu" and hasattr(torch, "set_default_device"):
            return self.device            # torch.device is a context manager in torch >= 2.0
        return contextlib.nullcontext()

    def inputs(self, seed):
        seed_all(seed)
        with self._on_device():
            vals = self.module.get_inputs()
        vals = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in vals]

    def forward(self, inputs, fn=None):
        self.model.load_state_dict(self.state)
        with torch.no_grad():
            out = (fn if fn is not None else self.model)(*inputs)
        return [o for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)]


# ---- the bundle: bind the plan, compile with CuPy, run a call -----------------------------------

_DTYPE_NAMES = {"float32": torch.float32, "f32": torch.float32, "float": torch.float32, "float16": torch.float16,
                "f16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float64": torch.float64, "f64": torch.float64, "int32": torch.int32, "i32": torch.int32,
                "int64": torch.int64, "i64": torch.int64, "int8": torch.int8, "i8": torch.int8,
                "uint8": torch.uint8, "u8": torch.uint8, "int16": torch.int16, "bool": torch.bool}
_BUF = re.compile(r"^(inputs|outputs|params|scratch)\.(.+)$")


def _dtype_str(t):
    return str(t.dtype).replace("torch.", "")


class Program(object):
    """A bound plan. Buffers live in self.bufs under keys ('inputs', i), ('outputs', i),
    ('params', name), ('scratch', name); steps are bound once (shapes are fixed per task)."""

    def __init__(self, plan, kernels, sigs, task, inputs, out_like):
        self.plan, self.kernels, self.sigs, self.task = plan, kernels, sigs, task
        self.bufs, self.views, self.stream = {}, {}, None
        for i, v in enumerate(inputs):
            self.bufs[("inputs", i)] = v
        for i, o in enumerate(out_like):
            self.bufs[("outputs", i)] = torch.empty_like(o)
        self.n_outputs = len(out_like)
        for k, v in task.state.items():
            self.bufs[("params", k)] = v.clone()
        self.dims = {}
        for name, e in (plan.get("dims") or {}).items():
            self.dims[str(name)] = self.eval(e, "dims.%s" % name)
        for name, spec in (plan.get("scratch") or {}).items():
            if not isinstance(spec, dict) or "shape" not in spec:
                raise Verdict("plan_error", "scratch.%s: needs dtype and shape" % name)
            dt = _DTYPE_NAMES.get(str(spec.get("dtype", "float32")).lower())
            if dt is None:
                raise Verdict("plan_error", "scratch.%s: unknown dtype %s" % (name, spec.get("dtype")))
            shape = [self.int_eval(d, "scratch.%s shape" % name) for d in spec["shape"]]
            self.bufs[("scratch", str(name))] = torch.empty(shape, dtype=dt, device=task.device)
        self.init_steps = [self.bind_step(s, "init step %d" % (i + 1), True) for i, s in enumerate(plan.get("init") or [])]
        self.forward_steps = [self.bind_step(s, "forward step %d" % (i + 1), False) for i, s in enumerate(plan["forward"])]
        init_written = {k for st in self.init_steps for k in st["writes"]}
        self.forward_scratch = [k for st in self.forward_steps for k in st["writes"]
                                if k[0] == "scratch" and k not in init_written]
        written = {k for st in self.forward_steps for k in st["writes"]}
        for i in range(self.n_outputs):
            if ("outputs", i) not in written:
                raise Verdict("plan_error", "outputs.%d is never written by a forward step" % i)

    # names and values
    def buffer_key(self, text):
        m = _BUF.match(str(text).strip())
        if not m:
            return None
        space, key = m.groups()
        if space == "inputs" and not key.isdigit():
            if key not in self.task.input_names:
                raise Verdict("plan_error", "inputs.%s does not exist (inputs: %s)" % (key, ", ".join(self.task.input_names)))
            key = self.task.input_names.index(key)
        if space in ("inputs", "outputs"):
            key = int(key)
        if (space, key) not in self.bufs:
            have = ", ".join("%s.%s" % k for k in self.bufs if k[0] == space)
            raise Verdict("plan_error", "%s.%s does not exist (the task has %s)" % (space, key, have or "none"))
        return (space, key)

    def lookup(self, path):
        if path in self.dims:
            return self.dims[path]
        m = re.match(r"^init\.(\d+)$", path)
        if m:
            k = int(m.group(1))
            if k >= len(self.task.init_inputs) or isinstance(self.task.init_inputs[k], (list, tuple, bool)):
                raise Verdict("plan_error", "%s is not a scalar init input" % path)
            return self.task.init_inputs[k]
        m = re.match(r"^(.*)\.shape\[\s*(-?\d+)\s*\]$", path) or re.match(r"^(.*)\.(numel)$", path)
        if m:
            key = self.buffer_key(m.group(1))
            if key is not None:
                t = self.bufs[key]
                if m.group(2) == "numel":
                    return int(t.numel())
                d = int(m.group(2))
                if not -t.dim() <= d < t.dim():
                    raise Verdict("plan_error", "%s: %s has %d dims" % (path, m.group(1), t.dim()))
                return int(t.shape[d])
        raise Verdict("plan_error", "unbound name '%s'" % path)

    def eval(self, e, where):
        try:
            return evaluate(e, self.lookup)
        except Verdict as v:
            raise Verdict(v.status, "%s: %s" % (where, v.reason))

    def int_eval(self, e, where):
        v = self.eval(e, where)
        if not isinstance(v, int):
            raise Verdict("plan_error", "%s: %r is not an integer" % (where, v))
        return v

    # binding
    def bind_step(self, step, where, is_init):
        if not isinstance(step, dict):
            raise Verdict("plan_error", "%s: not a map" % where)
        kind = next((k for k in ("launch", "gemm", "conv") if k in step), None)
        if kind is None:
            raise Verdict("plan_error", "%s: unknown step kind (keys: %s)" % (where, ", ".join(step)))
        f = step[kind] if isinstance(step[kind], dict) else step
        where = "%s '%s'" % (where, step["launch"] if kind == "launch" else kind)
        bound = {"kind": kind, "where": where, "writes": []}

        def buf(name, field, writes=False):
            key = self.buffer_key(f.get(field)) if f.get(field) is not None else None
            if key is None:
                raise Verdict("plan_error", "%s: %s must be a buffer" % (where, field))
            if is_init and key[0] in ("inputs", "outputs"):
                raise Verdict("plan_error", "%s: init steps read params and write scratch" % where)
            if writes:
                bound["writes"].append(key)
            return key
        if kind == "launch":
            args = step.get("args") or []
            params = signature_for(self.sigs, str(step["launch"]), len(args))
            grid = [self.int_eval(g, where + " grid") for g in _as_list(step.get("grid"))]
            block = [self.int_eval(b, where + " block") for b in _as_list(step.get("block"))]
            if not 1 <= len(grid) <= 3 or not 1 <= len(block) <= 3:
                raise Verdict("plan_error", "%s: grid and block take 1 to 3 values" % where)
            grid += [1] * (3 - len(grid))
            block += [1] * (3 - len(block))
            limits = ((2 ** 31 - 1, 65535, 65535), (1024, 1024, 64))
            for what, vals, lim in (("grid", grid, limits[0]), ("block", block, limits[1])):
                for d in range(3):
                    if not 1 <= vals[d] <= lim[d]:
                        raise Verdict("plan_error", "%s: %s[%d] = %d (1 to %d)" % (where, what, d, vals[d], lim[d]))
            if block[0] * block[1] * block[2] > 1024:
                raise Verdict("plan_error", "%s: %d threads per block (at most 1024)" % (where, block[0] * block[1] * block[2]))
            shared = self.int_eval(next((step[k] for k in ("shared", "smem", "shared_bytes") if k in step), 0), where + " shared")
            if not 0 <= shared <= 232448:
                raise Verdict("plan_error", "%s: shared = %d (0 to 232448)" % (where, shared))
            bargs = []
            for n, (a, p) in enumerate(zip(args, params), 1):
                key = self.buffer_key(a) if isinstance(a, str) else None
                if key is not None:
                    if not p["pointer"]:
                        raise Verdict("plan_error", "%s argument %d is the buffer %s, kernel expects %s" % (where, n, a, p["base"]))
                    allowed = _PTR_DTYPES.get(p["base"], ())
                    dt = _dtype_str(self.bufs[key])
                    if allowed is not None and dt not in allowed:
                        raise Verdict("plan_error", "%s argument %d: %s is %s, kernel expects %s*" % (where, n, a, dt, p["base"]))
                    if is_init and key[0] in ("inputs", "outputs"):
                        raise Verdict("plan_error", "%s: init steps read params and write scratch" % where)
                    if "const" not in p["text"].split("*")[0]:
                        bound["writes"].append(key)
                    bargs.append(("buf", key))
                    continue
                v = self.eval(a, "%s argument %d" % (where, n))
                if p["pointer"]:
                    raise Verdict("plan_error", "%s argument %d is %r, kernel expects %s*" % (where, n, a, p["base"]))
                np_t = _SCALARS.get(p["base"])
                if np_t is None:
                    raise Verdict("plan_error", "%s argument %d: parameter type '%s' is not supported" % (where, n, p["base"]))
                is_float = np.issubdtype(np_t, np.floating)
                if isinstance(v, float) != is_float:
                    raise Verdict("plan_error", "%s argument %d is %s, kernel expects %s" % (where, n, "float" if isinstance(v, float) else "int", p["base"]))
                if not is_float and np_t is not np.bool_:
                    info = np.iinfo(np_t)
                    if not info.min <= v <= info.max:
                        raise Verdict("plan_error", "%s argument %d = %d does not fit %s" % (where, n, v, p["base"]))
                bargs.append(("val", np_t(v)))
            bound.update(name=str(step["launch"]), grid=tuple(grid), block=tuple(block), shared=shared, args=bargs)
        elif kind == "gemm":
            a, b = buf("a", "a"), buf("b", "b")
            out = buf("out", "out" if "out" in f else "c", writes=True)
            bias = buf("bias", "bias") if f.get("bias") is not None else None
            act = str(f.get("activation", f.get("epilogue", "none")) or "none")
            act = "none" if act == "bias" else act
            if act not in ("none", "relu", "gelu"):
                raise Verdict("plan_error", "%s: activation '%s' (none, relu, gelu)" % (where, act))
            ta, tb = bool(f.get("trans_a", False)), bool(f.get("trans_b", False))
            A, B, O = self.bufs[a], self.bufs[b], self.bufs[out]
            if not (A.dtype == B.dtype == O.dtype) or A.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise Verdict("plan_error", "%s: a, b and out must have one float dtype" % where)
            last2 = lambda t: (1, t.shape[0] if t.dim() else 1) if t.dim() < 2 else (t.shape[-2], t.shape[-1])
            a0, a1 = last2(A)
            b0, b1 = last2(B)
            m, k = (a1, a0) if ta else (a0, a1)
            n, kb = (b0, b1) if tb else (b1, b0)
            if "m" in f:
                m = self.int_eval(f["m"], where + " m")
            if "n" in f:
                n = self.int_eval(f["n"], where + " n")
            if "k" in f:
                k = kb = self.int_eval(f["k"], where + " k")
            batch = self.int_eval(f["batch"], where + " batch") if "batch" in f else 1
            if "m" not in f and "batch" not in f and A.dim() > 2 and not ta:
                m = A.numel() // A.shape[-1]           # leading dims of a folded into M
            if kb != k:
                raise Verdict("plan_error", "%s: inner sizes differ (a gives k=%d, b gives %d)" % (where, k, kb))
            if batch * m * k > A.numel() or batch * k * n > B.numel() or batch * m * n > O.numel():
                raise Verdict("plan_error", "%s: m=%d n=%d k=%d batch=%d does not fit the buffers" % (where, m, n, k, batch))
            if bias is not None and self.bufs[bias].numel() < n:
                raise Verdict("plan_error", "%s: bias has fewer than n=%d elements" % (where, n))
            compute = str(f.get("compute", "fp32"))
            if compute not in ("fp32", "tf32"):
                raise Verdict("plan_error", "%s: compute '%s' (fp32, tf32)" % (where, compute))
            bound.update(a=a, b=b, out=out, bias=bias, act=act, ta=ta, tb=tb, m=m, n=n, k=k, batch=batch,
                         alpha=float(f.get("alpha", 1.0)), beta=float(f.get("beta", 0.0)), tf32=compute == "tf32")
        else:
            x, w, out = buf("x", "x"), buf("w", "w"), buf("out", "out", writes=True)
            bias = buf("bias", "bias") if f.get("bias") is not None else None
            pair = lambda key, dflt: tuple(int(v) for v in (f[key] if isinstance(f.get(key), list) else [f.get(key, dflt)] * 2))
            stride, padding, dilation = pair("stride", 1), pair("padding", 0), pair("dilation", 1)
            groups = int(f.get("groups", 1))
            X, W, O = self.bufs[x], self.bufs[w], self.bufs[out]
            if X.dim() != 4 or W.dim() != 4 or O.dim() != 4:
                raise Verdict("plan_error", "%s: conv needs 4-d NCHW x, KCRS w and NKPQ out" % where)
            p = (X.shape[2] + 2 * padding[0] - dilation[0] * (W.shape[2] - 1) - 1) // stride[0] + 1
            q = (X.shape[3] + 2 * padding[1] - dilation[1] * (W.shape[3] - 1) - 1) // stride[1] + 1
            want = [X.shape[0], W.shape[0], p, q]
            if W.shape[1] * groups != X.shape[1] or list(O.shape) != want:
                raise Verdict("plan_error", "%s: out must be %s (w %s, x %s, groups %d)" % (where, want, list(W.shape), list(X.shape), groups))
            bound.update(x=x, w=w, out=out, bias=bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return bound

    # compiling
    def compile(self, arch_opts=()):
        names = sorted({st["name"] for st in self.init_steps + self.forward_steps if st["kind"] == "launch"})
        self.functions = {}
        if not names:
            return 0.0
        import cupy
        self.src_dir = tempfile.mkdtemp(prefix="kb_bundle_")
        for fname, src in self.kernels.items():
            path = os.path.join(self.src_dir, fname)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(src)
        main = "".join('#include "%s"\n' % f for f in sorted(self.kernels) if f.endswith(".cu"))
        opts = ["--include-path=" + self.src_dir] + list(arch_opts)   # CuPy adds -arch for the device
        cuda = os.environ.get("CUDA_PATH", "/usr/local/cuda")
        for inc in (os.path.join(cuda, "include"), os.path.join(cuda, "include", "cccl")):
            if os.path.isdir(inc):
                opts.append("--include-path=" + inc)
        t0 = time.time()
        try:
            mod = cupy.RawModule(code=main, options=tuple(opts), name_expressions=names)
            for nm in names:
                self.functions[nm] = mod.get_function(nm)
        except Exception as e:
            msg = str(e)
            first = next((l for l in msg.splitlines() if "error" in l), msg.splitlines()[0] if msg else type(e).__name__)
            raise Verdict("compile_error", first.strip()[:500])
        for st in self.init_steps + self.forward_steps:
            if st["kind"] == "launch" and st["shared"] > 48 * 1024:
                self.functions[st["name"]].max_dynamic_shared_size_bytes = st["shared"]
        return time.time() - t0

    # running
    def view(self, key):
        """A CuPy array over buffer `key`'s bytes (the kernel sees only the pointer; CuPy has no bf16).
        Cached per buffer and rebuilt when the buffer's tensor changes (new inputs, a conv result), so
        a view never keeps a tensor alive that the buffer no longer holds."""
        import cupy
        t = self.bufs[key]
        hit = self.views.get(key)
        if hit is None or hit[0] is not t:
            n = t.numel() * t.element_size()
            mem = cupy.cuda.UnownedMemory(t.data_ptr(), max(n, 1), t)
            hit = (t, cupy.ndarray((n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0)))
            self.views[key] = hit
        return hit[1]

    def run_step(self, st):
        B = self.bufs
        if st["kind"] == "launch":
            import cupy
            args = tuple(self.view(v) if kind == "buf" else v for kind, v in st["args"])
            ptr = torch.cuda.current_stream().cuda_stream      # the steps run on torch's stream, in order
            if self.stream is None or self.stream[0] != ptr:
                self.stream = (ptr, cupy.cuda.ExternalStream(ptr))
            with self.stream[1]:
                self.functions[st["name"]](st["grid"], st["block"], args, shared_mem=st["shared"])
        elif st["kind"] == "gemm":
            bt, m, n, k = st["batch"], st["m"], st["n"], st["k"]
            A = B[st["a"]].reshape(-1)[:bt * m * k]
            A = A.view(bt, k, m).transpose(1, 2) if st["ta"] else A.view(bt, m, k)
            Bm = B[st["b"]].reshape(-1)[:bt * k * n]
            Bm = Bm.view(bt, n, k).transpose(1, 2) if st["tb"] else Bm.view(bt, k, n)
            O = B[st["out"]].reshape(-1)[:bt * m * n].view(bt, m, n)
            bias = B[st["bias"]].reshape(-1)[:n] if st["bias"] is not None else None
            if st["tf32"]:
                set_tf32(True)
            act = st["act"]
            with blas_cublaslt(O.is_cuda):
                try:
                    if st["beta"] == 0.0 and bt == 1 and bias is not None and st["alpha"] == 1.0 \
                            and act in ("relu", "gelu") and O.is_cuda and hasattr(torch, "_addmm_activation"):
                        # one cuBLASLt call with the bias+activation epilogue, as the plan's step is
                        O[0].copy_(torch._addmm_activation(bias, A[0], Bm[0], use_gelu=act == "gelu"))
                        act = None
                    elif st["beta"] == 0.0 and bt == 1 and bias is not None:
                        torch.addmm(bias, A[0], Bm[0], alpha=st["alpha"], out=O[0])
                    elif st["beta"] == 0.0:
                        torch.matmul(A, Bm, out=O) if bt > 1 else torch.mm(A[0], Bm[0], out=O[0])
                        if st["alpha"] != 1.0:
                            O.mul_(st["alpha"])
                        if bias is not None:
                            O.add_(bias)
                    else:
                        r = torch.matmul(A, Bm).mul_(st["alpha"]).add_(O, alpha=st["beta"])
                        O.copy_(r if bias is None else r.add_(bias))
                finally:
                    if st["tf32"]:
                        set_tf32(False)
            if act == "relu":
                O.relu_()
            elif act == "gelu":                        # cuBLASLt's GELU epilogue is the tanh form
                O.copy_(F.gelu(O, approximate="tanh"))
        else:
            bias = B[st["bias"]].reshape(-1) if st["bias"] is not None else None
            # conv2d has no out=: the result becomes the buffer (conv writes all of it anyway)
            B[st["out"]] = F.conv2d(B[st["x"]], B[st["w"]], bias, st["stride"], st["padding"], st["dilation"], st["groups"])

    def run_init(self):
        for st in self.init_steps:
            self.run_step(st)

    def call(self, inputs, poison=False):
        for i, v in enumerate(inputs):
            self.bufs[("inputs", i)] = v
        if poison:
            for i in range(self.n_outputs):
                o = self.bufs[("outputs", i)]
                o.fill_(float("nan")) if o.is_floating_point() else o.fill_(-1)
            for key in self.forward_scratch:
                self.bufs[key].view(torch.uint8).fill_(0xFF) if self.bufs[key].numel() else None
        for st in self.forward_steps:
            self.run_step(st)
        return [self.bufs[("outputs", i)] for i in range(self.n_outputs)]


def _as_list(v):
    return v if isinstance(v, list) else [v]


# ---- comparing, timing, the reward --------------------------------------------------------------

def compare(got, want, atol, rtol, max_rel_l2, chunk=1 << 27):
    """None if got matches want, else the reason; and the error numbers."""
    if list(got.shape) != list(want.shape):
        return "shape %s, expected %s" % (list(got.shape), list(want.shape)), {}
    g, w = got.reshape(-1), want.reshape(-1)
    if not want.is_floating_point():
        bad = (g != w).nonzero()
        if bad.numel():
            i = int(bad[0])
            return "index %d: expected %s, got %s" % (i, w[i].item(), g[i].item()), {}
        return None, {"max_abs_err": 0.0, "rel_l2_err": 0.0}
    err2 = ref2 = 0.0
    max_abs, mismatches, first = 0.0, 0, None
    for s in range(0, g.numel(), chunk):
        gc, wc = g[s:s + chunk].float(), w[s:s + chunk].float()
        fin = torch.isfinite(wc)
        d = (gc - wc).abs()
        bad = (d > atol + rtol * wc.abs()) | ~torch.isfinite(gc)
        same_nonfinite = (gc == wc) | (torch.isnan(gc) & torch.isnan(wc))
        bad = torch.where(fin, bad, ~same_nonfinite)
        n_bad = int(bad.sum())
        if n_bad and first is None:
            i = int(bad.nonzero()[0])
            first = (s + i, wc[i].item(), gc[i].item())
        mismatches += n_bad
        dz = torch.where(fin & torch.isfinite(gc), d, torch.zeros_like(d))
        max_abs = max(max_abs, float(dz.max())) if dz.numel() else max_abs
        err2 += float((dz.double() ** 2).sum())
        ref2 += float((torch.where(fin, wc, torch.zeros_like(wc)).double() ** 2).sum())
    rel = (err2 ** 0.5) / max(ref2 ** 0.5, 1e-30)
    nums = {"max_abs_err": max_abs, "rel_l2_err": rel, "mismatches": mismatches}
    if first is not None:
        return "%d of %d elements differ; first at index %d: expected %r, got %r" % (
            mismatches, g.numel(), first[0], first[1], first[2]), nums
    if rel > max_rel_l2:
        return "relative error norm %.3g over %.3g" % (rel, max_rel_l2), nums
    return None, nums


def fingerprint(t):
    """A cheap exact fingerprint of a tensor's bytes (sums of its 32-bit words, in int64)."""
    b = t.reshape(-1).view(torch.uint8)
    n4 = b.numel() // 4 * 4
    s = int(b[:n4].view(torch.int32).sum(dtype=torch.int64)) if n4 else 0
    return (s, int(b[n4:].sum()) if b.numel() > n4 else 0, b.numel())


def stats(us):
    us = sorted(us)
    q = lambda f: us[min(len(us) - 1, int(f * (len(us) - 1) + 0.5))]
    return {"median": statistics.median(us), "p10": q(0.1), "p90": q(0.9), "min": us[0], "n": len(us)}


def time_calls(fn, flush, warmup, runs, budget_s):
    """CUDA events around each call; the L2 flushed before each (untimed); median of the runs."""
    t0 = time.time()
    for _ in range(max(1, warmup)):
        flush.zero_()
        fn()
    torch.cuda.synchronize()
    per_call = (time.time() - t0) / max(1, warmup)
    n = int(max(5, min(runs, budget_s / max(per_call, 1e-6))))
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in ev:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return stats([s.elapsed_time(e) * 1000.0 for s, e in ev])


def milestone(t, eager, comp, margin=0.05):
    """The published reward and whether either decision lies inside the p10-p90 spreads."""
    gain = lambda t0: (t0["median"] - t["median"]) / t0["median"]
    faster = lambda t0: gain(t0) > margin + 1e-9
    noisy = lambda t0: (t0["p10"] - t["p90"]) / t0["p10"] <= margin < (t0["p90"] - t["p10"]) / t0["p90"]
    if comp is None:
        return (2 if faster(eager) else 1), noisy(eager)
    r = 3 if faster(eager) and faster(comp) else 2 if faster(eager) else 1
    return r, noisy(eager) or (faster(eager) and noisy(comp))


# ---- judging a candidate ------------------------------------------------------------------------

class Judge(object):
    def __init__(self, opt):
        self.opt = opt
        self.device = torch.device(opt.device)
        self.work = tempfile.mkdtemp(prefix="kb_judge_")
        self.task = None
        self.flush = None
        self.dead = None                           # a CUDA fault ends the context for the run
        if self.device.type == "cuda":
            props = torch.cuda.get_device_properties(self.device)
            l2 = getattr(props, "L2_cache_size", 0) or 50 * 1024 * 1024
            self.flush = torch.empty(2 * l2, dtype=torch.uint8, device=self.device)
            self.gpu = {"name": props.name, "l2_bytes": l2, "torch": torch.__version__}
        set_tf32(False)

    def load_task(self, task):
        if self.task is None or self.task.task_id != task["task_id"]:
            self.task = None                       # one task at a time on the device
            torch.cuda.empty_cache() if self.device.type == "cuda" else None
            self.task = Task(task, self.device, self.work)
        return self.task

    def judge(self, rec, tasks):
        t_start = time.time()
        out = {"status": None}
        self.prog = self.inputs = None             # nothing of the previous candidate stays on the device
        try:
            if self.dead:
                raise Verdict("runtime_error", "CUDA context lost earlier in this run: " + self.dead)
            task = rec.get("task") or tasks.get(rec.get("task_id"))
            if not task or "code" not in task:
                raise Verdict("bad_record", "no task with code (a task object in the record, or --tasks FILE)")
            task = dict(task, task_id=task.get("task_id", rec.get("task_id")))
            bundle = rec.get("bundle") or {}
            if not isinstance(bundle.get("kernels", {}), dict) or "plan" not in bundle:
                raise Verdict("bad_record", "bundle needs kernels {file: source} and plan")
            plan = load_plan(bundle["plan"])
            try:
                T = self.load_task(task)
            except Exception as e:
                raise Verdict("reference_error", "task: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
            self.check(T, plan, bundle.get("kernels", {}), out)
            self.time(T, out)
        except Verdict as v:
            out.update(status=v.status, reason=v.reason, correct=False if v.status not in ("bad_record", "reference_error") else None)
        except Exception as e:                     # a CUDA error from a kernel, most likely
            msg = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:400])
            out.update(status="runtime_error", reason=msg, correct=False)
            if "illegal" in msg or "misaligned" in msg or "launch failure" in msg or "CUDA_ERROR" in msg:
                self.dead = msg
        out["reward"] = out.get("reward", -1 if out.get("correct") is False else None)
        out["wall_s"] = round(time.time() - t_start, 3)
        return {"task_id": rec.get("task_id"), "candidate_id": rec.get("candidate_id"), "name": rec.get("name"),
                "schema": "cuda-agent/reference-judge/v1", "judge": out}

    def check(self, T, plan, kernels, out):
        o, t0 = self.opt, time.time()
        seeds = [o.seed + i for i in range(o.trials + 1)]     # the first: the warm call
        inputs = T.inputs(seeds[0])
        ref = T.forward(inputs)
        prog = Program(plan, kernels, parse_signatures(kernels), T, inputs, ref)
        out["compile_s"] = round(prog.compile(), 3)
        prog.run_init()
        init_fp = {k: fingerprint(v) for k, v in prog.bufs.items() if k[0] == "scratch" and k not in prog.forward_scratch}
        param_fp = {k: fingerprint(v) for k, v in prog.bufs.items() if k[0] == "params"}
        trials = []
        for n, seed in enumerate(seeds):
            if n:
                inputs = ref = None
                inputs = T.inputs(seed)
                ref = T.forward(inputs)
            in_fp = [fingerprint(v) if isinstance(v, torch.Tensor) else None for v in inputs]
            got = prog.call(inputs, poison=True)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            what = "warm call" if n == 0 else "trial %d" % n
            if len(got) != len(ref):
                raise Verdict("incorrect", "%s: %d outputs, the reference has %d" % (what, len(got), len(ref)))
            row = {"seed": seed}
            for i, (g, w) in enumerate(zip(got, ref)):
                bad, nums = compare(g, w, o.atol, o.rtol, o.max_rel_l2)
                row.update({("out%d_" % i if i else "") + k: v for k, v in nums.items()})
                if bad:
                    raise Verdict("incorrect", "%s (seed %d): outputs.%d: %s" % (what, seed, i, bad))
            for i, v in enumerate(inputs):
                if in_fp[i] is not None and fingerprint(v) != in_fp[i]:
                    raise Verdict("incorrect", "%s: the call changed inputs.%d" % (what, i))
            for k, fp in list(param_fp.items()) + list(init_fp.items()):
                if fingerprint(prog.bufs[k]) != fp:
                    raise Verdict("incorrect", "%s: the call changed %s.%s" % (what, k[0], k[1]))
            if n:
                trials.append(row)
        out.update(status="passed", correct=True, trials=trials, check_s=round(time.time() - t0, 3))
        self.prog, self.inputs = prog, inputs

    def time(self, T, out):
        o = self.opt
        if self.device.type != "cuda" or o.no_timing:
            return
        t0 = time.time()
        prog, inputs = self.prog, self.inputs      # the last trial's inputs
        with torch.no_grad():
            out["time_us"] = time_calls(lambda: prog.call(inputs), self.flush, o.warmup, o.runs, o.budget_s)
            if "eager" not in T.baselines:
                T.baselines["eager"] = time_calls(lambda: T.model(*inputs), self.flush, o.warmup, o.runs, o.budget_s)
            if "compile" not in T.baselines and not o.no_compile:
                try:
                    fn = torch.compile(T.model)
                    fn(*inputs)                      # compiling is not timed
                    T.baselines["compile"] = time_calls(lambda: fn(*inputs), self.flush, o.warmup, o.runs, o.budget_s)
                except Exception as e:
                    T.baselines["compile"] = {"error": "%s: %s" % (type(e).__name__, str(e)[:300])}
        self.prog = self.inputs = None
        e, c = T.baselines["eager"], T.baselines.get("compile")
        out["baselines"] = {"eager": e, "compile": c}
        out["speedup_vs_eager"] = round(e["median"] / out["time_us"]["median"], 4)
        if c and "median" in c:
            out["speedup_vs_compile"] = round(c["median"] / out["time_us"]["median"], 4)
            out["reward"], out["within_noise"] = milestone(out["time_us"], e, c)
        elif c is None:
            out["reward"], out["within_noise"] = milestone(out["time_us"], e, None)
        else:
            out["reward"], out["within_noise"] = 1, False   # no compile time: nothing is compared
        out["timing_s"] = round(time.time() - t0, 3)
        out["gpu"] = self.gpu


# ---- the CPU self-test --------------------------------------------------------------------------

_SMALL = {  # small tasks whose plans use only gemm/conv steps: the library steps run on the CPU too
    "mlp": ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.network = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, 16))\n"
            "    def forward(self, x):\n        return self.network(x)\n"
            "def get_inputs():\n    return [torch.rand(8, 64)]\n",
            "dims: {B: inputs.0.shape[0], H1: params.network.0.weight.shape[0], H2: params.network.2.weight.shape[0]}\n"
            "scratch:\n  h1: {dtype: float32, shape: [B, H1]}\n  h2: {dtype: float32, shape: [B, H2]}\nforward:\n"
            "  - gemm: {a: inputs.0, b: params.network.0.weight, trans_b: true, bias: params.network.0.bias, activation: relu, out: scratch.h1}\n"
            "  - gemm: {a: scratch.h1, b: params.network.2.weight, trans_b: true, bias: params.network.2.bias, activation: relu, out: scratch.h2}\n"
            "  - gemm: {a: scratch.h2, b: params.network.4.weight, trans_b: true, bias: params.network.4.bias, out: outputs.0}\n", "passed"),
    "trans_a": ("class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.matmul(A.T, B)\n"
                "def get_inputs():\n    return [torch.rand(24, 10), torch.rand(24, 14)]\n",
                "forward:\n  - gemm:\n      a: inputs.0\n      b: inputs.1\n      trans_a: true\n      out: outputs.0\n", "passed"),
    "batched": ("class Model(nn.Module):\n    def forward(self, A, B):\n        return torch.bmm(A, B)\n"
                "def get_inputs():\n    return [torch.rand(4, 8, 16), torch.rand(4, 16, 12)]\n",
                "forward:\n  - gemm: {a: inputs.0, b: inputs.1, out: outputs.0, batch: 4, m: 8, n: 12, k: 16}\n", "passed"),
    "beta_gelu": ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                  "        self.l1 = nn.Linear(32, 20, bias=False)\n        self.l2 = nn.Linear(32, 20)\n"
                  "    def forward(self, x):\n        return F.gelu(2.0 * self.l1(x) + self.l2(x), approximate='tanh')\n"
                  "def get_inputs():\n    return [torch.randn(6, 32)]\n",
                  "forward:\n  - gemm: {a: inputs.0, b: params.l1.weight, trans_b: true, alpha: 2.0, out: outputs.0}\n"
                  "  - gemm: {a: inputs.0, b: params.l2.weight, trans_b: true, beta: 1.0, bias: params.l2.bias, activation: gelu, out: outputs.0}\n",
                  "passed"),
    "conv": ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
             "        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)\n    def forward(self, x):\n        return self.conv(x)\n"
             "def get_inputs():\n    return [torch.rand(2, 3, 17, 17)]\n",
             "forward:\n  - conv: {x: inputs.0, w: params.conv.weight, bias: params.conv.bias, out: outputs.0, stride: 2, padding: 1}\n",
             "passed"),
    "mlp_wrong": None,   # the mlp plan without its first ReLU: incorrect
    "conv_shape": None,  # the conv plan without its padding: plan_error (out shape)
}


def selftest(opt):
    fails = []

    def ok(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            fails.append(what)
    # 1. expressions
    lk = {"N": 1000, "M": -7}.__getitem__
    for e, want in (("cdiv(N, 256)", 4), ("N / 3", 333), ("M / 2", -3), ("M % 3", -1), ("-M * 2 + 1", 15),
                    ("min(N, 5, 9) * max(1, 2)", 10), ("2.0", 2.0), ("1e-5", 1e-5), ("N / 4.0", 250.0),
                    ("(N + 24) % 1000", 24), ("cdiv(cdiv(N, 4), 256)", 1), ("3 - -2", 5)):
        got = evaluate(e, lk)
        ok(got == want and type(got) is type(want), "expr %s = %r (got %r)" % (e, want, got))
    # 2. the YAML subset: flow scalars keep their commas and brackets, block lists of maps
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import make_candidates as mc
    recs = []
    for level, stem, bdir in mc.find_bundles(os.path.join(here, "bundles"), []):
        code = open(os.path.join(opt.kb, level, stem + ".py")).read()
        recs.append(("%s/%s" % (level, stem), code, open(os.path.join(bdir, "plan.yaml")).read(), mc.read_kernels(bdir)))
    text = ("# c\ndims: {N: inputs.0.shape[0], M: 'a, b'}  # c\nscratch:\n  t: {dtype: float32, shape: [N, cdiv(N, 4)]}\n"
            "forward:\n- launch: k<256>\n  grid: [max(1, min(cdiv(N, 256), 64))]\n  block: [256]\n  shared: 0\n"
            "  args: [inputs.0, 2.0, -1, 1e-5]\n- gemm:\n    a: inputs.0\n    trans_b: true\n")
    want = {"dims": {"N": "inputs.0.shape[0]", "M": "a, b"}, "scratch": {"t": {"dtype": "float32", "shape": ["N", "cdiv(N, 4)"]}},
            "forward": [{"launch": "k<256>", "grid": ["max(1, min(cdiv(N, 256), 64))"], "block": [256], "shared": 0,
                         "args": ["inputs.0", 2.0, -1, "1e-5"]}, {"gemm": {"a": "inputs.0", "trans_b": True}}]}
    ok(mini_yaml(text) == want, "mini_yaml reads the plan subset: %r" % mini_yaml(text))
    ok(mini_yaml(_SMALL["mlp"][1])["forward"][0]["gemm"]["activation"] == "relu", "mini_yaml: flow maps in a block list")
    # 3. signatures of every bundle kernel
    for name, _, _, kernels in recs:
        for k, sg in parse_signatures(kernels).items():
            types_ = ["%s%s" % (p["base"], "*" if p["pointer"] else "") for p in sg[0]["params"]]
            ok(all(t.rstrip("*") in _PTR_DTYPES or t in _SCALARS for t in types_), "%s: %s(%s)" % (name, k, ", ".join(types_)))
    sig = parse_signatures({"a.cu": "template <typename T, int B>\n__global__ void __launch_bounds__(B) k(const T* __restrict__ x,"
                                     " unsigned int n, long long m, float4 *y) {}\nextern \"C\" __global__ void g(void) {}"})
    ok([p["base"] for p in signature_for(sig, "k<float, 128>", 4)] == ["float", "unsigned int", "long long", "float4"]
       and sig["g"][0]["params"] == [], "signature: template types, launch bounds, extern C, void")
    # 4. every bundle binds on meta tensors (grids, argument types, gemm sizes, conv shapes)
    for name, code, plan, kernels in recs:
        spec = mc.task_specs(code, name)
        fake = types.SimpleNamespace(task_id=name, device=torch.device("meta"), input_names=[i["name"] for i in spec["inputs"]],
                                     init_inputs=spec["init_inputs"], state={})
        meta = lambda s: torch.empty(s["shape"], dtype=getattr(torch, [k for k, v in mc._DTYPES.items() if v == s["dtype"]][0]), device="meta")
        fake.state = {p["name"]: meta(p) for p in spec["params"]}
        try:
            prog = Program(load_plan(plan), kernels, parse_signatures(kernels), fake,
                           [meta(i) for i in spec["inputs"]], [meta(o) for o in spec["outputs"]])
            ok(True, "%s binds: %s" % (name, "; ".join("%s %s" % (s["kind"], s.get("name", "") or "x".join(
                str(s[d]) for d in ("m", "n", "k") if d in s)) for s in prog.forward_steps)))
        except Verdict as v:
            ok(False, "%s binds: %s: %s" % (name, v.status, v.reason))
        if "relu_f4" in plan:
            for old, new, want in (("N]", "2.0]", "is float, kernel expects long long"), ("relu_f4\n", "relu_f5\n", "not defined"),
                                   ("block: [256]", "block: [2048]", "block[0] = 2048"), ("inputs.0, outputs.0", "inputs.0, inputs.0", "never written")):
                try:
                    Program(load_plan(plan.replace(old, new)), kernels, parse_signatures(kernels), fake,
                            [meta(i) for i in spec["inputs"]], [meta(o) for o in spec["outputs"]])
                    ok(False, "plan_error for %s" % new)
                except Verdict as v:
                    ok(v.status == "plan_error" and want in v.reason, "plan_error for %r: %s" % (new, v.reason))
    # 5. the library steps on the CPU, judged against small tasks
    opt.device, opt.no_timing = "cpu", True
    judge = Judge(opt)
    small = dict(_SMALL)
    small["mlp_wrong"] = (small["mlp"][0], small["mlp"][1].replace(", activation: relu, out: scratch.h1", ", out: scratch.h1"), "incorrect")
    small["conv_shape"] = (small["conv"][0], small["conv"][1].replace(", padding: 1", ""), "plan_error")
    for name, (code, plan, want) in small.items():
        code = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + code + "def get_init_inputs():\n    return []\n"
        rec = {"task_id": "selftest-" + name, "task": {"task_id": "selftest-" + name, "code": code},
               "bundle": {"kernels": {}, "plan": plan}}
        r = judge.judge(rec, {})["judge"]
        ok(r["status"] == want, "cpu %s: %s (%s)" % (name, r["status"], r.get("reason") or "rel_l2 %.2g" % r["trials"][-1]["rel_l2_err"]))
    print("selftest: %d failed" % len(fails))
    return 1 if fails else 0


# ---- main ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="The in-process reference judge for KernelBench bundles (see the file's docstring).")
    ap.add_argument("-i", "--input", default="-", help="candidate records, JSON Lines ('-' = stdin)")
    ap.add_argument("-o", "--output", default="-")
    ap.add_argument("--tasks", help="task records by task_id, for candidates without a task object")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KB_JUDGE_SEED", "20260")))
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--max-rel-l2", type=float, default=5e-2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--runs", type=int, default=50, help="timed calls per side at most")
    ap.add_argument("--budget-s", type=float, default=4.0, help="timed seconds per side at most (at least 5 calls)")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile baseline (reward at most 2)")
    ap.add_argument("--no-timing", action="store_true", help="check only")
    ap.add_argument("--selftest", action="store_true", help="CPU checks of the judge itself, then exit")
    ap.add_argument("--kb", default=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), ".kb", "KernelBench"))
    opt = ap.parse_args()
    if opt.selftest:
        return selftest(opt)
    if torch.device(opt.device).type == "cuda":
        if not torch.cuda.is_available():
            print("reference_judge: torch %s sees no CUDA device (%s was asked): run it on the GPU machine" % (torch.__version__, opt.device), file=sys.stderr)
            return 3
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:
            print("reference_judge: CuPy is needed for launch steps and does not work here: %s: %s "
                  "(pip install cupy-cuda13x, or cupy-cuda12x for CUDA 12)" % (type(e).__name__, e), file=sys.stderr)
            return 3
        torch.cuda.set_device(torch.device(opt.device))
        cupy.cuda.Device(torch.cuda.current_device()).use()
    tasks = {}
    if opt.tasks:
        for line in open(opt.tasks):
            if line.strip():
                t = json.loads(line)
                tasks[t["task_id"]] = t
    fin = sys.stdin if opt.input == "-" else open(opt.input)
    fout = sys.stdout if opt.output == "-" else open(opt.output, "w")
    judge, t0, counts, rewards = Judge(opt), time.time(), {}, {}
    for n, line in enumerate(fin, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            print("reference_judge: line %d is not JSON: %s" % (n, e), file=sys.stderr)
            return 2
        res = judge.judge(rec, tasks)
        j = res["judge"]
        counts[j["status"]] = counts.get(j["status"], 0) + 1
        rewards[str(j.get("reward"))] = rewards.get(str(j.get("reward")), 0) + 1
        fout.write(json.dumps(res) + "\n")
        fout.flush()
        print("reference_judge: %s %s: %s%s reward %s (%.1f s)" % (
            rec.get("name") or rec.get("task_id"), rec.get("candidate_id"), j["status"],
            " %.1f us (eager %.1f, compile %s)" % (j["time_us"]["median"], j["baselines"]["eager"]["median"],
                                                   "%.1f" % j["baselines"]["compile"]["median"] if (j["baselines"].get("compile") or {}).get("median") else "-")
            if "time_us" in j else (": " + j.get("reason", "")[:200] if j["status"] != "passed" else ""),
            j.get("reward"), j["wall_s"]), file=sys.stderr)
    summary = {"judge": "reference", "candidates": sum(counts.values()), "by_status": counts, "by_reward": rewards,
               "wall_s": round(time.time() - t0, 2)}
    print("reference_judge: " + json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
