"""Plan generator for the level-3 CNN bundles that use _lib/mb_*.cu (helper B2's). The net_*.py scripts
describe each network layer by layer; G turns that into plan.yaml text: dims for every spatial size
(expressions over the input's shape), ping-pong activation buffers sized by best fit (max of the
expressions they hold), cuDNN conv steps on buffers given a shape, training-mode BatchNorm as a
statistics launch and an apply launch, and repeats over the images for views into concatenations.
Channel counts are read from the task's own parameters (the model is built on the CPU).

usage: python3 net_19.py [PLAN]   (default: ../<task stem>/plan.yaml); KB=<KernelBench checkout>"""
import os, re, sys, types, torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
KB = os.path.join(os.environ.get("KB", os.path.join(REPO, ".kb", "KernelBench")), "level3") + "/"


def load(stem):
    p = KB + stem + ".py"
    m = types.ModuleType("t")
    exec(compile(open(p).read(), p, "exec"), m.__dict__)
    mod = m.Model(*m.get_init_inputs())
    shapes = {k: list(v.shape) for k, v in mod.state_dict().items()}
    x = m.get_inputs()[0]
    return shapes, list(x.shape)


class Act:
    def __init__(self, buf, C, lvl):
        self.buf, self.C, self.lvl = buf, C, lvl


class G:
    def __init__(self, stem, header):
        self.stem = stem
        self.shapes, xs = load(stem)
        self.header = header
        self.N = xs[0]
        self.dims = [("N", "inputs.0.shape[0]"), ("H0", "inputs.0.shape[2]"), ("W0", "inputs.0.shape[3]"),
                     ("HW0", "H0 * W0"), ("S0", "min(64, cdiv(N * HW0, 8192))")]
        self.levels = [("H0", "W0", "HW0", "S0", xs[2], xs[3])]
        self.lvl_key = {}
        self.bufs = []          # [name, [size exprs]]
        self.fixed = []         # (name, dtype, shape text)
        self.lines = []
        self.init_lines = []    # init steps (untimed): params laid out in scratch
        self.indent = "  "
        self.maxC = 1
        self.x = Act("inputs.0", xs[1], 0)
        self.blocks = []        # [first line, end line, params prefix, index]: candidates for folding

    # ---- blocks that repeat
    def block(self, prefix, idx):
        """Marks the steps emitted from here to the next block()/end_block() as block idx of the params
        prefix (its params are params.<prefix><idx>.*). text() folds runs of blocks whose steps are the
        same but for that index (period 1, or 2 where the ping-pong buffers alternate) into one repeat
        whose params names carry the index as an {expression}: the unrolled plan is the same text."""
        self.end_block()
        self.blocks.append([len(self.lines), None, prefix, idx])

    def end_block(self):
        if self.blocks and self.blocks[-1][1] is None:
            self.blocks[-1][1] = len(self.lines)

    def _template(self, b):
        first, end, prefix, idx = b
        out = []
        for ln in self.lines[first:end]:
            for tail in (".", ":"):
                ln = ln.replace(prefix + str(idx) + tail, prefix + "{IDX}" + tail)
            if not ln.lstrip().startswith("#"):   # a name with {..} is quoted (YAML flow syntax)
                ln = re.sub(r'(?<!")(params\.[\w.]*\{IDX\}[\w.]*)', r'"\1"', ln)
            out.append(ln)
        return out

    def _folded(self):
        self.end_block()
        lines, pos, out = self.lines, 0, []
        bl = sorted(self.blocks)
        k = 0
        while k < len(bl):
            best = None
            for P in (1, 2):
                m = 0
                while k + P * (m + 1) <= len(bl):
                    grp = bl[k + P * m:k + P * (m + 1)]
                    ok = all(grp[q][2] == bl[k][2] and grp[q][3] == bl[k][3] + P * m + q for q in range(P))
                    ok = ok and all(grp[q][0] == (grp[q - 1][1] if q else (bl[k + P * m - 1][1] if m else grp[q][0]))
                                    for q in range(P))
                    ok = ok and all(self._template(grp[q]) == self._template(bl[k + q]) for q in range(P))
                    if not ok:
                        break
                    m += 1
                if m >= 2 and (best is None or P * m > best[0] * best[1]):
                    best = (P, m)
            if best is None:
                k += 1
                continue
            P, m = best
            first, prefix, i0 = bl[k][0], bl[k][2], bl[k][3]
            out += lines[pos:first]
            ind = lines[first][:len(lines[first]) - len(lines[first].lstrip())]
            name = prefix + "%d-%d" % (i0, i0 + P * m - 1)
            out.append(ind + "# %s: %d%s identical blocks, one repeat" % (name, m, " pairs of" if P == 2 else ""))
            out += [ind + "- repeat: %d" % m, ind + "  index: b", ind + "  steps:"]
            for q in range(P):
                e = "b + %d" % (i0 + q) if P == 1 else "%d * b + %d" % (P, i0 + q)
                out += ["    " + ln.replace("{IDX}", "{%s}" % e) for ln in self._template(bl[k + q])]
            pos = bl[k + P * m - 1][1]
            k += P * m
        out += lines[pos:]
        return out

    # ---- dims and buffers
    def level(self, lvl, k, s, p, ceil=False):
        if s == 1 and 2 * p == k - 1:
            return lvl
        key = (lvl, k, s, p, ceil)
        if key in self.lvl_key:
            return self.lvl_key[key]
        H, W, _, _, h, w = self.levels[lvl]
        i = len(self.levels)
        if ceil:
            fh = lambda v: -(-(v + 2 * p - k) // s) + 1
            eh = "cdiv(%s + %d - %d, %d) + 1"
        else:
            fh = lambda v: (v + 2 * p - k) // s + 1
            eh = "(%s + %d - %d) / %d + 1"
        self.dims += [("H%d" % i, eh % (H, 2 * p, k, s)), ("W%d" % i, eh % (W, 2 * p, k, s)),
                      ("HW%d" % i, "H%d * W%d" % (i, i)), ("S%d" % i, "min(64, cdiv(N * HW%d, 8192))" % i)]
        self.levels.append(("H%d" % i, "W%d" % i, "HW%d" % i, "S%d" % i, fh(h), fh(w)))
        self.lvl_key[key] = i
        return i

    def L(self, lvl):
        return self.levels[lvl]

    def conc(self, expr):
        """The concrete value of a size expression for the task's shapes (N, H*, W*, HW* known)."""
        env = {"N": self.N}
        for H, W, HW, S, h, w in self.levels:
            env[H], env[W], env[HW] = h, w, h * w
        return eval(expr.replace("/", "//"), {"max": max, "min": min, "cdiv": lambda a, b: -(-a // b)}, env)

    def alloc(self, elems, live):
        """Best fit among the buffers not live: the smallest that already holds elems, else the
        largest (grown), else a new one."""
        live = set(live)
        need = self.conc(elems)
        free = [b for b in self.bufs if "scratch." + b[0] not in live]
        fits = [b for b in free if max(self.conc(e) for e in b[1]) >= need]
        if fits:
            b = min(fits, key=lambda b: max(self.conc(e) for e in b[1]))
        elif free:
            b = max(free, key=lambda b: max(self.conc(e) for e in b[1]))
        else:
            b = ["act%d" % len(self.bufs), []]
            self.bufs.append(b)
        b[1].append(elems)
        return "scratch." + b[0]

    def fixed_buf(self, name, dtype, shape):
        for f in self.fixed:
            if f[0] == name:
                if f[1] == "var":
                    f[2].append(shape)
                return "scratch." + name
        self.fixed.append([name, dtype, [shape] if dtype == "var" else shape])
        return "scratch." + name

    def emit(self, text):
        for ln in text.strip("\n").split("\n"):
            self.lines.append(self.indent + ln)

    def comment(self, text):
        self.emit("# " + text)

    # ---- steps
    def conv(self, a, wname, bname, k, s, p, groups, out=None, out_view=None, live=(), n_img=None, x_view=None, K=None,
             out_strides=None, x_strides=None):
        w = self.shapes[wname]
        K = w[0]
        assert w[1] * groups == a.C and w[2] == k, (wname, w, a.C, groups, k)
        lvl = self.level(a.lvl, k, s, p)
        H, W, HW, _, _, _ = self.L(a.lvl)
        Ho, Wo, HWo, _, _, _ = self.L(lvl)
        n = "N" if n_img is None else str(n_img)
        if "," in n:
            n = '"%s"' % n           # a flow mapping's value with commas is quoted
        if out is None and out_view is None:
            out = self.alloc("N * %d * %s" % (K, HWo), list(live) + [a.buf])
        o = out_view if out_view is not None else out
        xs = x_view if x_view is not None else a.buf
        bias = (", bias: params.%s" % bname) if bname else ""
        extra = ""
        if s != 1: extra += ", stride: %d" % s
        if p != 0: extra += ", padding: %d" % p
        if groups != 1: extra += ", groups: %d" % groups
        ost = (", out_strides: [%s]" % ", ".join(out_strides)) if out_strides else ""
        if x_strides:
            ost = ", x_strides: [%s]" % ", ".join(x_strides) + ost
        self.emit('- conv: {x: "%s", w: params.%s%s, out: "%s"%s,\n         shape: {n: %s, c: %d, h: %s, w: %s, k: %d, r: %d, s: %d}%s}'
                  % (xs, wname, bias, o, extra, n, a.C, H, W, K, k, k, ost))
        self.maxC = max(self.maxC, K)
        return Act(out, K, lvl)

    def bn(self, a, prefix, act, res=None, out=None, groups=1, part="scratch.part"):
        """stats + apply: y = act(bn(a)) (+ res). In place unless out is given (needed for groups > 1)."""
        H, W, HW, S, _, _ = self.L(a.lvl)
        self.fixed_buf(part[8:], "float64", "%d * 64 * 2" % 0)  # sized at the end
        self.maxC = max(self.maxC, a.C)
        self.emit("- launch: mb_bn_stats<256>\n  grid: [%d, %s]\n  block: [256]\n  args: [%s, %s, %d, %s, N * %s, %s]"
                  % (a.C, S, a.buf, part, a.C, HW, HW, S))
        y = out if out is not None else a.buf
        r = res.buf if res is not None else a.buf
        self.emit("- launch: mb_bn_apply<%d, %d>\n  grid: [N * %d, cdiv(%s, 1024)]\n  block: [256]\n"
                  "  args: [%s, %s, %s, params.%s.weight, params.%s.bias, %s, %d, %s, %s, N * %s, 1.0e-5, %d]"
                  % (act, 1 if res is not None else 0, a.C, HW, a.buf, y, part, prefix, prefix, r, a.C, HW, S, HW, groups))
        return Act(y, a.C, a.lvl)

    def stats(self, a, part):
        H, W, HW, S, _, _ = self.L(a.lvl)
        self.fixed_buf(part[8:], "float64", "")
        self.emit("- launch: mb_bn_stats<256>\n  grid: [%d, %s]\n  block: [256]\n  args: [%s, %s, %d, %s, N * %s, %s]"
                  % (a.C, S, a.buf, part, a.C, HW, HW, S))

    def bn_add_bn(self, a, prefix, r, prefix_r, act):
        """y = act(bn(a)) + bn_r(r), written over a."""
        H, W, HW, S, _, _ = self.L(a.lvl)
        self.stats(a, "scratch.part")
        self.stats(r, "scratch.part_s")
        self.emit("- launch: mb_bn_apply_add_bn<%d>\n  grid: [N * %d, cdiv(%s, 1024)]\n  block: [256]\n"
                  "  args: [%s, %s, scratch.part, params.%s.weight, params.%s.bias,\n"
                  "         %s, scratch.part_s, params.%s.weight, params.%s.bias, %d, %s, %s, N * %s, 1.0e-5]"
                  % (act, a.C, HW, a.buf, a.buf, prefix, prefix, r.buf, prefix_r, prefix_r, a.C, HW, S, HW))
        return a

    def act_inplace(self, a, act, elems=None, buf=None):
        if elems is None:
            elems = "N * %d * %s" % (a.C, self.L(a.lvl)[2])
        self.emit('- launch: mb_act_inplace<%d>\n  grid: [min(cdiv(%s, 1024), 132 * 16)]\n  block: [256]\n  args: ["%s", %s]'
                  % (act, elems, buf or a.buf, elems))
        return a

    def maxpool(self, a, k, s, p, act=0, ceil=False, live=(), out=None, n_img=None, x_view=None):
        lvl = self.level(a.lvl, k, s, p, ceil) if not (s == 1 and 2 * p == k - 1) else a.lvl
        H, W, HW, _, _, _ = self.L(a.lvl)
        Ho, Wo, HWo, _, _, _ = self.L(lvl)
        nn = "N * " if n_img is None else "" if n_img == 1 else "%s * " % n_img
        if out is None:
            out = self.alloc("N * %d * %s" % (a.C, HWo), list(live) + [a.buf])
        self.emit('- launch: mb_maxpool2d<%d>\n  grid: [min(cdiv(%s%d * %s, 256), 132 * 32)]\n  block: [256]\n'
                  '  args: ["%s", "%s", %s%d, %s, %s, %s, %s, %d, %d, %d]'
                  % (act, nn, a.C, HWo, x_view or a.buf, out, nn, a.C, H, W, Ho, Wo, k, s, p))
        return Act(out, a.C, lvl)

    def mean(self, a, act=0, out=None):
        HW = self.L(a.lvl)[2]
        if out is None:
            out = self.fixed_buf("pooled", "float32", "N, %d" % a.C)
        self.emit("- launch: mb_mean_hw<%d>\n  grid: [cdiv(N * %d, 8)]\n  block: [256]\n  args: [%s, %s, N * %d, %s]"
                  % (act, a.C, a.buf, out, a.C, HW))
        return Act(out, a.C, None)

    def fc(self, a, name):
        self.emit("- gemm: {a: %s, b: params.%s.weight, trans_b: true, bias: params.%s.bias, out: outputs.0}" % (a.buf, name, name))

    def repeat(self, count, index):
        self.emit("- repeat: %s\n  index: %s\n  steps:" % (count, index))
        self.indent += "    "

    def end_repeat(self):
        self.indent = self.indent[:-4]

    # ---- output
    def text(self):
        out = []
        for ln in self.header.strip("\n").split("\n"):
            out.append("# " + ln if ln else "#")
        out.append("dims:")
        for k, v in self.dims:
            out.append("  %s: %s" % (k, v))
        out.append("scratch:")
        for name, sizes in self.bufs:
            e = sizes[0] if len(sizes) == 1 else "max(%s)" % ", ".join(dict.fromkeys(sizes))
            out.append("  %s: {dtype: float32, shape: [%s]}" % (name, e))
        for name, dtype, shape in self.fixed:
            if dtype == "float64":
                out.append("  %s: {dtype: float64, shape: [%d * 64 * 2]}" % (name, self.maxC))
            elif dtype == "var":
                e = shape[0] if len(shape) == 1 else "max(%s)" % ", ".join(dict.fromkeys(shape))
                out.append("  %s: {dtype: float32, shape: [%s]}" % (name, e))
            else:
                out.append("  %s: {dtype: %s, shape: [%s]}" % (name, dtype, shape))
        if self.init_lines:
            out.append("init:")
            out += self.init_lines
        out.append("forward:")
        out += self._folded()
        return "\n".join(out) + "\n"

    def write(self, path=None):
        path = path or os.path.join(HERE, "..", self.stem, "plan.yaml")
        open(path, "w").write(self.text())


def concat_strides(g, KT, lvl):
    """out_strides of a channel slice of a concatenation [N, KT, H, W] (elements)."""
    H, W, HW = g.L(lvl)[:3]
    return ["%d * %s" % (KT, HW), HW, W, "1"]


def fire(g, x, pre, live=(), relu=True):
    """SqueezeNet fire module on the whole batch: relu(squeeze), then both expand convs write their
    channel slices of cat([e1, e3]) for every image through out_strides, then one ReLU pass."""
    sq = g.conv(x, pre + ".squeeze.weight", pre + ".squeeze.bias", 1, 1, 0, 1, live=live)
    g.act_inplace(sq, 1)
    e1 = g.shapes[pre + ".expand1x1.weight"][0]
    e3 = g.shapes[pre + ".expand3x3.weight"][0]
    HW = g.L(x.lvl)[2]
    KT = e1 + e3
    out = g.alloc("N * %d * %s" % (KT, HW), list(live) + [sq.buf, x.buf])
    ost = concat_strides(g, KT, x.lvl)
    g.conv(sq, pre + ".expand1x1.weight", pre + ".expand1x1.bias", 1, 1, 0, 1, out_view="%s[0]" % out, out_strides=ost)
    g.conv(sq, pre + ".expand3x3.weight", pre + ".expand3x3.bias", 3, 1, 1, 1, out_view="%s[%d * %s]" % (out, e1, HW),
           out_strides=ost)
    y = Act(out, KT, x.lvl)
    if relu:        # else the caller fuses the ReLU into what reads the output next (a max pool)
        g.act_inplace(y, 1)
    return y


def inception(g, x, pre, live=()):
    """GoogLeNet inception module on the whole batch: every branch's last conv writes its channel slice
    of the module's output for every image through out_strides; the 3x3 and 5x5 reductions are one
    conv (their weights concatenated in init) into batch-sized scratch.red, read back by the 3x3 and
    5x5 convs through x_strides; the pooled input is batch-sized scratch too."""
    sh = g.shapes
    k1 = sh[pre + ".branch1x1.weight"][0]
    r3, k3 = sh[pre + ".branch3x3.0.weight"][0], sh[pre + ".branch3x3.1.weight"][0]
    r5, k5 = sh[pre + ".branch5x5.0.weight"][0], sh[pre + ".branch5x5.1.weight"][0]
    kp = sh[pre + ".branch_pool.1.weight"][0]
    KT = k1 + k3 + k5 + kp
    C = x.C
    HW = g.L(x.lvl)[2]
    out = g.alloc("N * %d * %s" % (KT, HW), list(live) + [x.buf])
    pool = g.fixed_buf("pool1", "var", "N * %d * %s" % (C, HW))
    red = g.fixed_buf("red", "var", "N * %d * %s" % (r3 + r5, HW))
    # the two reductions read the same input: one 1x1 conv with their weights side by side (laid out
    # in init) writes both, channels [0, r3) and [r3, r3 + r5) of scratch.red
    tag = pre.replace("inception", "")
    wred, bred = "scratch.wred_" + tag, "scratch.bred_" + tag
    g.fixed.append(["wred_" + tag, "float32", "%d" % ((r3 + r5) * C)])
    g.fixed.append(["bred_" + tag, "float32", "%d" % (r3 + r5)])
    for src, dst, n in ((pre + ".branch3x3.0.weight", wred, r3 * C), (pre + ".branch5x5.0.weight", "%s[%d]" % (wred, r3 * C), r5 * C),
                        (pre + ".branch3x3.0.bias", bred, r3), (pre + ".branch5x5.0.bias", "%s[%d]" % (bred, r3), r5)):
        g.init_lines.append('  - launch: v1_copy\n    grid: [%d]\n    block: [256]\n    args: [params.%s, "%s", %d]'
                            % (-(-n // 256), src, dst, n))
    ost = concat_strides(g, KT, x.lvl)
    rst = concat_strides(g, r3 + r5, x.lvl)
    ov = lambda off: "%s[%d * %s]" % (out, off, HW) if off else "%s[0]" % out
    H, W = g.L(x.lvl)[:2]
    g.maxpool(x, 3, 1, 1, out=pool)
    g.conv(x, pre + ".branch1x1.weight", pre + ".branch1x1.bias", 1, 1, 0, 1, out_view=ov(0), out_strides=ost)
    g.emit('- conv: {x: "%s", w: %s, bias: %s, out: "%s",\n         shape: {n: N, c: %d, h: %s, w: %s, k: %d, r: 1, s: 1}}'
           % (x.buf, wred, bred, red, C, H, W, r3 + r5))
    g.conv(Act(red, r3, x.lvl), pre + ".branch3x3.1.weight", pre + ".branch3x3.1.bias", 3, 1, 1, 1, out_view=ov(k1), out_strides=ost,
           x_strides=rst)
    g.conv(Act(red, r5, x.lvl), pre + ".branch5x5.1.weight", pre + ".branch5x5.1.bias", 5, 1, 2, 1,
           x_view="%s[%d * %s]" % (red, r3, HW), out_view=ov(k1 + k3), out_strides=ost, x_strides=rst)
    g.conv(Act(pool, C, x.lvl), pre + ".branch_pool.1.weight", pre + ".branch_pool.1.bias", 1, 1, 0, 1,
           out_view=ov(k1 + k3 + k5), out_strides=ost)
    return Act(out, KT, x.lvl)


def conv_pool(g, x, wname, bname, k, s, p, pk, ps, pp, act, ceil=False, live=(), name="stem", chunks=1):
    """conv -> (act) -> maxpool on the whole batch (chunks == 1), or in a repeat over chunks of
    B = cdiv(N, chunks) images (the last one min(B, N - c * B)) so that the conv's output, the largest
    tensor, lives in a B-image ping-pong buffer; the pooled images go to their slice of the batch."""
    K = g.shapes[wname][0]
    l1 = g.level(x.lvl, k, s, p)
    l2 = g.level(l1, pk, ps, pp, ceil=ceil)
    out = g.alloc("N * %d * %s" % (K, g.L(l2)[2]), list(live) + [x.buf])
    if chunks == 1:
        stem = g.fixed_buf(name, "var", "N * %d * %s" % (K, g.L(l1)[2]))
        g.conv(x, wname, bname, k, s, p, 1, out_view=stem)
        g.maxpool(Act(stem, K, l1), pk, ps, pp, act=act, ceil=ceil, out=out)
        return Act(out, K, l2)
    B = "cdiv(N, %d)" % chunks                 # images per chunk; the last chunk takes what is left
    nb = "min(%s, N - c * %s)" % (B, B)
    stem = g.alloc("%s * %d * %s" % (B, K, g.L(l1)[2]), list(live) + [x.buf, out])
    g.repeat("cdiv(N, %s)" % B, "c")
    g.conv(x, wname, bname, k, s, p, 1, n_img=nb, x_view="%s[c * %s * %d * %s]" % (x.buf, B, x.C, g.L(x.lvl)[2]), out_view=stem)
    g.maxpool(Act(stem, K, l1), pk, ps, pp, act=act, ceil=ceil, out="%s[c * %s * %d * %s]" % (out, B, K, g.L(l2)[2]), n_img=nb)
    g.end_repeat()
    return Act(out, K, l2)
