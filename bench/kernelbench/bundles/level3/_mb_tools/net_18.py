import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act, fire
H = """SqueezeNet (generated; shapes follow the task's input through dims).
Stem, per image (its 7x7/2 conv output is the largest tensor): conv (cuDNN, bias) into a one-image
buffer -> MaxPool2d(3, 2, ceil_mode) with the ReLU fused (relu and max commute) into the batch. Fire module: squeeze 1x1 conv on the batch + ReLU in place; then per image both expand
convs write their channel slices of the module's output through views (no concatenation copy) and a
ReLU pass runs over the image's slice. Classifier: Dropout(p=0) is the identity; 1x1 conv with bias,
then ReLU and the adaptive average pool fused in one plane-mean kernel writing the output."""
g = G("18_SqueezeNet", H)
x = g.x
g.comment("features.0-2: conv 7x7/2, ReLU, maxpool 3/2 ceil_mode")
l1 = g.level(0, 7, 2, 0)
l2 = g.level(l1, 3, 2, 0, ceil=True)
stem = g.fixed_buf("stem", "var", "96 * HW1")
out = g.alloc("N * 96 * HW2", [])
g.repeat("N", "n")
g.conv(x, "features.0.weight", "features.0.bias", 7, 2, 0, 1, n_img=1, x_view="inputs.0[n * 3 * HW0]", out_view=stem)
g.maxpool(Act(stem, 96, l1), 3, 2, 0, act=1, ceil=True, out="%s[n * 96 * HW2]" % out, n_img=1)
g.end_repeat()
x = Act(out, 96, l2)
for i in (3, 4, 5):
    g.comment("features.%d: fire" % i)
    x = fire(g, x, "features.%d" % i)
g.comment("features.6: maxpool 3/2 ceil_mode")
x = g.maxpool(x, 3, 2, 0, ceil=True)
for i in (7, 8, 9, 10):
    g.comment("features.%d: fire" % i)
    x = fire(g, x, "features.%d" % i)
g.comment("features.11: maxpool 3/2 ceil_mode")
x = g.maxpool(x, 3, 2, 0, ceil=True)
g.comment("features.12: fire")
x = fire(g, x, "features.12")
g.comment("classifier: dropout(0) = identity, 1x1 conv, ReLU + adaptive avg pool into the output")
x = g.conv(x, "classifier.1.weight", "classifier.1.bias", 1, 1, 0, 1)
g.mean(x, act=1, out="outputs.0")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
