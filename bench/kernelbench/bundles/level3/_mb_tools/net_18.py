import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act, fire, conv_pool
H = """SqueezeNet (generated; shapes follow the task's input through dims).
Stem in 4 chunks of cdiv(N, 4) images (its 7x7/2 conv output is the largest tensor: a chunk of it
fits a ping-pong buffer the fire modules need anyway): conv (cuDNN, bias) -> MaxPool2d(3, 2, ceil_mode)
with the ReLU fused (relu and max commute). Every other step runs on the whole batch. Fire module: squeeze 1x1 conv + ReLU in place; both expand
convs write their channel slices of the module's output for every image through out_strides (the
concatenation's [KT * HW, HW, W, 1]; no copy), then one ReLU pass over the module's output, or, for
the two modules a max pool follows, the ReLU fused into that pool (relu(max) == max(relu)). Classifier: Dropout(p=0) is the identity; 1x1 conv with bias,
then ReLU and the adaptive average pool fused in one plane-mean kernel writing the output."""
g = G("18_SqueezeNet", H)
x = g.x
g.comment("features.0-2: conv 7x7/2, ReLU, maxpool 3/2 ceil_mode")
x = conv_pool(g, x, "features.0.weight", "features.0.bias", 7, 2, 0, 3, 2, 0, act=1, ceil=True, chunks=4)
for i in (3, 4, 5):
    g.comment("features.%d: fire%s" % (i, " (its ReLU fused into the max pool)" if i == 5 else ""))
    x = fire(g, x, "features.%d" % i, relu=i != 5)
g.comment("features.6: ReLU + maxpool 3/2 ceil_mode (relu(max) == max(relu))")
x = g.maxpool(x, 3, 2, 0, ceil=True, act=1)
for i in (7, 8, 9, 10):
    g.comment("features.%d: fire%s" % (i, " (its ReLU fused into the max pool)" if i == 10 else ""))
    x = fire(g, x, "features.%d" % i, relu=i != 10)
g.comment("features.11: ReLU + maxpool 3/2 ceil_mode (relu(max) == max(relu))")
x = g.maxpool(x, 3, 2, 0, ceil=True, act=1)
g.comment("features.12: fire")
x = fire(g, x, "features.12")
g.comment("classifier: dropout(0) = identity, 1x1 conv, ReLU + adaptive avg pool into the output")
x = g.conv(x, "classifier.1.weight", "classifier.1.bias", 1, 1, 0, 1)
g.mean(x, act=1, out="outputs.0")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
