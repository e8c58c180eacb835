import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import G, Act
H = """ShuffleNet in training mode (generated; shapes follow the task's input through dims).
Stem: 3x3/2 conv -> BN+ReLU -> MaxPool2d(3, 2, 1). Each unit (stride 1 throughout, as the task has
it): 1x1 group conv (cuDNN, groups 3) -> BN+ReLU -> depthwise 3x3 conv -> BN, with the channel
shuffle folded into that apply pass (input channel i * (M / 3) + j -> output channel j * 3 + i) ->
1x1 group conv -> BN+ReLU, plus the shortcut: the unit's input (identity) added in the same apply
pass, or for a stage's first unit a 1x1 conv whose BN runs in that pass too (mb_bn_apply_add_bn).
Head: 1x1 conv to 1024 -> BN+ReLU -> adaptive avg pool (plane mean) -> fc (gemm with bias)."""
g = G("26_ShuffleNet", H)
x = g.x
g.comment("conv1 3x3/2 -> bn1 -> relu -> maxpool 3/2/1")
x = g.conv(x, "conv1.weight", None, 3, 2, 1, 1)
x = g.bn(x, "bn1", 1)
x = g.maxpool(x, 3, 2, 1)
for st, reps in ((2, 3), (3, 7), (4, 3)):
    for u in range(reps):
        p = "stage%d.%d" % (st, u)
        g.block("stage%d." % st, u)
        has_sc = (p + ".shortcut.0.weight") in g.shapes
        g.comment("%s: ShuffleNet unit%s" % (p, ", conv shortcut" if has_sc else ", identity shortcut"))
        inp = x
        t = g.conv(x, p + ".conv1.weight", None, 1, 1, 0, 3, live=[inp.buf])
        t = g.bn(t, p + ".bn1", 1)
        t2 = g.conv(t, p + ".conv2.weight", None, 3, 1, 1, t.C, live=[inp.buf])
        sh = g.alloc("N * %d * %s" % (t2.C, g.L(t2.lvl)[2]), [inp.buf, t2.buf])
        g.comment("bn2, then the channel shuffle (3 groups) on the way out")
        t = g.bn(t2, p + ".bn2", 0, out=sh, groups=3)
        o = g.conv(t, p + ".conv3.weight", None, 1, 1, 0, 3, live=[inp.buf])
        if has_sc:
            sc = g.conv(inp, p + ".shortcut.0.weight", None, 1, 1, 0, 1, live=[inp.buf, o.buf])
            x = g.bn_add_bn(o, p + ".bn3", sc, p + ".shortcut.1", 1)
        else:
            x = g.bn(o, p + ".bn3", 1, res=inp)
g.end_block()
g.comment("conv5 1x1 -> bn5 -> relu -> adaptive avg pool -> fc")
x = g.conv(x, "conv5.weight", None, 1, 1, 0, 1)
x = g.bn(x, "bn5", 1)
pl = g.mean(x)
g.fc(pl, "fc")
g.write(sys.argv[1] if len(sys.argv) > 1 else None)
