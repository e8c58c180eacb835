import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """MobileNetV2 in training mode (generated; shapes follow the task's input through dims).
The task's _inverted_residual_block returns (layers, use_res) and the model keeps only [0]: no block
adds its input, so none does here. Each block: [1x1 expand conv -> BN+ReLU6] -> depthwise 3x3 conv
(cuDNN, groups = channels) -> BN+ReLU6 -> 1x1 project conv -> BN. BN = a statistics pass (per
channel and split, double sums) + an apply pass in place with the activation fused.
Last: 1x1 conv to 1280 -> BN+ReLU6 -> adaptive avg pool (plane mean) -> Dropout(0) = identity -> fc
(gemm with bias)."""
g = G("20_MobileNetV2", H)
sh = g.shapes
x = g.x
g.comment("features.0-2: conv 3x3/2, BN, ReLU6")
x = g.conv(x, "features.0.weight", None, 3, 2, 1, 1)
x = g.bn(x, "features.1", 2)
# (t, c, n, s) as in the task
setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]
i = 3
for t, c, n, s in setting:
    for j in range(n):
        st = s if j == 0 else 1
        p = "features.%d" % i
        g.block("features.", i)
        g.comment("%s: inverted residual block (expand %d, stride %d), no residual" % (p, t, st))
        if t != 1:
            x = g.conv(x, p + ".0.weight", None, 1, 1, 0, 1)
            x = g.bn(x, p + ".1", 2)
            d = 3
        else:
            d = 0
        x = g.conv(x, p + ".%d.weight" % d, None, 3, st, 1, x.C)
        x = g.bn(x, p + ".%d" % (d + 1), 2)
        x = g.conv(x, p + ".%d.weight" % (d + 3), None, 1, 1, 0, 1)
        x = g.bn(x, p + ".%d" % (d + 4), 0)
        i += 1
g.end_block()
assert i == 20
g.comment("features.20-23: 1x1 conv to 1280, BN, ReLU6, adaptive avg pool; classifier")
x = g.conv(x, "features.20.weight", None, 1, 1, 0, 1)
x = g.bn(x, "features.21", 2)
pl = g.mean(x)
g.fc(pl, "classifier.1")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
