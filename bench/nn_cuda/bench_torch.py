"""PyTorch eager baseline for nn-cuda-bench: the transformers Qwen2 model with the same config, fp32
master weights under bf16 autocast (as the native model keeps fp32 masters and computes in bf16),
SDPA attention, the same PPO loss, AdamW; tokens/s and torch.cuda.max_memory_allocated of one step.
Prints one JSON line per sequence length."""
import argparse
import json
import math
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--seq", type=int, action="append")
ap.add_argument("--steps", type=int, default=5)
args = ap.parse_args()
seqs = args.seq or [2048, 8192]
cfg = Qwen2Config(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=max(seqs),
                  rope_theta=1e6, tie_word_embeddings=True, attn_implementation="sdpa")
model = Qwen2ForCausalLM(cfg).cuda().float()
opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01)
n_params = sum(p.numel() for p in model.parameters())
for T in seqs:
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, cfg.vocab_size, (1, T), generator=g).cuda()
    adv = torch.randn(T - 1, generator=g).cuda()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=tokens).logits[0, :-1]
        logp_all = torch.log_softmax(logits.float(), -1)
        lp = logp_all.gather(-1, tokens[0, 1:, None])[:, 0]
        old = lp.detach() - 0.1
        r = torch.exp(torch.clamp(lp - old, -20, 20))
        loss = torch.maximum(-adv * r, -adv * torch.clamp(r, 0.8, 1.28)).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    med = ms[len(ms) // 2]
    print(json.dumps({"impl": "pytorch-eager-autocast-bf16", "params": n_params, "seq_len": T, "steps": args.steps,
                      "step_ms_median": med, "step_ms_min": ms[0], "step_ms_max": ms[-1],
                      "tokens_per_s": T / (med / 1000), "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
                      "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}), flush=True)
