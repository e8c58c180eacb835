#!/usr/bin/env python3
"""Independent check of the native model: a Qwen2/Llama forward written the way Hugging Face
transformers writes it (rotate_half RoPE, repeat_kv for grouped-query attention, RMSNorm, SwiGLU),
in torch float64, reading the checkpoint folder with its own safetensors parser. Compares the
logprobs `ppo-step sample` recorded (float32, KV cache) with this reference.

usage: torch_reference.py CKPT EPISODES.jsonl [--tol T] [--temperature T]      exit 0 when all match
"""
import json
import struct
import sys

import numpy as np
import torch


def load(ckpt):
    cfg = json.load(open(ckpt + "/config.json"))
    raw = open(ckpt + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    w = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info["dtype"]
        a, b = info["data_offsets"]
        w[name] = torch.from_numpy(np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"]).astype(np.float64))
    return cfg, w


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(cfg, w, ids, temperature=1.0):
    T = len(ids)
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        def proj(name):
            y = h @ w[p + "self_attn.%s_proj.weight" % name].T
            b = w.get(p + "self_attn.%s_proj.bias" % name)
            return y + b if b is not None else y
        q = proj("q").view(T, H, D).transpose(0, 1)
        k = proj("k").view(T, KV, D).transpose(0, 1)
        v = proj("v").view(T, KV, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=0)
        v = v.repeat_interleave(H // KV, dim=0)
        att = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + mask, dim=-1) @ v
        x = x + att.transpose(0, 1).reshape(T, H * D) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return torch.log_softmax(x @ head.T / temperature, dim=-1)  # the sampler records logprobs at its temperature


def main():
    ckpt, episodes = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[sys.argv.index("--tol") + 1]) if "--tol" in sys.argv else 1e-4
    temp = float(sys.argv[sys.argv.index("--temperature") + 1]) if "--temperature" in sys.argv else 1.0
    cfg, w = load(ckpt)
    worst, count = 0.0, 0
    for line in open(episodes):
        rec = json.loads(line)
        turns = rec["episode"]["turns"]
        prompt, resp = turns[0]["token_ids"], turns[1]["token_ids"]
        ids = prompt + resp
        logp = forward(cfg, w, ids, temp)
        for i, tok in enumerate(resp):
            ref = logp[len(prompt) + i - 1, tok].item()
            worst = max(worst, abs(ref - turns[1]["logprobs"][i]))
            count += 1
    print("torch reference: %d sampled tokens, max |logprob difference| %.3g (tolerance %g)" % (count, worst, tol))
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
