"""The plans of 28_VisionTransformer and 32_ConvolutionalVisionTransformer: a head, NL post-norm
nn.TransformerEncoderLayer blocks as one repeat (params names carry the layer:
"params.transformer.layers.{l}.linear1.weight"), and the classifier. usage: gen_vit.py 28|32 > plan.yaml"""
import re
import sys
def layer(pfx, ss, sn, hd_scale):
    """one post-norm nn.TransformerEncoderLayer (relu, dropout 0) over x [R, E] in place."""
    return f'''  # {pfx}: x = norm1(x + out_proj(attn(x))); x = norm2(x + linear2(relu(linear1(x))))
  - gemm:
      a: scratch.x
      b: params.{pfx}.self_attn.in_proj_weight
      trans_b: true
      bias: params.{pfx}.self_attn.in_proj_bias
      out: scratch.qkv
  - launch: tf_attn_small
    grid: [cdiv(S * NB * NH * 32, 128)]
    block: [128]
    args: [scratch.qkv, scratch.ao, S, NB, NH, HD, E, {ss}, {sn}, {hd_scale}]
  - gemm:
      a: scratch.ao
      b: params.{pfx}.self_attn.out_proj.weight
      trans_b: true
      bias: params.{pfx}.self_attn.out_proj.bias
      out: scratch.t
  - launch: tf_residual_layernorm<128>
    grid: [R]
    block: [128]
    shared: E * 4
    args: [scratch.x, scratch.t, scratch.x, params.{pfx}.norm1.weight, params.{pfx}.norm1.bias, R, E, 1.0e-5]
  - gemm:
      a: scratch.x
      b: params.{pfx}.linear1.weight
      trans_b: true
      bias: params.{pfx}.linear1.bias
      activation: relu
      out: scratch.hid
  - gemm:
      a: scratch.hid
      b: params.{pfx}.linear2.weight
      trans_b: true
      bias: params.{pfx}.linear2.bias
      out: scratch.t
  - launch: tf_residual_layernorm<128>
    grid: [R]
    block: [128]
    shared: E * 4
    args: [scratch.x, scratch.t, scratch.x, params.{pfx}.norm2.weight, params.{pfx}.norm2.bias, R, E, 1.0e-5]
'''

HEAD = {"28": '# ViT: img [2, 3, 224, 224], 16x16 patches (196 + cls = 197 tokens), dim 512, 6 post-norm encoder\n# layers (8 heads of 64, relu MLP 2048, dropout 0), head Linear(512, 2048) -> GELU (erf) -> 10.\n# nn.TransformerEncoder here is seq-first and is given [2, 197, 512]: its sequences run over the\n# images (S = 2 tokens) for each of the 197 positions (NB = 197), so attention mixes the two images\n# at the same position. Memory row s * 197 + n is token s of sequence n: no permute needed.\n# vit_patches lays out the unfold/reshape order; patch_to_embedding as one gemm batched over the\n# images into rows 1..196 of each image block of x (stride_c S1 * E); vit_add_pos writes the cls rows and adds pos_embedding. Per layer: in_proj\n# gemm, tf_attn_small (one warp per (token, sequence, head), online softmax over the 2 keys),\n# out_proj gemm, tf_residual_layernorm (x = norm1(x + t)), linear1 gemm with bias+relu epilogue,\n# linear2 gemm, tf_residual_layernorm. The head: a gemm reading x[:, 0] in place (lda S1 * E),\n# tf_gelu_erf, gemm. The NL = depth layers are one repeat (params names carry the layer). All\n# scratch is under 4 MB.\ndims:\n  B: inputs.0.shape[0]\n  IC: inputs.0.shape[1]\n  HW: inputs.0.shape[2]\n  P: init.1\n  NP: (HW / P) * (HW / P)\n  PD: IC * P * P\n  E: params.patch_to_embedding.weight.shape[0]\n  S1: NP + 1\n  S: B\n  NB: S1\n  R: B * S1\n  NH: init.5\n  HD: E / NH\n  F: params.transformer.layers.0.linear1.weight.shape[0]\n  MH: params.mlp_head.0.weight.shape[0]\n  NL: init.4\nscratch:\n  patches: {dtype: float32, shape: [B * NP, PD]}\n  x: {dtype: float32, shape: [R, E]}\n  qkv: {dtype: float32, shape: [R, 3 * E]}\n  ao: {dtype: float32, shape: [R, E]}\n  t: {dtype: float32, shape: [R, E]}\n  hid: {dtype: float32, shape: [R, F]}\n  head: {dtype: float32, shape: [B, MH]}\nforward:\n  - launch: vit_patches\n    grid: [cdiv(B * NP * PD, 256)]\n    block: [256]\n    args: [inputs.0, scratch.patches, B, IC, HW, P]\n  - gemm:\n      a: scratch.patches\n      b: params.patch_to_embedding.weight\n      trans_b: true\n      bias: params.patch_to_embedding.bias\n      out: "scratch.x[E]"\n      batch: B\n      stride_b: 0\n      stride_c: S1 * E\n      m: NP\n      n: E\n      k: PD\n  - launch: vit_add_pos\n    grid: [cdiv(R * E, 256)]\n    block: [256]\n    args: [scratch.x, params.cls_token, params.pos_embedding, B, S1, E]\n',
        "32": "# Convolutional ViT: x [10, 3, 32, 32]; conv1 4x4 stride 4 -> [10, 128, 8, 8]; flatten; linear_proj\n# (8192 -> 128); [cls, token] -> [10, 2, 128]; 6 post-norm encoder layers (batch_first, 4 heads of\n# 32, relu MLP 512, dropout 0); fc_out on x[:, 0] -> [10, 1000].\n# conv step (cuDNN, bias); the flatten is the conv output's own layout, so linear_proj is a gemm with\n# m = B, k = 8192; cvit_cls_concat builds x. Per layer: in_proj gemm, tf_attn_small (one warp per\n# (token, sequence, head); batch-first rows b * 2 + s), out_proj gemm, tf_residual_layernorm, linear1\n# gemm with bias+relu epilogue, linear2 gemm, tf_residual_layernorm. fc_out's gemm reads x[:, 0] in\n# place (lda S * E). The 6 layers are one repeat (params names carry the layer).\ndims:\n  B: inputs.0.shape[0]\n  E: params.conv1.weight.shape[0]\n  P: params.conv1.weight.shape[2]\n  G: inputs.0.shape[2] / P\n  FL: E * G * G\n  S: 2\n  NB: B\n  R: B * S\n  NH: init.2\n  HD: E / NH\n  F: params.transformer_layers.0.linear1.weight.shape[0]\n  NL: 6                                 # num_layers (the Model's default; get_init_inputs does not pass it)\nscratch:\n  conv: {dtype: float32, shape: [B, E, G, G]}\n  lp: {dtype: float32, shape: [B, E]}\n  x: {dtype: float32, shape: [R, E]}\n  qkv: {dtype: float32, shape: [R, 3 * E]}\n  ao: {dtype: float32, shape: [R, E]}\n  t: {dtype: float32, shape: [R, E]}\n  hid: {dtype: float32, shape: [R, F]}\nforward:\n  - conv:\n      x: inputs.0\n      w: params.conv1.weight\n      bias: params.conv1.bias\n      out: scratch.conv\n      stride: 4\n  - gemm:\n      a: scratch.conv\n      b: params.linear_proj.weight\n      trans_b: true\n      bias: params.linear_proj.bias\n      out: scratch.lp\n      m: B\n      n: E\n      k: FL\n  - launch: cvit_cls_concat\n    grid: [cdiv(R * E, 256)]\n    block: [256]\n    args: [params.cls_token, scratch.lp, scratch.x, B, E]\n"}
TAIL = {"28": '  # the head on x[:, 0] (rows b * S1), read in place: lda = S1 * E\n  - gemm:\n      a: scratch.x\n      lda: S1 * E\n      b: params.mlp_head.0.weight\n      trans_b: true\n      bias: params.mlp_head.0.bias\n      out: scratch.head\n      m: B\n      n: MH\n      k: E\n  - launch: tf_gelu_erf\n    grid: [cdiv(B * MH, 256)]\n    block: [256]\n    args: [scratch.head, B * MH]\n  - gemm:\n      a: scratch.head\n      b: params.mlp_head.3.weight\n      trans_b: true\n      bias: params.mlp_head.3.bias\n      out: outputs.0\n',
        "32": '  # fc_out on x[:, 0] (rows b * S), read in place: lda = S * E\n  - gemm:\n      a: scratch.x\n      lda: S * E\n      b: params.fc_out.weight\n      trans_b: true\n      bias: params.fc_out.bias\n      out: outputs.0\n      m: B\n      n: params.fc_out.weight.shape[0]\n      k: E\n'}
# (param prefix, layers, row of token s of sequence n: s * ss + n * sn, 1/sqrt(head dim))
LAYERS = {"28": ("transformer.layers.{}", "NL", "NB", "1", "0.125"),
          "32": ("transformer_layers.{}", "NL", "1", "S", "0.17677669529663687")}
def repeat(pfx, n, ss, sn, scale):
    """the layers as `repeat: n` (index l): layer()'s text indented, its params names quoted templates"""
    body = layer(pfx.format("{l}"), ss, sn, scale)
    body = re.sub(r"(params\.[A-Za-z0-9_.{}]+)", lambda m: '"' + m.group(1) + '"' if "{" in m.group(1) else m.group(1), body)
    body = "".join(("    " + ln if ln.strip() else ln) + "\n" for ln in body.rstrip("\n").split("\n"))
    return f"  - repeat: {n}\n    index: l\n    steps:\n" + body

if __name__ == "__main__":
    t = sys.argv[1]
    pfx, n, ss, sn, scale = LAYERS[t]
    sys.stdout.write(HEAD[t] + repeat(pfx, n, ss, sn, scale) + TAIL[t])
