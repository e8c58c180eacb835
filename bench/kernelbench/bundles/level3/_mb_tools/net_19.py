import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """MobileNetV1 in training mode (BatchNorm with batch statistics), written out layer by layer
(generated; every shape below follows the task's input through dims).
conv_bn: cuDNN 3x3 conv -> BN stats pass -> BN apply with ReLU, in place.
conv_dw: depthwise 3x3 conv (cuDNN, groups = channels) -> BN+ReLU -> 1x1 conv -> BN+ReLU.
AvgPool2d(7) on the 7x7 map is the plane mean (one warp per plane), then fc as a gemm with its
bias. Two activation buffers ping-pong; BN applies run in place."""
g = G("19_MobileNetV1", H)
x = g.x
g.comment("model.0: conv_bn(3, 32, stride 2)")
x = g.conv(x, "model.0.0.weight", None, 3, 2, 1, 1)
x = g.bn(x, "model.0.1", 1)
strides = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
for i, s in enumerate(strides, 1):
    g.block("model.", i)
    g.comment("model.%d: conv_dw(stride %d)" % (i, s))
    x = g.conv(x, "model.%d.0.weight" % i, None, 3, s, 1, x.C)
    x = g.bn(x, "model.%d.1" % i, 1)
    x = g.conv(x, "model.%d.3.weight" % i, None, 1, 1, 0, 1)
    x = g.bn(x, "model.%d.4" % i, 1)
g.end_block()
assert g.L(x.lvl)[4:] == (7, 7), g.L(x.lvl)
g.comment("AvgPool2d(7) on 7x7 = the mean of each plane, then fc")
p = g.mean(x)
g.fc(p, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
