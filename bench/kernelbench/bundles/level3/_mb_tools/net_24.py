import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """EfficientNet-B2 (as the task defines it) in training mode (generated; shapes follow the task's
input through dims). Stem: 3x3/2 conv -> BN + ReLU. Each of the 5 blocks, in the task's order:
1x1 expand conv -> BN+ReLU -> depthwise 3x3 conv (cuDNN, groups = channels, stride s) -> BN+ReLU ->
AdaptiveAvgPool2d(1) -> 1x1 conv (E -> E/4) -> ReLU -> 1x1 conv (E/4 -> E) -> Sigmoid -> 1x1 project
conv -> BN. The squeeze-excitation here is a plain sequence (nothing multiplies the features by the
gate), so from the first block's pool on every map is 1x1 and the rest runs on [N, C, 1, 1].
Every BN is a statistics pass (per channel, double sums) and an apply pass in place with the
activation fused. Head: 1x1 conv to 1408 -> BN+ReLU -> avg pool (plane mean) -> fc (gemm, bias)."""
g = G("24_EfficientNetB2", H)
x = g.x
g.comment("conv1 3x3/2 -> bn1 -> relu")
x = g.conv(x, "conv1.weight", None, 3, 2, 1, 1)
x = g.bn(x, "bn1", 1)
unit = len(g.levels)
g.levels.append(("1", "1", "1", "1", 1, 1))
for i, s in enumerate([1, 2, 2, 2, 1], 1):
    p = "mbconv%d" % i
    g.comment("%s: stride %d" % (p, s))
    x = g.conv(x, p + ".0.weight", None, 1, 1, 0, 1)
    x = g.bn(x, p + ".1", 1)
    x = g.conv(x, p + ".3.weight", None, 3, s, 1, x.C)
    x = g.bn(x, p + ".4", 1)
    g.comment("%s.6: adaptive avg pool to 1x1, then the 1x1 convs on [N, C, 1, 1]" % p)
    pooled = g.alloc("N * %d" % x.C, [x.buf])
    g.mean(x, out=pooled)
    x = Act(pooled, x.C, unit)
    x = g.conv(x, p + ".7.weight", None, 1, 1, 0, 1)
    g.act_inplace(x, 1)
    x = g.conv(x, p + ".9.weight", None, 1, 1, 0, 1)
    g.act_inplace(x, 3)
    x = g.conv(x, p + ".11.weight", None, 1, 1, 0, 1)
    x = g.bn(x, p + ".12", 0)
g.comment("conv_final 1x1 -> bn_final -> relu -> avg pool -> fc")
x = g.conv(x, "conv_final.weight", None, 1, 1, 0, 1)
x = g.bn(x, "bn_final", 1)
pl = g.mean(x)
g.fc(pl, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
