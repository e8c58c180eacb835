"""The plans of 29_SwinMLP (v1) and 30_SwinTransformerV2 (v2): the task's default Swin (224 px,
patch 4, dim 96, depths 2-2-6-2, heads 3-6-12-24, window 7) written out block by block, sizes per
image so any batch binds. usage: gen_swin.py v1|v2 > plan.yaml"""
import sys
V2 = sys.argv[1] == "v2"
B, IMG, PATCH, E0 = 10, 224, 4, 96
DEPTHS, HEADS, WIN = [2, 2, 6, 2], [3, 6, 12, 24], 7
PER = 301056  # floats per image of x, t and hid: the largest token matrix, [56 * 56, 96]
out = []
w = out.append
def ln(kind, args, cols, rows):
    blk = 128
    w(f'''  - launch: {kind}<{blk}>
    grid: [{rows}]
    block: [{blk}]
    shared: {cols} * 4
    args: [{args}]
''')
def gemm(a, b, out_, m, n, k, bias=None, beta=None, trans_b=True):
    w(f'''  - gemm:
      a: "{a}"
      b: {b}
      trans_b: {'true' if trans_b else 'false'}
''' + (f"      bias: {bias}\n" if bias else "") + (f"      beta: {beta}\n" if beta else "") + f'''      out: "{out_}"
      m: {m}
      n: {n}
      k: {k}
''')
def ew(kern, n, args):
    w(f'''  - launch: {kern}
    grid: [cdiv({n}, 256)]
    block: [256]
    args: [{args}]
''')
init = []
w_dims = []
if V2:
    w('''# Swin Transformer V2 (defaults: 224 px, patch 4, dim 96, depths 2-2-6-2, heads 3-6-12-24, window 7,
# MLP x4, drop rates 0, no stochastic depth in the blocks) on x [10, 3, 224, 224].
# Patch embed: conv step (4x4 stride 4) -> tf_transpose per image -> LayerNorm. Per block (post-norm):
# qkv gemm (bias cat(q_bias, 0, v_bias), built at init) over image chunks into hid; swin2_window_attn
# (one block per image/window/head: the cyclic shift as index arithmetic, cosine attention with the
# clamped logit scale, the continuous relative position bias 16*sigmoid(cpb_mlp(...)) precomputed
# at init per block, the shifted-window mask from the block's attn_mask buffer, softmax, PV, written
# back at the un-rolled token) -> t; proj gemm -> hid; x = x + norm1(hid) (tf_layernorm_residual);
# MLP in row chunks: fc1 gemm -> hid, GELU (erf), fc2 gemm -> t; x = x + norm2(t). PatchMerging:
# swin_merge_gather -> reduction gemm (no bias) -> LayerNorm. Then LayerNorm, swin_avgpool, head gemm.
# Scratch: x, t, hid 12 MB each (the largest token matrix), relative position biases 1.3 MB.
''')
else:
    w('''# Swin MLP (defaults: 224 px, patch 4, dim 96, depths 2-2-6-2, heads 3-6-12-24, window 7, MLP x4,
# drop rates 0; its blocks' drop_path is nn.Identity) on x [10, 3, 224, 224].
# Patch embed: conv step (4x4 stride 4) -> tf_transpose per image -> LayerNorm. Per block (pre-norm):
# norm1 -> t; swin_spatial_mlp (one block per image/window/head: the shifted-window zero padding as
# index arithmetic, the grouped 1x1 Conv1d over the window's 49 tokens, + bias, + shortcut, written
# in place into x); norm2 -> t; the MLP in row chunks that fit hid: fc1 gemm (bias) -> hid, GELU
# (erf), fc2 gemm (bias) with beta 1 adds onto x. PatchMerging: swin_merge_gather -> LayerNorm(4C)
# -> reduction gemm (no bias). Then LayerNorm, swin_avgpool, head gemm.
# Scratch: x, t, hid 12 MB each (the largest token matrix); MLP hidden in 4/2/1/1 row chunks.
''')
w(f'''dims:
  B: inputs.0.shape[0]
  CAP: B * {PER}
@@DIMS@@scratch:
  x: {{dtype: float32, shape: [CAP]}}
  t: {{dtype: float32, shape: [CAP]}}
  hid: {{dtype: float32, shape: [{'max(CAP, 903168)' if V2 else 'CAP'}]}}
  pooled: {{dtype: float32, shape: [B, {E0 * 8}]}}
''')
if V2:
    nrpb = 0; rpb_off = {}; qb_off = {}; nqb = 0
    for i, (d, nh) in enumerate(zip(DEPTHS, HEADS)):
        res = IMG // PATCH >> i
        ws = min(WIN, res)
        for j in range(d):
            rpb_off[(i, j)] = nrpb; nrpb += nh * ws * ws * ws * ws
            qb_off[(i, j)] = nqb; nqb += 3 * E0 * 2 ** i
    w(f"  rpb: {{dtype: float32, shape: [{nrpb}]}}\n  qkvb: {{dtype: float32, shape: [{nqb}]}}\n")
    w("init:\n")
    for i, (d, nh) in enumerate(zip(DEPTHS, HEADS)):
        res = IMG // PATCH >> i
        ws = min(WIN, res); C = E0 * 2 ** i
        for j in range(d):
            p = f"params.layers.{i}.blocks.{j}.attn"
            w(f'''  - launch: swin2_rpb_init
    grid: [cdiv({nh * ws ** 4}, 256)]
    block: [256]
    args: [{p}.relative_coords_table, {p}.cpb_mlp.0.weight, {p}.cpb_mlp.0.bias, {p}.cpb_mlp.2.weight, {p}.relative_position_index, "scratch.rpb[{rpb_off[(i, j)]}]", {nh}, {ws * ws}, 512]
  - launch: swin2_qkv_bias_init
    grid: [cdiv({3 * C}, 256)]
    block: [256]
    args: [{p}.q_bias, {p}.v_bias, "scratch.qkvb[{qb_off[(i, j)]}]", {C}]
''')
w("forward:\n")
R0 = IMG // PATCH
w(f'''  - conv:
      x: inputs.0
      w: params.patch_embed.proj.weight
      bias: params.patch_embed.proj.bias
      out: "scratch.hid[0]"
      stride: {PATCH}
      shape: {{n: B, c: 3, k: {E0}, h: {IMG}, w: {IMG}, r: {PATCH}, s: {PATCH}}}
  - launch: tf_transpose
    grid: [cdiv({R0 * R0}, 32), cdiv({E0}, 32), B]
    block: [32, 8]
    args: [scratch.hid, scratch.t, {E0}, {R0 * R0}]
''')
ln("tf_layernorm", f"scratch.t, scratch.x, params.patch_embed.norm.weight, params.patch_embed.norm.bias, B * {R0 * R0}, {E0}, 1.0e-5", E0, f"B * {R0 * R0}")
for i, (d, nh) in enumerate(zip(DEPTHS, HEADS)):
    res = R0 >> i
    C = E0 * 2 ** i
    ws, base_shift = (res, 0) if res <= WIN else (WIN, WIN // 2)
    L = res * res
    rows = f"B * {L}"
    F = 4 * C
    mc = 1
    while L * F > PER * mc or L % mc: mc += 1   # row chunks of the MLP hidden (per image: any B)
    mr = f"(B * {L // mc})"
    if V2:
        w_dims.append(f"  NI{i}: max(1, CAP / {L * 3 * C})\n")   # images per qkv chunk
    for j in range(d):
        shift = base_shift if j % 2 else 0
        p = f"params.layers.{i}.blocks.{j}"
        w(f"  # stage {i} block {j}: {res}x{res} tokens, C = {C}, {nh} heads, window {ws}, shift {shift}\n")
        if V2:
            # qkv over image chunks that fit hid
            nw = (res // ws) ** 2
            ni = f"min(NI{i}, B - c * NI{i})"
            mask = f"{p}.attn_mask, 1" if shift else f'"scratch.rpb[{rpb_off[(i, j)]}]", 0'
            w(f'''  - repeat: cdiv(B, NI{i})
    index: c
    steps:
      - gemm:
          a: "scratch.x[c * NI{i} * {L * C}]"
          b: {p}.attn.qkv.weight
          trans_b: true
          bias: "scratch.qkvb[{qb_off[(i, j)]}]"
          out: "scratch.hid[0]"
          m: {ni} * {L}
          n: {3 * C}
          k: {C}
      - launch: swin2_window_attn
        grid: [{ni} * {nw * nh}]
        block: [128]
        args: [scratch.hid, "scratch.t[c * NI{i} * {L * C}]", {p}.attn.logit_scale, "scratch.rpb[{rpb_off[(i, j)]}]", {mask}, {ni}, {res}, {res}, {C}, {nh}, {ws}, {shift}]
''')
            gemm("scratch.t[0]", f"{p}.attn.proj.weight", "scratch.hid[0]", rows, C, C, bias=f"{p}.attn.proj.bias")
            ln("tf_layernorm_residual", f"scratch.hid, scratch.x, scratch.x, {p}.norm1.weight, {p}.norm1.bias, {rows}, {C}, 1.0e-5", C, rows)
            for c in range(mc):
                gemm(f"scratch.x[{c} * {mr} * {C}]", f"{p}.mlp.fc1.weight", "scratch.hid[0]", mr, F, C, bias=f"{p}.mlp.fc1.bias")
                ew("tf_gelu_erf", f"{mr} * {F}", f"scratch.hid, {mr} * {F}")
                gemm("scratch.hid[0]", f"{p}.mlp.fc2.weight", f"scratch.t[{c} * {mr} * {C}]", mr, C, F, bias=f"{p}.mlp.fc2.bias")
            ln("tf_layernorm_residual", f"scratch.t, scratch.x, scratch.x, {p}.norm2.weight, {p}.norm2.bias, {rows}, {C}, 1.0e-5", C, rows)
        else:
            ln("tf_layernorm", f"scratch.x, scratch.t, {p}.norm1.weight, {p}.norm1.bias, {rows}, {C}, 1.0e-5", C, rows)
            nwin = ((res + (ws if shift else 0)) // ws) ** 2
            w(f'''  - launch: swin_spatial_mlp
    grid: [B * {nwin * nh}]
    block: [128]
    args: [scratch.t, scratch.x, {p}.spatial_mlp.weight, {p}.spatial_mlp.bias, scratch.x, B, {res}, {res}, {C}, {nh}, {ws}, {shift}]
''')
            ln("tf_layernorm", f"scratch.x, scratch.t, {p}.norm2.weight, {p}.norm2.bias, {rows}, {C}, 1.0e-5", C, rows)
            for c in range(mc):
                gemm(f"scratch.t[{c} * {mr} * {C}]", f"{p}.mlp.fc1.weight", "scratch.hid[0]", mr, F, C, bias=f"{p}.mlp.fc1.bias")
                ew("tf_gelu_erf", f"{mr} * {F}", f"scratch.hid, {mr} * {F}")
                gemm("scratch.hid[0]", f"{p}.mlp.fc2.weight", f"scratch.x[{c} * {mr} * {C}]", mr, C, F, bias=f"{p}.mlp.fc2.bias", beta="1.0")
    if i < len(DEPTHS) - 1:
        p = f"params.layers.{i}.downsample"
        mrows = f"B * {L // 4}"
        w(f"  # stage {i} PatchMerging: {res}x{res}x{C} -> {res // 2}x{res // 2}x{2 * C}\n")
        ew("swin_merge_gather", f"{mrows} * {4 * C}", f"scratch.x, scratch.t, B, {res}, {res}, {C}")
        if V2:
            gemm("scratch.t[0]", f"{p}.reduction.weight", "scratch.x[0]", mrows, 2 * C, 4 * C)
            ln("tf_layernorm", f"scratch.x, scratch.x, {p}.norm.weight, {p}.norm.bias, {mrows}, {2 * C}, 1.0e-5", 2 * C, mrows)
        else:
            ln("tf_layernorm", f"scratch.t, scratch.t, {p}.norm.weight, {p}.norm.bias, {mrows}, {4 * C}, 1.0e-5", 4 * C, mrows)
            gemm("scratch.t[0]", f"{p}.reduction.weight", "scratch.x[0]", mrows, 2 * C, 4 * C)
CF = E0 * 8; LF = (R0 >> 3) ** 2
ln("tf_layernorm", f"scratch.x, scratch.x, params.norm.weight, params.norm.bias, B * {LF}, {CF}, 1.0e-5", CF, f"B * {LF}")
w(f'''  - launch: swin_avgpool
    grid: [cdiv(B * {CF}, 256)]
    block: [256]
    args: [scratch.x, scratch.pooled, B, {LF}, {CF}]
  - gemm:
      a: scratch.pooled
      b: params.head.weight
      trans_b: true
      bias: params.head.bias
      out: outputs.0
''')
print("".join(out).replace("@@DIMS@@", "".join(w_dims)), end="")
