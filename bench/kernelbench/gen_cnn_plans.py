#!/usr/bin/env python3
"""Writes plan.yaml of the deep-CNN bundles of bench/kernelbench/bundles/level3 (ResNet, VGG, DenseNet,
AlexNet) from their architectures, so that hundreds of unrolled steps stay consistent.

Repeats: a params name may hold {expression} parts, so a run of identical layers is one `repeat` whose
steps name their layer's params by the index (DenseNet's dense layers: params.<block>.layers.{l}...,
their input channel count an expression of l; ResNet's identical bottlenecks of a stage). What differs
in shape from one part to the next (stems, transitions, a stage's first block) is written out. The
kernels are the shared _lib/cnn_*.cu files (uses.txt).

Spatial sizes are dims computed from the input (inputs.0.shape[2], [3]) with the conv and pool
formulas; channel counts are the architecture's; buffer sizes are N times the largest per-image size
a buffer holds, worked out here from the task's own image size (a plan bound against another size is
refused at bind time by its view checks, never run out of bounds).

usage: gen_cnn_plans.py [STEM...]   (default: every network below); writes the bundles' plan.yaml
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
L3 = os.path.join(HERE, "bundles", "level3")
EPS = "1e-5"


def q(v):
    """A flow-list argument: views are quoted (their brackets), the rest plain."""
    v = str(v)
    return '"%s"' % v if "[" in v or "{" in v else v


class Sp:
    """A spatial size: its dim name and its value for the task's own input."""

    def __init__(self, name, val):
        self.name, self.val = name, val


class Plan:
    def __init__(self, header):
        self.header = header.strip("\n")
        self.dims = []
        self.bufs = {}
        self.order = []
        self.steps = []
        self.nsp = 0
        self.cmax = 1
        self.parts = set()
        self.hwval = {}
        self.ind = ""           # the indentation of a repeat's steps

    def add(self, text):
        self.steps.append("\n".join(self.ind + ln for ln in text.split("\n")))

    def repeat(self, count, index):
        self.add("  - repeat: %s\n    index: %s\n    steps:" % (count, index))
        self.ind += "    "

    def end_repeat(self):
        self.ind = self.ind[:-4]

    def plane(self, hw):
        """grid x and block of a plane kernel (float4 per thread) over hw pixels: 256 threads, or 64 when
        the plane is small (7x7 to 28x28), so that fewer threads idle."""
        blk = 256 if self.hwval.get(hw, 1 << 20) >= 1024 else 64
        return "cdiv(%s, %d)" % (hw, 4 * blk), blk

    def pool(self, hw):
        """grid x and block of a pooling kernel (one output per thread) over hw output pixels."""
        blk = 256 if self.hwval.get(hw, 1 << 20) >= 256 else 64
        return "cdiv(%s, %d)" % (hw, blk), blk

    def dim(self, name, expr):
        self.dims.append((name, expr))
        return name

    def out_size(self, s, k, stride, pad):
        """(s + 2 pad - k) / stride + 1 as a new dim (reusing s when it is the identity)."""
        if k == 1 + 2 * pad and stride == 1:
            return s
        self.nsp += 1
        name = "S%d" % self.nsp
        expr = "(%s + %d - %d) / %d + 1" % (s.name, 2 * pad, k, stride) if pad else "(%s - %d) / %d + 1" % (s.name, k, stride)
        self.dims.append((name, expr))
        return Sp(name, (s.val + 2 * pad - k) // stride + 1)

    def need(self, buf, per_image):
        """Buffer buf must hold N * per_image floats."""
        if buf not in self.bufs:
            self.order.append(buf)
            self.bufs[buf] = 0
        self.bufs[buf] = max(self.bufs[buf], per_image)

    def comment(self, text):
        self.add("  # " + text)

    def launch(self, kernel, grid, block, args):
        self.add("  - launch: %s\n    grid: [%s]\n    block: [%s]\n    args: [%s]" %
                          (kernel, ", ".join(map(str, grid)), ", ".join(map(str, block)), ", ".join(q(a) for a in args)))

    def conv(self, x, w, out, n, c, h, wd, k, r, s, stride=1, pad=0, bias=None, out_strides=None):
        f = ['x: %s' % q(x), 'w: %s' % q(w)]
        if bias:
            f.append('bias: %s' % bias)
        f.append('out: %s' % q(out))
        if stride != 1:
            f.append('stride: %d' % stride)
        if pad:
            f.append('padding: %d' % pad)
        f.append('shape: {n: %s, c: %s, h: %s, w: %s, k: %d, r: %d, s: %d}' % (n, c, h, wd, k, r, s))
        if out_strides:
            f.append('out_strides: [%s]' % ", ".join(map(str, out_strides)))
        self.add("  - conv: {%s}" % ", ".join(f))

    def gemm(self, a, b, out, m, n, k, bias=None, relu=False):
        f = ["a: %s" % q(a), "b: %s" % b, "trans_b: true", "m: %s" % m, "n: %s" % n, "k: %s" % k]
        if bias:
            f.append("bias: %s" % bias)
        if relu:
            f.append("activation: relu")
        f.append("out: %s" % q(out))
        self.add("  - gemm: {%s}" % ", ".join(f))

    # ---- composite steps -------------------------------------------------------------------------
    def bn_stats(self, x, x_nstride, C, hw, mv, copy_to=None, copy_nstride=None):
        """Batch mean and biased variance of C channels of x (image stride x_nstride) into mv[2C];
        with copy_to, the channels are copied there too (image stride copy_nstride)."""
        self.cmax = max(self.cmax, C)
        P = "P_" + hw
        if P not in [d[0] for d in self.dims]:
            self.dim(P, "max(1, min(256, cdiv(N * %s, 8192)))" % hw)
        self.parts.add("%d * %s" % (C, P))
        if copy_to is None:
            self.launch("cnn_bn_partial", [P, C], [256], [x, x_nstride, "scratch.part", C, "N", hw, P])
        else:
            self.launch("cnn_bn_partial_copy", [P, C], [256],
                        [x, x_nstride, copy_to, copy_nstride, "scratch.part", C, "N", hw, P])
        self.launch("cnn_bn_finalize", [C], [32], ["scratch.part", mv, C, P])

    def launch_partial_copy_only(self, x, x_nstride, dst, d_nstride, C, hw):
        P = "P_" + hw
        if P not in [d[0] for d in self.dims]:
            self.dim(P, "max(1, min(256, cdiv(N * %s, 8192)))" % hw)
        self.parts.add("%d * %s" % (C, P))
        self.launch("cnn_bn_partial_copy", [P, C], [256], [x, x_nstride, dst, d_nstride, "scratch.part", C, "N", hw, P])

    def bn_apply(self, x, x_nstride, y, y_nstride, C, hw, mv, bn, relu):
        gx, blk = self.plane(hw)
        self.launch("cnn_bn_apply", [gx, C, "N"], [blk],
                    [x, x_nstride, y, y_nstride, mv, "params.%s.weight" % bn, "params.%s.bias" % bn, EPS, C, hw,
                     1 if relu else 0])

    def text(self):
        out = [self.header, "dims:"]
        out += ["  %s: %s" % d for d in self.dims]
        out.append("scratch:")
        for b in self.order:
            out.append("  %s: {dtype: float32, shape: [N * %d]}" % (b, self.bufs[b]))
        parts = sorted(self.parts)
        if parts:
            out.append("  part: {dtype: float64, shape: [4 * %s]}" % (parts[0] if len(parts) == 1 else "max(%s)" % ", ".join(parts)))
        out.append("forward:")
        out += self.steps
        return "\n".join(out) + "\n"


def hw(p, h, w):
    """A dim for h * w (one per distinct pair)."""
    name = "HW_%s_%s" % (h.name, w.name)
    p.hwval[name] = h.val * w.val
    if name not in [d[0] for d in p.dims]:
        p.dim(name, "%s * %s" % (h.name, w.name))
    return name


def start(header, in_c, size):
    p = Plan(header)
    p.dim("N", "inputs.0.shape[0]")
    H = Sp(p.dim("H", "inputs.0.shape[2]"), size)
    W = Sp(p.dim("W", "inputs.0.shape[3]"), size)
    return p, H, W


# ---- ResNet -----------------------------------------------------------------------------------------
def resnet(stem, blocks, bottleneck, num_classes_fc_in):
    p, H, W = start("""
# ResNet (%s) in training mode.
# cuDNN conv steps (fp32, no bias), and for every BatchNorm the batch's statistics: cnn_bn_partial
# (per block, a share of the channel's N*H*W values summed in double around a shift) + cnn_bn_finalize
# (mean and biased variance in double); BN+ReLU in place on the conv output; the block's last BN, the
# shortcut (identity, or its own 1x1 conv + BN) and the ReLU in one pass (cnn_bn_add_relu /
# cnn_bn_bn_add_relu) in place.
# Stem: conv7x7/2 -> BN+ReLU -> maxpool 3/2/1; head: global average pool, then the fc as a gemm.
# Activations ping-pong between scratch.m0 and m1; a, b (and d) hold a block's inner and shortcut tensors.
# A stage's blocks after its first are alike: where there are 4 or more, pairs of them are one repeat
# over j (blocks 1 + 2j and 2 + 2j, params named by the index: params.layer3.{1 + 2 * j}.conv1.weight;
# a pair brings the activations back to the same buffer). Generated by bench/kernelbench/gen_cnn_plans.py.
""" % stem, 3, 224)
    mv, mvd = "scratch.mv", "scratch.mvd"
    # stem
    H1, W1 = p.out_size(H, 7, 2, 3), p.out_size(W, 7, 2, 3)
    hw1 = hw(p, H1, W1)
    p.need("m1", 64 * H1.val * W1.val)
    p.comment("stem: conv 7x7/2, BN + ReLU, maxpool 3/2/1")
    p.conv("inputs.0", "params.conv1.weight", "scratch.m1[0]", "N", 3, "H", "W", 64, 7, 7, 2, 3)
    p.bn_stats("scratch.m1", "64 * %s" % hw1, 64, hw1, mv)
    p.bn_apply("scratch.m1", "64 * %s" % hw1, "scratch.m1", "64 * %s" % hw1, 64, hw1, mv, "bn1", True)
    H2, W2 = p.out_size(H1, 3, 2, 1), p.out_size(W1, 3, 2, 1)
    hw2 = hw(p, H2, W2)
    p.need("m0", 64 * H2.val * W2.val)
    p.launch("cnn_maxpool2d", [p.pool(hw2)[0], 64, "N"], [p.pool(hw2)[1]],
             ["scratch.m1", "64 * %s" % hw1, "scratch.m0", "64 * %s" % hw2, 64, H1.name, W1.name, H2.name, W2.name, 3, 2, 1, 0])
    cur, other = "m0", "m1"
    h, w, cin = H2, W2, 64
    exp = 4 if bottleneck else 1
    def block(li, bi, idx, cur, other, h, w, cin, width, stride0):
        """One residual block; bi: its index in the stage (0: the stage's first), idx: its name part
        (the number, or an {expression} of a repeat's index)."""
        stride = stride0 if bi == 0 else 1
        pre = "layer%d.%s" % (li, idx)
        cout = width * exp
        ds = bi == 0 and (stride != 1 or cin != cout)
        h2, w2 = p.out_size(h, 3, stride, 1), p.out_size(w, 3, stride, 1)
        hwi, hwo = hw(p, h, w), hw(p, h2, w2)
        X = "scratch.%s" % cur
        p.comment("%s: %d -> %d channels, stride %d%s" % (pre, cin, cout, stride, ", downsample" if ds else ""))
        if bottleneck:
            # conv1 1x1 -> a (bn1 relu), conv2 3x3/s -> b (bn2 relu), conv3 1x1 -> other (bn3)
            p.need("a", width * h.val * w.val)
            p.conv(X + "[0]", "params.%s.conv1.weight" % pre, "scratch.a[0]", "N", cin, h.name, w.name, width, 1, 1)
            p.bn_stats("scratch.a", "%d * %s" % (width, hwi), width, hwi, mv)
            p.bn_apply("scratch.a", "%d * %s" % (width, hwi), "scratch.a", "%d * %s" % (width, hwi), width, hwi, mv,
                       pre + ".bn1", True)
            p.need("b", width * h2.val * w2.val)
            p.conv("scratch.a[0]", "params.%s.conv2.weight" % pre, "scratch.b[0]", "N", width, h.name, w.name, width,
                   3, 3, stride, 1)
            p.bn_stats("scratch.b", "%d * %s" % (width, hwo), width, hwo, mv)
            p.bn_apply("scratch.b", "%d * %s" % (width, hwo), "scratch.b", "%d * %s" % (width, hwo), width, hwo, mv,
                       pre + ".bn2", True)
            p.need(other, cout * h2.val * w2.val)
            p.conv("scratch.b[0]", "params.%s.conv3.weight" % pre, "scratch.%s[0]" % other, "N", width, h2.name,
                   w2.name, cout, 1, 1)
            last_bn = pre + ".bn3"
        else:
            p.need("a", width * h2.val * w2.val)
            p.conv(X + "[0]", "params.%s.conv1.weight" % pre, "scratch.a[0]", "N", cin, h.name, w.name, width, 3, 3,
                   stride, 1)
            p.bn_stats("scratch.a", "%d * %s" % (width, hwo), width, hwo, mv)
            p.bn_apply("scratch.a", "%d * %s" % (width, hwo), "scratch.a", "%d * %s" % (width, hwo), width, hwo, mv,
                       pre + ".bn1", True)
            p.need(other, cout * h2.val * w2.val)
            p.conv("scratch.a[0]", "params.%s.conv2.weight" % pre, "scratch.%s[0]" % other, "N", width, h2.name,
                   w2.name, cout, 3, 3, 1, 1)
            last_bn = pre + ".bn2"
        Y = "scratch.%s" % other
        ns = "%d * %s" % (cout, hwo)
        p.bn_stats(Y, ns, cout, hwo, mv)
        if ds:
            # the shortcut's conv output: in the bottleneck, scratch.a is free again once conv2 has
            # read it (and it is as large as the shortcut for a stride-2 block); else its own buffer
            D = "a" if bottleneck else "d"
            p.need(D, cout * h2.val * w2.val)
            p.conv(X + "[0]", "params.%s.downsample.0.weight" % pre, "scratch.%s[0]" % D, "N", cin, h.name, w.name,
                   cout, 1, 1, stride, 0)
            p.bn_stats("scratch." + D, ns, cout, hwo, mvd)
            p.launch("cnn_bn_bn_add_relu", [p.plane(hwo)[0], cout, "N"], [p.plane(hwo)[1]],
                     [Y, ns, "scratch." + D, ns, Y, ns, mv, "params.%s.weight" % last_bn, "params.%s.bias" % last_bn,
                      mvd, "params.%s.downsample.1.weight" % pre, "params.%s.downsample.1.bias" % pre, EPS, cout, hwo])
        else:
            p.launch("cnn_bn_add_relu", [p.plane(hwo)[0], cout, "N"], [p.plane(hwo)[1]],
                     [Y, ns, X, ns, Y, ns, mv, "params.%s.weight" % last_bn, "params.%s.bias" % last_bn, EPS, cout,
                      hwo])
        return h2, w2, cout

    for li, (width, nblocks, stride0) in enumerate(blocks, 1):
        h, w, cin = block(li, 0, 0, cur, other, h, w, cin, width, stride0)
        cur, other = other, cur
        # blocks 1.. of a stage are alike (stride 1, identity shortcut): pairs of them are one repeat
        # over j (a pair brings the activations back to the same ping-pong buffer), params by index
        pairs = (nblocks - 1) // 2
        if pairs >= 2:
            p.comment("layer%d.1-%d: %d pairs of identical blocks, one repeat" % (li, 2 * pairs, pairs))
            p.repeat(pairs, "j")
            h, w, cin = block(li, 1, "{1 + 2 * j}", cur, other, h, w, cin, width, stride0)
            h, w, cin = block(li, 2, "{2 + 2 * j}", other, cur, h, w, cin, width, stride0)
            p.end_repeat()
            done = 1 + 2 * pairs
        else:
            done = 1
        for bi in range(done, nblocks):
            h, w, cin = block(li, bi, bi, cur, other, h, w, cin, width, stride0)
            cur, other = other, cur
    hwf = hw(p, h, w)
    p.need("g", cin)
    p.comment("head: adaptive average pool to 1x1, flatten, fc")
    p.launch("cnn_gap", ["cdiv(N * %d, 8)" % cin], [256], ["scratch.%s" % cur, "scratch.g", "N * %d" % cin, hwf, 0])
    p.dim("NCLS", "params.fc.weight.shape[0]")
    p.gemm("scratch.g[0]", "params.fc.weight", "outputs.0", "N", "NCLS", cin, bias="params.fc.bias")
    txt = p.text().replace("scratch:\n", "scratch:\n  mv: {dtype: float64, shape: [%d, 2]}\n  mvd: {dtype: float64, shape: [%d, 2]}\n" % (p.cmax, p.cmax), 1)
    return txt


# ---- DenseNet -------------------------------------------------------------------------------------
def dense_layer(p, cat, CT, cin, G, h, w, hwn, lp, stats):
    """One dense layer (cin: its input channel count, a number or an expression of the repeat's index):
    BN+ReLU of channels [0, cin) of cat into scratch.z, then the 3x3 conv (pad 1, no bias) writes its G
    new channels straight into channels [cin, cin + G) of cat for every image (out_strides: cat's), and
    with stats, their batch statistics into scratch.mv at channel cin (they serve every later BN of
    those channels: the batch statistics of a channel do not depend on which layer normalizes it)."""
    ns = "%d * %s" % (CT, hwn)
    c = "(%s)" % cin if not isinstance(cin, int) else cin
    p.bn_apply(cat, ns, "scratch.z", "%s * %s" % (c, hwn), cin, hwn, "scratch.mv", lp + ".0", True)
    p.conv("scratch.z[0]", "params.%s.2.weight" % lp, "%s[%s * %s]" % (cat, c, hwn), "N", cin, h.name, w.name, G, 3, 3,
           1, 1, out_strides=[ns, hwn, w.name, 1])
    if stats:
        p.bn_stats("%s[%s * %s]" % (cat, c, hwn), ns, G, hwn, "scratch.mv[2 * %s]" % c)


def dense_block(p, cat, CT, C0, L, G, h, w, pre, stats_last=True):
    """Layers l = 0..L-1 of a dense block whose concatenation is `cat` (a buffer [N, CT, h, w], its first
    C0 channels and their statistics in scratch.mv already there), as one repeat over l with the layer's
    params named by its index (params.<pre>.{l}...); without stats_last the last layer is written after
    the repeat, without the statistics no later BN reads."""
    hwn = hw(p, h, w)
    p.need("z", (C0 + (L - 1) * G) * h.val * w.val)
    Lr = L if stats_last else L - 1
    p.comment("%s.0-%d: BN+ReLU of %d + 32 l channels, conv3x3 -> %d new channels at channel %d + 32 l"
              % (pre, Lr - 1, C0, G, C0) if G == 32 else "%s.0-%d" % (pre, Lr - 1))
    p.repeat(Lr, "l")
    dense_layer(p, cat, CT, "%d + l * %d" % (C0, G), G, h, w, hwn, pre + ".{l}", True)
    p.end_repeat()
    if not stats_last:
        lp = "%s.%d" % (pre, L - 1)
        p.comment("%s: the last layer (its statistics serve no later BN)" % lp)
        dense_layer(p, cat, CT, C0 + (L - 1) * G, G, h, w, hwn, lp, False)
    p.cmax = max(p.cmax, CT)


DENSE_HEADER = """
# %s in training mode.
# Each dense block keeps its concatenation in one buffer [N, C_total, H, W], and the batch statistics of
# each channel (partial sums in double, then mean and biased variance) in scratch.mv at that channel
# once it is written. Those statistics serve every later BatchNorm of the
# channel (batch statistics do not depend on which layer normalizes), so each layer's BN is only an
# apply pass (cnn_bn_apply with ReLU) of its input channels into scratch.z, which the conv reads.
# Dropout(0.0) is the identity. Each layer's 3x3 conv (cuDNN, fp32, no bias) writes its new channels
# straight into their slice of the concatenation for every image (out_strides [C_total * H * W, H * W,
# W, 1]: no copy), then cnn_bn_partial + cnn_bn_finalize put their statistics into scratch.mv. A block's
# layers are one repeat over l, each layer's params named by its index (params.<block>.layers.{l}...).
"""


def densenet(name, block_layers, G=32):
    p, H, W = start(DENSE_HEADER % name + """# Transition: BN+ReLU+avgpool2x2 in one pass (cnn_bn_relu_avgpool2; the pool commutes with the
# bias-free 1x1 conv), then the conv on a quarter of the pixels. Head: final BN+ReLU+global average pool
# in one pass (cnn_bn_relu_gap), then the classifier as a gemm. The transition's conv writes the first
# channels of the next concatenation directly (out_strides). Concatenations ping-pong between
# scratch.c0 and c1. Generated by bench/kernelbench/gen_cnn_plans.py.
""", 3, 224)
    H1, W1 = p.out_size(H, 7, 2, 3), p.out_size(W, 7, 2, 3)
    hw1 = hw(p, H1, W1)
    p.comment("stem: conv 7x7/2, BN + ReLU, maxpool 3/2/1 into the first concatenation")
    p.need("z", 64 * H1.val * W1.val)
    p.conv("inputs.0", "params.features.0.weight", "scratch.z[0]", "N", 3, "H", "W", 64, 7, 7, 2, 3)
    p.bn_stats("scratch.z", "64 * %s" % hw1, 64, hw1, "scratch.mv")
    p.bn_apply("scratch.z", "64 * %s" % hw1, "scratch.z", "64 * %s" % hw1, 64, hw1, "scratch.mv", "features.1", True)
    h, w = p.out_size(H1, 3, 2, 1), p.out_size(W1, 3, 2, 1)
    c = 64
    bufs = ["c0", "c1"]
    CT = c + block_layers[0] * G
    hwn = hw(p, h, w)
    p.need("c0", CT * h.val * w.val)
    p.launch("cnn_maxpool2d", [p.pool(hwn)[0], 64, "N"], [p.pool(hwn)[1]],
             ["scratch.z", "64 * %s" % hw1, "scratch.c0", "%d * %s" % (CT, hwn), 64, H1.name, W1.name, h.name, w.name, 3, 2, 1, 0])
    p.bn_stats("scratch.c0", "%d * %s" % (CT, hwn), 64, hwn, "scratch.mv")
    for b, L in enumerate(block_layers):
        cat = "scratch." + bufs[b % 2]
        CT = c + L * G
        p.need(bufs[b % 2], CT * h.val * w.val)
        dense_block(p, cat, CT, c, L, G, h, w, "dense_blocks.%d.layers" % b)
        c = CT
        hwn = hw(p, h, w)
        if b == len(block_layers) - 1:
            break
        t = "transition_layers.%d.transition" % b
        h2, w2 = p.out_size(h, 2, 2, 0), p.out_size(w, 2, 2, 0)
        hw2 = hw(p, h2, w2)
        cout = c // 2
        CTn = cout + block_layers[b + 1] * G
        nxt = "scratch." + bufs[(b + 1) % 2]
        p.comment("%s: BN+ReLU+avgpool2x2 of %d channels, conv1x1 -> %d channels into the next concatenation" % (t, c, cout))
        p.need("z", c * h2.val * w2.val)
        p.launch("cnn_bn_relu_avgpool2", [p.pool(hw2)[0], c, "N"], [p.pool(hw2)[1]],
                 [cat, "%d * %s" % (c, hwn), "scratch.z", "scratch.mv", "params.%s.0.weight" % t, "params.%s.0.bias" % t,
                  EPS, c, h.name, w.name])
        p.need(bufs[(b + 1) % 2], CTn * h2.val * w2.val)
        p.conv("scratch.z[0]", "params.%s.2.weight" % t, nxt + "[0]", "N", c, h2.name, w2.name, cout, 1, 1,
               out_strides=["%d * %s" % (CTn, hw2), hw2, w2.name, 1])
        p.bn_stats(nxt, "%d * %s" % (CTn, hw2), cout, hw2, "scratch.mv")
        c, h, w = cout, h2, w2
    last = "scratch." + bufs[(len(block_layers) - 1) % 2]
    p.need("g", c)
    p.comment("head: final BN + ReLU + global average pool in one pass, then the classifier")
    p.launch("cnn_bn_relu_gap", ["cdiv(N * %d, 8)" % c], [256],
             [last, "scratch.g", "scratch.mv", "params.final_bn.weight", "params.final_bn.bias", EPS, "N", c, hwn])
    p.dim("NCLS", "params.classifier.weight.shape[0]")
    p.gemm("scratch.g[0]", "params.classifier.weight", "outputs.0", "N", "NCLS", c, bias="params.classifier.bias")
    return p.text().replace("scratch:\n", "scratch:\n  mv: {dtype: float64, shape: [%d, 2]}\n" % p.cmax, 1)


def densenet_block_task():
    """14_DenseNet121DenseBlock: one dense block; the output is the concatenation itself."""
    p, H, W = start(DENSE_HEADER % "DenseNet121 dense block (6 layers, 32 -> 224 channels)" + """# Here the concatenation is the output: the input is copied into its first 32 channels by the same
# fused copy+statistics kernel. Generated by bench/kernelbench/gen_cnn_plans.py.
""", 32, 224)
    C0, L, G = 32, 6, 32
    CT = C0 + L * G
    hwn = hw(p, H, W)
    p.comment("the input into channels 0..%d of the output, with its statistics" % (C0 - 1))
    p.bn_stats("inputs.0", "%d * %s" % (C0, hwn), C0, hwn, "scratch.mv", copy_to="outputs.0", copy_nstride="%d * %s" % (CT, hwn))
    dense_block(p, "outputs.0", CT, C0, L, G, H, W, "layers", stats_last=False)
    return p.text().replace("scratch:\n", "scratch:\n  mv: {dtype: float64, shape: [%d, 2]}\n" % p.cmax, 1)


# ---- plain sequential CNNs (conv + bias, ReLU, max pool, linear) --------------------------------
def sequential(header, in_c, size, ops):
    """ops: ('conv', param, cin, cout, k, stride, pad), ('relu',), ('pool', k, stride, pad), ('fc', param,
    in, out). A ReLU right before a max pool is fused into the pool (relu(max) == max(relu)); any other
    ReLU after a conv is one in-place pass; a ReLU after a linear layer is the gemm's epilogue. The
    activations alternate between scratch.a and b (convs and pools), then c and d (linear layers); the
    last linear layer writes the output."""
    p, H, W = start(header, in_c, size)
    cur, nxt = "inputs.0", "a"
    c, h, w = in_c, H, W
    fc_bufs = ["c", "d"]
    nfc = sum(1 for o in ops if o[0] == "fc")
    fci = 0
    i = 0
    while i < len(ops):
        o = ops[i]
        nexto = ops[i + 1] if i + 1 < len(ops) else None
        if o[0] == "conv":
            _, prm, cin, cout, k, st, pad = o
            assert cin == c
            h2, w2 = p.out_size(h, k, st, pad), p.out_size(w, k, st, pad)
            p.need(nxt, cout * h2.val * w2.val)
            p.conv(cur if cur == "inputs.0" else "scratch.%s[0]" % cur, "params.%s.weight" % prm, "scratch.%s[0]" % nxt,
                   "N", cin, h.name, w.name, cout, k, k, st, pad, bias="params.%s.bias" % prm)
            cur, nxt = nxt, ("b" if nxt == "a" else "a")
            c, h, w = cout, h2, w2
            i += 1
        elif o[0] == "relu":
            if nexto is not None and nexto[0] == "pool":
                i += 1
                continue  # fused into the pool
            n = "N * %d * %s" % (c, hw(p, h, w))
            p.launch("cnn_relu", ["max(1, min(cdiv(%s, 1024), 132 * 16))" % n], [256],
                     ["scratch." + cur, "scratch." + cur, n])
            i += 1
        elif o[0] == "pool":
            _, k, st, pad = o
            relu = 1 if i > 0 and ops[i - 1][0] == "relu" else 0
            h2, w2 = p.out_size(h, k, st, pad), p.out_size(w, k, st, pad)
            hw1, hw2 = hw(p, h, w), hw(p, h2, w2)
            p.need(nxt, c * h2.val * w2.val)
            p.launch("cnn_maxpool2d", [p.pool(hw2)[0], c, "N"], [p.pool(hw2)[1]],
                     ["scratch." + cur, "%d * %s" % (c, hw1), "scratch." + nxt, "%d * %s" % (c, hw2), c, h.name, w.name,
                      h2.name, w2.name, k, st, pad, relu])
            cur, nxt = nxt, ("b" if nxt == "a" else "a")
            h, w = h2, w2
            i += 1
        elif o[0] == "fc":
            _, prm, fin, fout = o
            assert fin == c * h.val * w.val, (fin, c, h.val, w.val)
            relu = nexto is not None and nexto[0] == "relu"
            fci += 1
            if fci == nfc:
                out = "outputs.0"
            else:
                out = "scratch.%s[0]" % fc_bufs[fci % 2]
                p.need(fc_bufs[fci % 2], fout)
            p.gemm("scratch.%s[0]" % cur, "params.%s.weight" % prm, out, "N", fout, fin, bias="params.%s.bias" % prm, relu=relu)
            cur = fc_bufs[fci % 2]
            c, h, w = fout, Sp("1", 1), Sp("1", 1)
            i += 2 if relu else 1
        else:
            raise ValueError(o)
    return p.text()


def vgg(name, cfg):
    ops, idx, c = [], 0, 3
    for v in cfg:
        if v == "M":
            ops.append(("pool", 2, 2, 0))
            idx += 1
        else:
            ops += [("conv", "features.%d" % idx, c, v, 3, 1, 1), ("relu",)]
            idx += 2
            c = v
    ops += [("fc", "classifier.0", 512 * 7 * 7, 4096), ("relu",), ("fc", "classifier.3", 4096, 4096), ("relu",),
            ("fc", "classifier.6", 4096, 1000)]
    return sequential("""
# %s: conv (cuDNN, fp32, with its bias) + ReLU in place, the ReLU before each max pool fused into the pool
# (cnn_maxpool2d with relu: relu(max(x)) == max(relu(x))), then the classifier as three gemm steps with
# bias (+ ReLU) epilogues; Dropout(p=0.0) is the identity. Activations alternate between scratch.a
# and b. Generated by bench/kernelbench/gen_cnn_plans.py.
""" % name, 3, 224, ops)


def alexnet():
    ops = [("conv", "conv1", 3, 96, 11, 4, 2), ("relu",), ("pool", 3, 2, 0),
           ("conv", "conv2", 96, 256, 5, 1, 2), ("relu",), ("pool", 3, 2, 0),
           ("conv", "conv3", 256, 384, 3, 1, 1), ("relu",),
           ("conv", "conv4", 384, 384, 3, 1, 1), ("relu",),
           ("conv", "conv5", 384, 256, 3, 1, 1), ("relu",), ("pool", 3, 2, 0),
           ("fc", "fc1", 256 * 6 * 6, 4096), ("relu",), ("fc", "fc2", 4096, 4096), ("relu",), ("fc", "fc3", 4096, 1000)]
    return sequential("""
# AlexNet on a batch of 1024: five convs (cuDNN, fp32, with bias), ReLU in place after conv3 and conv4,
# the ReLUs before the three max pools (3/2) fused into the pools (relu(max) == max(relu)), flatten
# (a no-op on NCHW), three gemm steps with bias (+ ReLU) epilogues; Dropout(p=0.0) is the identity.
# Activations alternate between scratch.a and b (the largest, conv1's, is 1.19 GB). 64-bit element
# counts in the ReLU pass. Generated by bench/kernelbench/gen_cnn_plans.py.
""", 3, 224, ops)


def lenet():
    ops = [("conv", "conv1", 1, 6, 5, 1, 0), ("relu",), ("pool", 2, 2, 0),
           ("conv", "conv2", 6, 16, 5, 1, 0), ("relu",), ("pool", 2, 2, 0),
           ("fc", "fc1", 16 * 5 * 5, 120), ("relu",), ("fc", "fc2", 120, 84), ("relu",), ("fc", "fc3", 84, 20)]
    return sequential("""
# LeNet-5 on a batch of 4096: conv (cuDNN, with bias) -> max pool 2/2 with the ReLU fused (relu(max) ==
# max(relu)), twice; flatten (a no-op on NCHW); three gemm steps with bias (+ ReLU) epilogues.
# Generated by bench/kernelbench/gen_cnn_plans.py.
""", 1, 32, ops)


VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
VGG19 = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


def main(argv):
    gens = {
        "9_ResNet18": lambda: resnet("ResNet18", [(64, 2, 1), (128, 2, 2), (256, 2, 2), (512, 2, 2)], False, 512),
        "10_ResNet101": lambda: resnet("ResNet101", [(64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2)], True, 2048),
        "5_AlexNet": alexnet,
        "11_VGG16": lambda: vgg("VGG16", VGG16),
        "12_VGG19": lambda: vgg("VGG19", VGG19),
        "14_DenseNet121DenseBlock": densenet_block_task,
        "15_DenseNet121": lambda: densenet("DenseNet121", [6, 12, 24, 16]),
        "16_DenseNet201": lambda: densenet("DenseNet201", [6, 12, 48, 32]),
    }
    stems = argv or sorted(gens)
    for s in stems:
        if s not in gens:
            sys.exit("gen_cnn_plans: no generator for %s (have: %s)" % (s, ", ".join(sorted(gens))))
        d = os.path.join(L3, s)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "plan.yaml"), "w") as f:
            f.write(gens[s]())
        with open(os.path.join(d, "uses.txt"), "w") as f:
            f.write("cnn_bn.cu\ncnn_pool.cu\ncnn_eltwise.cu\n")
        print("wrote", os.path.join(d, "plan.yaml"))


if __name__ == "__main__":
    main(sys.argv[1:])
