import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """EfficientNet-B1 (as the task defines it) in training mode (generated; shapes follow the task's
input through dims). Stem: 3x3/2 conv -> BN + ReLU. Each of the 7 blocks: 1x1 expand conv (present
even for expand ratio 1) -> BN+ReLU6 -> depthwise 3x3 conv (cuDNN, groups = channels, stride s) ->
BN+ReLU6 -> 1x1 project conv -> BN; no residual. Every BN is a statistics pass (per channel and
split, double sums) and an apply pass in place with the activation fused.
Head: 1x1 conv to 1280 -> BN+ReLU -> adaptive avg pool (plane mean) -> fc (gemm with bias)."""
g = G("23_EfficientNetB1", H)
x = g.x
g.comment("conv1 3x3/2 -> bn1 -> relu")
x = g.conv(x, "conv1.weight", None, 3, 2, 1, 1)
x = g.bn(x, "bn1", 1)
for i, s in enumerate([1, 2, 2, 2, 1, 2, 1], 1):
    p = "mbconv%d" % i
    g.comment("%s: stride %d" % (p, s))
    x = g.conv(x, p + ".0.weight", None, 1, 1, 0, 1)
    x = g.bn(x, p + ".1", 2)
    x = g.conv(x, p + ".3.weight", None, 3, s, 1, x.C)
    x = g.bn(x, p + ".4", 2)
    x = g.conv(x, p + ".6.weight", None, 1, 1, 0, 1)
    x = g.bn(x, p + ".7", 0)
g.comment("conv2 1x1 -> bn2 -> relu -> adaptive avg pool -> fc")
x = g.conv(x, "conv2.weight", None, 1, 1, 0, 1)
x = g.bn(x, "bn2", 1)
pl = g.mean(x)
g.fc(pl, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
