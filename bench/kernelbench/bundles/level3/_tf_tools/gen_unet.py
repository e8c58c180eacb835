"""The plan of 45_UNetSoftmax (4 levels + bottleneck, concatenations as views). usage: gen_unet.py > plan.yaml"""
out = []
w = out.append
w('''# UNet with softmax activations: x [8, 8, 64, 512], features 64, 4 levels + bottleneck. Every
# DoubleConv is conv (cuDNN, bias, padding 1) -> BatchNorm2d in training mode (unet_bn_stats: batch
# mean and biased variance per channel, two passes) -> softmax over W fused with the BN apply
# (unet_bn_softmax, one block per row) -> conv -> BN -> softmax.
# The concatenations are views: cat{l} [N, 2C, H, W] holds [upconv | encoder]; each encoder's last
# softmax writes straight into its cat buffer's second half (per-image stride 2C*H*W), the pool reads
# it from there, and each ConvTranspose2d (a transposed conv step, per image, bias) writes the first
# half of its image. Two ping-pong temporaries tA, tB (the largest conv output, [N, 64, 64, 512])
# carry the pooled inputs, the conv outputs and the decoder outputs; the 1x1 final conv writes the
# output. Scratch: cat1 134 MB, cat2 67 MB, cat3 34 MB, cat4 17 MB, bott 4 MB, tA and tB 67 MB each.
dims:
  N: inputs.0.shape[0]
  CI: inputs.0.shape[1]
  H: inputs.0.shape[2]
  W: inputs.0.shape[3]
  F: params.encoder1.double_conv.0.weight.shape[0]
scratch:
''')
def C(l): return f"(F * {2 ** (l - 1)})" if l > 1 else "F"
def Hh(l): return f"(H / {2 ** (l - 1)})" if l > 1 else "H"
def Ww(l): return f"(W / {2 ** (l - 1)})" if l > 1 else "W"
for l in range(1, 5):
    w(f"  cat{l}: {{dtype: float32, shape: [N, 2 * {C(l)}, {Hh(l)}, {Ww(l)}]}}\n")
w(f"  bott: {{dtype: float32, shape: [N, {C(5)}, {Hh(5)}, {Ww(5)}]}}\n")
w("  tA: {dtype: float32, shape: [N * F * H * W]}\n  tB: {dtype: float32, shape: [N * F * H * W]}\n")
w(f"  stats: {{dtype: float32, shape: [2, {C(5)}]}}\nforward:\n")
import math
def block_for(l):
    wl = 512 >> (l - 1)  # the task's W; BLOCK only has to be a multiple of 32 (a loop covers any W)
    return max(32, min(128, wl))
def bn_sm(pfx, bn, buf, cout, l, dest, dest_img):
    B = block_for(l)
    w(f'''  - launch: unet_bn_stats<1024>
    grid: [{cout}]
    block: [1024]
    args: [{buf}, scratch.stats, N, {cout}, {Hh(l)} * {Ww(l)}, 1.0e-5]
  - launch: unet_bn_softmax<{B}>
    grid: [N * {cout} * {Hh(l)}]
    block: [{B}]
    shared: {Ww(l)} * 4
    args: [{buf}, scratch.stats, params.{pfx}.double_conv.{bn}.weight, params.{pfx}.double_conv.{bn}.bias, {dest}, N, {cout}, {Hh(l)}, {Ww(l)}, {dest_img}]
''')
def conv(x, wname, bname, out, n, c, k, h, ww, r, extra=""):
    w(f'''  - conv:
      x: "{x}"
      w: {wname}
      bias: {bname}
      out: "{out}"
{extra}      shape: {{n: {n}, c: {c}, k: {k}, h: {h}, w: {ww}, r: {r}, s: {r}}}
''')
def double(pfx, src, cin, cout, l, dest, dest_img):
    w(f"  # {pfx}: {cin} -> {cout} channels at {Hh(l)} x {Ww(l)}\n")
    conv(src, f"params.{pfx}.double_conv.0.weight", f"params.{pfx}.double_conv.0.bias", "scratch.tA[0]", "N", cin, cout, Hh(l), Ww(l), 3, "      padding: 1\n")
    bn_sm(pfx, 1, "scratch.tA", cout, l, "scratch.tA", f"{cout} * {Hh(l)} * {Ww(l)}")
    conv("scratch.tA[0]", f"params.{pfx}.double_conv.3.weight", f"params.{pfx}.double_conv.3.bias", "scratch.tB[0]", "N", cout, cout, Hh(l), Ww(l), 3, "      padding: 1\n")
    bn_sm(pfx, 4, "scratch.tB", cout, l, dest, dest_img)
def img(l): return f"2 * {C(l)} * {Hh(l)} * {Ww(l)}"
for l in range(1, 5):
    src = "inputs.0[0]" if l == 1 else "scratch.tB[0]"
    cin = "CI" if l == 1 else C(l - 1)
    double(f"encoder{l}", src, cin, C(l), l, f'"scratch.cat{l}[{C(l)} * {Hh(l)} * {Ww(l)}]"', img(l))
    w(f'''  - launch: unet_maxpool2
    grid: [cdiv(N * {C(l)} * {Hh(l + 1)} * {Ww(l + 1)}, 256)]
    block: [256]
    args: ["scratch.cat{l}[{C(l)} * {Hh(l)} * {Ww(l)}]", scratch.tB, N, {C(l)}, {Hh(l)}, {Ww(l)}, {img(l)}]
''')
double("bottleneck", "scratch.tB[0]", C(4), C(5), 5, "scratch.bott", f"{C(5)} * {Hh(5)} * {Ww(5)}")
for l in range(4, 0, -1):
    src = "scratch.bott" if l == 4 else "scratch.tA"
    w(f'''  # upconv{l} (ConvTranspose2d k2 s2) per image into the first half of cat{l}
  - repeat: N
    index: n
    steps:
      - conv:
          x: "{src}[n * {C(l + 1)} * {Hh(l + 1)} * {Ww(l + 1)}]"
          w: params.upconv{l}.weight
          bias: params.upconv{l}.bias
          out: "scratch.cat{l}[n * {img(l)}]"
          transposed: true
          stride: 2
          shape: {{n: 1, c: {C(l + 1)}, k: {C(l)}, h: {Hh(l + 1)}, w: {Ww(l + 1)}, r: 2, s: 2}}
''')
    double(f"decoder{l}", f"scratch.cat{l}[0]", f"2 * {C(l)}", C(l), l, "scratch.tA", f"{C(l)} * {Hh(l)} * {Ww(l)}")
w('''  - conv:
      x: "scratch.tA[0]"
      w: params.final_conv.weight
      bias: params.final_conv.bias
      out: outputs.0
      shape: {n: N, c: F, k: params.final_conv.weight.shape[0], h: H, w: W, r: 1, s: 1}
''')
print("".join(out), end="")
