#!/usr/bin/env python3
"""CPU simulation of the level-3 CNN bundles' plans (bench/kernelbench/bundles/level3/<stem>/plan.yaml),
to check their wiring where no GPU is: every step runs on flat float32 CPU buffers exactly as the plan
addresses them (views at element offsets, image strides, repeats with their index, `{expression}` parts of
params names, conv `shape`s, fields as expressions and `x_strides`/`out_strides` (an out that writes an
element twice or meets its input fails), gemm m/n/k), conv and gemm steps through torch, and each launch of a _lib/cnn_* kernel through a torch model
of what that kernel computes from its arguments and grid (cnn_lib_emu/test.cpp checks the kernels' own
source against the same definitions). The output is compared with the task's Model in training mode on a
smaller input than the task's (the plans' sizes follow the input), as the checker would: error norm
||got - want|| / ||want|| and every element within atol = rtol = 1e-2 (NaN anywhere fails: scratch and
outputs start as NaN, so a step that reads what nothing wrote shows). Inputs and params must not change.

usage: plan_sim.py STEM:N,C,H,W [STEM:N,C,H,W ...]     exit 0 when every bundle matches, 1 otherwise
"""
import importlib.util
import math
import os
import re
import sys

import torch
import torch.nn.functional as F
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KB = os.path.join(HERE, "..", "..", "..", ".kb", "KernelBench", "level3")
L3 = os.path.join(HERE, "..", "bundles", "level3")


class SimError(Exception):
    pass


def protect(text):
    """Commas inside parentheses would split YAML flow items: hide them (comments dropped first)."""
    lines = []
    for line in text.split("\n"):
        line = re.sub(r"(^|\s)#.*$", "", line)
        out, depth = [], 0
        for c in line:
            depth += c == "("
            depth -= c == ")"
            out.append("\u00a6" if c == "," and depth > 0 else c)
        lines.append("".join(out))
    return "\n".join(lines)


def unprotect(v):
    if isinstance(v, str):
        return v.replace("\u00a6", ",")
    if isinstance(v, list):
        return [unprotect(x) for x in v]
    if isinstance(v, dict):
        return {k: unprotect(x) for k, x in v.items()}
    return v


class Sim:
    def __init__(self, plan_text, model, x, init_inputs):
        self.plan = unprotect(yaml.safe_load(protect(plan_text)))
        self.model, self.init = model, init_inputs
        self.bufs = {"inputs.0": x.reshape(-1).clone()}
        self.shapes = {"inputs.0": list(x.shape)}
        for k, v in model.state_dict().items():
            if v.is_floating_point():
                self.bufs["params." + k] = v.detach().reshape(-1).clone().float()
                self.shapes["params." + k] = list(v.shape)
        with torch.no_grad():
            self.want = model(x.clone())
        self.bufs["outputs.0"] = torch.full((self.want.numel(),), float("nan"))
        self.shapes["outputs.0"] = list(self.want.shape)
        self.env = {}
        for name, e in (self.plan.get("dims") or {}).items():
            self.env[name] = self.ev(e)
        for name, spec in (self.plan.get("scratch") or {}).items():
            n = 1
            for d in spec["shape"]:
                n *= self.ev(d)
            dt = {"float32": torch.float32, "float64": torch.float64}[spec.get("dtype", "float32")]
            self.bufs["scratch." + name] = torch.full((n,), float("nan"), dtype=dt)
            self.shapes["scratch." + name] = [self.ev(d) for d in spec["shape"]]
        self.frozen = {k: v.clone() for k, v in self.bufs.items() if k.startswith(("inputs.", "params."))}

    # expressions
    def ev(self, e, env=None):
        if isinstance(e, bool):
            return int(e)
        if isinstance(e, (int, float)):
            return e
        s = str(e)
        env = dict(self.env, **(env or {}))

        def ref(m):
            path = m.group(0)
            mm = re.match(r"^(inputs\.\d+|outputs\.\d+|params\.[A-Za-z0-9_.]+?)\.shape\[(-?\d+)\]$", path)
            if mm:
                return str(self.shapes[mm.group(1)][int(mm.group(2))])
            mm = re.match(r"^init\.(\d+)$", path)
            if mm:
                return str(self.init[int(mm.group(1))])
            if path in env:
                return str(env[path])
            if re.fullmatch(r"\d+(\.\d*)?([eE][-+]?\d+)?", path) or path in ("cdiv", "min", "max"):
                return path
            raise SimError("unbound name %s in %s" % (path, s))
        py = re.sub(r"(?<![0-9.])[A-Za-z_][A-Za-z0-9_.]*(\[-?\d+\])?", ref, s).replace("/", "//")
        return eval(py, {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "__builtins__": {}})

    def buf(self, a, env):
        """(flat tensor, element offset) of a buffer or view argument."""
        s = str(a).strip()
        if "{" in s:             # a params name's {expression} parts, evaluated for this iteration
            s = re.sub(r"\{([^{}]*)\}", lambda mm: str(self.ev(mm.group(1), env)), s)
        m = re.match(r"^((?:inputs|outputs|scratch|params)\.[A-Za-z0-9_.]+?)(?:\[(.*)\])?$", s)
        if not m or m.group(1) not in self.bufs:
            return None
        off = self.ev(m.group(2), env) if m.group(2) else 0
        t = self.bufs[m.group(1)]
        if not 0 <= off < t.numel():
            raise SimError("view %s starts at %d, outside its %d elements" % (s, off, t.numel()))
        return t, off, m.group(1)

    @staticmethod
    def strided(b, size, stride):
        t, off = b[0], b[1]
        last = off + sum((n - 1) * st for n, st in zip(size, stride))
        if any(n == 0 for n in size):
            return t[off:off]
        if last >= t.numel():
            raise SimError("%s: element %d read or written past its %d elements" % (b[2], last, t.numel()))
        return torch.as_strided(t, size, stride, off)

    def dense(self, b, shape):
        st, acc = [], 1
        for n in reversed(shape):
            st.insert(0, acc)
            acc *= n
        return self.strided(b, shape, st)

    # steps
    def run(self, steps, env):
        for st in steps:
            if "repeat" in st:
                idx = st.get("index", "i")
                for i in range(self.ev(st["repeat"], env)):
                    self.run(st["steps"], dict(env, **{idx: i}))
            elif "conv" in st:
                self.conv(st["conv"], env)
            elif "gemm" in st:
                self.gemm(st["gemm"], env)
            elif "launch" in st:
                self.launch(st, env)
            else:
                raise SimError("unknown step %s" % st)

    def conv(self, f, env):
        E = lambda k, d=None: self.ev(f[k], env) if k in f else d
        sh = {k: self.ev(v, env) for k, v in f["shape"].items()} if "shape" in f else None
        xb, wb, ob = self.buf(f["x"], env), self.buf(f["w"], env), self.buf(f["out"], env)
        stride, pad, groups = E("stride", 1), E("padding", 0), E("groups", 1)
        xst = [self.ev(v, env) for v in f["x_strides"]] if "x_strides" in f else None
        ost = [self.ev(v, env) for v in f["out_strides"]] if "out_strides" in f else None
        if sh:
            xshape = [sh["n"], sh["c"], sh["h"], sh["w"]]
            X = self.strided(xb, xshape, xst) if xst else self.dense(xb, xshape)
            Wt = self.dense(wb, [sh["k"], sh["c"] // groups, sh["r"], sh["s"]])
        else:
            if xst or ost:
                raise SimError("conv strides without shape")
            X = self.dense(xb, self.shapes[xb[2]])
            Wt = self.dense(wb, self.shapes[wb[2]])
        bias = self.buf(f["bias"], env)[0] if "bias" in f else None
        if bias is not None and self.shapes[self.buf(f["bias"], env)[2]] != [Wt.shape[0]]:
            raise SimError("conv bias shape")
        if wb[1] != 0 or wb[0].numel() != Wt.numel():
            raise SimError("conv w %s does not match the shape %s" % (f["w"], list(Wt.shape)))
        Y = F.conv2d(X, Wt, bias, stride, pad, 1, groups)
        O = self.strided(ob, list(Y.shape), ost) if ost else self.dense(ob, list(Y.shape))
        # out may share a buffer with x only where their elements never meet, and writes each element once
        oi = self.index_of(ob, list(Y.shape), ost) if ost or ob[2] == xb[2] else None
        if ost and oi.unique().numel() != oi.numel():
            raise SimError("conv out %s writes an element twice" % f["out"])
        if ob[2] == xb[2] and bool(torch.isin(oi, self.index_of(xb, list(X.shape), xst)).any()):
            raise SimError("conv out %s overlaps its input %s" % (f["out"], f["x"]))
        O.copy_(Y)

    def index_of(self, b, size, stride):
        """The flat element indices a view covers."""
        if stride is None:
            stride, acc = [], 1
            for n in reversed(size):
                stride.insert(0, acc)
                acc *= n
        idx = torch.arange(b[0].numel())
        return torch.as_strided(idx, size, stride, b[1]).reshape(-1)

    def gemm(self, f, env):
        a, b, o = self.buf(f["a"], env), self.buf(f["b"], env), self.buf(f["out"], env)
        m, n, k = self.ev(f["m"], env) if "m" in f else None, self.ev(f["n"], env) if "n" in f else None, \
            self.ev(f["k"], env) if "k" in f else None
        if m is None:
            k = self.shapes[a[2]][-1]
            m = a[0].numel() // k
            n = self.shapes[b[2]][0] if f.get("trans_b") else self.shapes[b[2]][-1]
        A = self.dense(a, [m, k])
        Bm = self.dense(b, [n, k]).t() if f.get("trans_b") else self.dense(b, [k, n])
        Y = A @ Bm
        if "bias" in f:
            bb = self.buf(f["bias"], env)
            Y = Y + self.dense(bb, [n])
        if f.get("activation") == "relu":
            Y = torch.relu(Y)
        self.dense(o, [m, n]).copy_(Y)

    def launch(self, st, env):
        name = st["launch"]
        grid = [self.ev(g, env) for g in st["grid"]] + [1, 1]
        block = [self.ev(b, env) for b in st["block"]]
        args = [self.buf(a, env) or self.ev(a, env) for a in st["args"]]
        fn = getattr(self, "k_" + name, None)
        if fn is None:
            raise SimError("no model of kernel %s" % name)
        fn(grid, block, *args)

    # models of the _lib/cnn_* kernels (see their comments)
    def _planes(self, b, nstride, N, C, HW):
        return self.strided(b, [N, C, HW], [nstride, HW, 1])

    def k_cnn_bn_partial(self, grid, block, x, ns, part, C, N, HW, P, copy=None):
        assert grid[0] == P and grid[1] == C and block[0] <= 256 and block[0] % 32 == 0, (grid, block)
        assert part[0].dtype == torch.float64
        X = self._planes(x, ns, N, C, HW).permute(1, 0, 2).reshape(C, N * HW).double()
        K = X[:, 0]
        chunk = -(-N * HW // P)
        Pt = self.dense(part, [C, P, 4])
        for p in range(P):
            seg = X[:, p * chunk:min(N * HW, (p + 1) * chunk)] - K[:, None]
            Pt[:, p, 0] = seg.shape[1]
            Pt[:, p, 1] = seg.sum(1)
            Pt[:, p, 2] = (seg * seg).sum(1)
            Pt[:, p, 3] = K

    def k_cnn_bn_partial_copy(self, grid, block, x, ns, dst, dns, part, C, N, HW, P):
        self._planes(dst, dns, N, C, HW).copy_(self._planes(x, ns, N, C, HW))
        self.k_cnn_bn_partial(grid, block, x, ns, part, C, N, HW, P)

    def k_cnn_bn_finalize(self, grid, block, part, mv, C, P):
        assert grid[0] == C and mv[0].dtype == torch.float64, grid
        Pt = self.dense(part, [C, P, 4])
        n = Pt[:, :, 0].sum(1)
        md = Pt[:, :, 1].sum(1) / n
        M = self.dense(mv, [C, 2])
        M[:, 0] = Pt[:, 0, 3] + md
        M[:, 1] = (Pt[:, :, 2].sum(1) / n - md * md).clamp(min=0)

    def _bn(self, X, mv, g, b, eps, C):
        M = self.dense(mv, [C, 2])
        assert M.dtype == torch.float64
        G, B = self.dense(g, [C]), self.dense(b, [C])
        o = (X.double() - M[:, 0][None, :, None]) * (G.double() / torch.sqrt(M[:, 1] + eps))[None, :, None] + B[None, :, None]
        return o.float()

    def k_cnn_bn_apply(self, grid, block, x, xs, y, ys, mv, g, b, eps, C, HW, relu):
        assert grid[1] == C and grid[0] * block[0] * 4 >= HW, (grid, block, C, HW)
        N = grid[2]
        o = self._bn(self._planes(x, xs, N, C, HW), mv, g, b, eps, C)
        self._planes(y, ys, N, C, HW).copy_(torch.relu(o) if relu else o)

    def k_cnn_bn_add_relu(self, grid, block, x, xs, r, rs, y, ys, mv, g, b, eps, C, HW):
        assert grid[1] == C and grid[0] * block[0] * 4 >= HW
        N = grid[2]
        o = self._bn(self._planes(x, xs, N, C, HW), mv, g, b, eps, C) + self._planes(r, rs, N, C, HW)
        self._planes(y, ys, N, C, HW).copy_(torch.relu(o))

    def k_cnn_bn_bn_add_relu(self, grid, block, x, xs, r, rs, y, ys, mv, g, b, rmv, rg, rb, eps, C, HW):
        assert grid[1] == C and grid[0] * block[0] * 4 >= HW
        N = grid[2]
        o = self._bn(self._planes(x, xs, N, C, HW), mv, g, b, eps, C) + \
            self._bn(self._planes(r, rs, N, C, HW), rmv, rg, rb, eps, C)
        self._planes(y, ys, N, C, HW).copy_(torch.relu(o))

    def k_cnn_bn_relu_avgpool2(self, grid, block, x, xs, y, mv, g, b, eps, C, H, W):
        N = grid[2]
        assert grid[1] == C
        z = torch.relu(self._bn(self._planes(x, xs, N, C, H * W), mv, g, b, eps, C)).reshape(N, C, H, W)
        o = F.avg_pool2d(z, 2, 2)
        self.dense(y, list(o.shape)).copy_(o)

    def k_cnn_bn_relu_gap(self, grid, block, x, y, mv, g, b, eps, N, C, HW):
        assert grid[0] * (block[0] // 32) >= N * C
        z = torch.relu(self._bn(self._planes(x, C * HW, N, C, HW), mv, g, b, eps, C))
        self.dense(y, [N, C]).copy_(z.mean(2))

    def k_cnn_maxpool2d(self, grid, block, x, xs, y, ys, C, H, W, OH, OW, k, s, pad, relu):
        N = grid[2]
        assert grid[1] == C
        X = self._planes(x, xs, N, C, H * W).reshape(N, C, H, W)
        o = F.max_pool2d(X, k, s, pad)
        assert list(o.shape[2:]) == [OH, OW], (o.shape, OH, OW)
        self._planes(y, ys, N, C, OH * OW).copy_((torch.relu(o) if relu else o).reshape(N, C, OH * OW))

    def k_cnn_avgpool2d(self, grid, block, x, xs, y, ys, C, H, W, OH, OW, k, s, pad, cip):
        N = grid[2]
        X = self._planes(x, xs, N, C, H * W).reshape(N, C, H, W)
        o = F.avg_pool2d(X, k, s, pad, count_include_pad=bool(cip))
        self._planes(y, ys, N, C, OH * OW).copy_(o.reshape(N, C, OH * OW))

    def k_cnn_gap(self, grid, block, x, y, planes, HW, relu):
        X = self.dense(x, [planes, HW])
        self.dense(y, [planes]).copy_((torch.relu(X) if relu else X).mean(1))

    def k_cnn_relu(self, grid, block, x, y, n):
        self.dense(y, [n]).copy_(torch.relu(self.dense(x, [n])))

    def k_cnn_add(self, grid, block, a, b, y, n, relu):
        o = self.dense(a, [n]) + self.dense(b, [n])
        self.dense(y, [n]).copy_(torch.relu(o) if relu else o)


def load_task(stem):
    spec = importlib.util.spec_from_file_location("kbtask_" + re.sub(r"\W", "_", stem), os.path.join(KB, stem + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def simulate(stem, shape):
    mod = load_task(stem)
    torch.manual_seed(0)
    init = mod.get_init_inputs()
    model = mod.Model(*init)
    model.train()
    # BatchNorm affine params away from their default (1, 0), each layer its own, so a plan that reads
    # another layer's gamma or beta fails
    g = torch.Generator().manual_seed(7)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d) and m.affine:
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=g) * 0.4 - 0.2)
    x = torch.rand(*shape)
    with open(os.path.join(L3, stem, "plan.yaml")) as f:
        sim = Sim(f.read(), model, x, init)
    sim.run(sim.plan.get("init") or [], {})
    sim.run(sim.plan["forward"], {})
    got, want = sim.bufs["outputs.0"], sim.want.reshape(-1).float()
    for k, v in sim.frozen.items():
        if not torch.equal(v, sim.bufs[k]):
            return False, "%s was modified" % k
    if torch.isnan(got).any():
        return False, "NaN in the output (%d elements): something read or left unwritten" % int(torch.isnan(got).sum())
    norm = float((got - want).norm() / want.norm())
    bad = int(((got - want).abs() > 1e-2 + 1e-2 * want.abs()).sum())
    ok = norm <= 1e-3 and bad == 0
    return ok, "error norm %.3g, %d elements outside atol=rtol=1e-2, output %s" % (norm, bad, list(sim.want.shape))


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    fails = 0
    for a in argv:
        stem, _, shp = a.partition(":")
        try:
            shape = [int(v) for v in shp.split(",")]
        except ValueError:
            print("plan_sim: argument '%s': expected STEM:N,C,H,W (four integers)" % a, file=sys.stderr)
            return 2
        if len(shape) != 4 or not os.path.isfile(os.path.join(L3, stem, "plan.yaml")) or \
                not os.path.isfile(os.path.join(KB, stem + ".py")):
            print("plan_sim: argument '%s': needs four sizes, bundles/level3/%s/plan.yaml and the task file %s"
                  % (a, stem, os.path.join(KB, stem + ".py")), file=sys.stderr)
            return 2
        try:
            ok, why = simulate(stem, shape)
        except (SimError, AssertionError, RuntimeError, KeyError) as e:
            ok, why = False, "%s: %s" % (type(e).__name__, e)
        fails += not ok
        print("%-4s %-32s %-18s %s" % ("ok" if ok else "FAIL", stem, "x" + "x".join(map(str, shape)), why), flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
