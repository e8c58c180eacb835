import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """EfficientNet-B0 in training mode (generated; shapes follow the task's input through dims).
Stem: 3x3/2 conv -> BN + ReLU. MBConv: [1x1 expand conv -> BN+ReLU6] -> depthwise KxK conv (cuDNN,
groups = channels, stride s, padding (K-1)/2) -> BN+ReLU6 -> 1x1 project conv -> BN, and when the
stride is 1 and the channels match, the block's input is added in the same apply pass. Every BN is a
statistics pass (per channel and split, double sums) and an apply pass with the activation fused.
Head: 1x1 conv to 1280 -> BN+ReLU -> adaptive avg pool (plane mean) -> fc (gemm with bias)."""
g = G("22_EfficientNetB0", H)
x = g.x
g.comment("conv1 3x3/2 -> bn1 -> relu")
x = g.conv(x, "conv1.weight", None, 3, 2, 1, 1)
x = g.bn(x, "bn1", 1)
cfg = [(32, 16, 3, 1, 1), (16, 24, 3, 2, 6), (24, 24, 3, 1, 6), (24, 40, 5, 2, 6), (40, 40, 5, 1, 6), (40, 80, 3, 2, 6),
       (80, 80, 3, 1, 6), (80, 112, 5, 1, 6), (112, 112, 5, 1, 6), (112, 192, 5, 2, 6), (192, 192, 5, 1, 6),
       (192, 192, 5, 1, 6), (192, 320, 3, 1, 6)]
for i, (cin, cout, k, s, e) in enumerate(cfg):
    p = "blocks.%d" % i
    g.block("blocks.", i)
    res = s == 1 and cin == cout
    g.comment("%s: MBConv(%d -> %d, k %d, stride %d, expand %d)%s" % (p, cin, cout, k, s, e, ", residual" if res else ""))
    assert x.C == cin
    inp = x
    if e != 1:
        x = g.conv(x, p + ".expand_conv.0.weight", None, 1, 1, 0, 1, live=[inp.buf])
        x = g.bn(x, p + ".expand_conv.1", 2)
    x = g.conv(x, p + ".depthwise_conv.0.weight", None, k, s, (k - 1) // 2, x.C, live=[inp.buf])
    x = g.bn(x, p + ".depthwise_conv.1", 2)
    x = g.conv(x, p + ".project_conv.0.weight", None, 1, 1, 0, 1, live=[inp.buf])
    x = g.bn(x, p + ".project_conv.1", 0, res=inp if res else None)
g.end_block()
g.comment("conv2 1x1 -> bn2 -> relu -> adaptive avg pool -> fc")
x = g.conv(x, "conv2.weight", None, 1, 1, 0, 1)
x = g.bn(x, "bn2", 1)
pl = g.mean(x)
g.fc(pl, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
