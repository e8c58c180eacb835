import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """RegNet (3 stages) in training mode, written out stage by stage (generated; shapes follow the
task's input through dims). Each stage: 3x3 conv (cuDNN, with its bias) -> BN stats -> BN apply +
ReLU in place -> 3x3 conv -> BN + ReLU -> MaxPool2d(2, 2). Then torch.mean over H, W (one warp per
plane) and fc as a gemm with its bias."""
g = G("27_RegNet", H)
x = g.x
for i in range(3):
    p = "feature_extractor.%d" % i
    g.comment("stage %d" % i)
    x = g.conv(x, p + ".0.weight", p + ".0.bias", 3, 1, 1, 1)
    x = g.bn(x, p + ".1", 1)
    x = g.conv(x, p + ".3.weight", p + ".3.bias", 3, 1, 1, 1)
    x = g.bn(x, p + ".4", 1)
    x = g.maxpool(x, 2, 2, 0)
g.comment("global average pool, fc")
p = g.mean(x)
g.fc(p, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
