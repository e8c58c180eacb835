import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act, inception, conv_pool
H = """GoogLeNet (Inception v1) (generated; shapes follow the task's input through dims).
Every step runs on the whole batch. Stem: 7x7/2 conv (cuDNN, bias) -> ReLU fused into MaxPool2d(3, 2,
1); 1x1 conv + ReLU in place; 3x3 conv -> ReLU fused into the next maxpool. Inception modules without
a concatenation copy: each branch's last conv writes its channel slice of the module's output for
every image at once through out_strides (the concatenation's [KT * HW, HW, W, 1]); the 3x3/5x5
reductions and the 3x3/1/1 max-pooled input live in batch-sized scratch (7 steps a module). Then
adaptive avg pool (plane mean), Dropout(0) = identity, fc (gemm with bias)."""
g = G("7_GoogleNetInceptionV1", H)
x = g.x
g.comment("conv1 7x7/2 -> relu -> maxpool1 3/2/1")
x = conv_pool(g, x, "conv1.weight", "conv1.bias", 7, 2, 3, 3, 2, 1, act=1)
g.comment("conv2 1x1 -> relu")
x = g.conv(x, "conv2.weight", "conv2.bias", 1, 1, 0, 1)
g.act_inplace(x, 1)
g.comment("conv3 3x3 -> relu -> maxpool2 3/2/1")
x = conv_pool(g, x, "conv3.weight", "conv3.bias", 3, 1, 1, 3, 2, 1, act=1)
for m in ("3a", "3b", "mp", "4a", "4b", "4c", "4d", "4e", "mp", "5a", "5b"):
    if m == "mp":
        g.comment("maxpool 3/2/1")
        x = g.maxpool(x, 3, 2, 1)
    else:
        g.comment("inception" + m)
        x = inception(g, x, "inception" + m)
g.comment("adaptive avg pool, dropout(0) = identity, fc")
pl = g.mean(x)
g.fc(pl, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
