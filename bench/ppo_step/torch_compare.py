"""PyTorch's number for the same step (issue 34): transformers + peft under bf16 autocast, the loss
ppo-step computes (PPO's clipped policy-gradient term on the assistant tokens of one trajectory with
recorded logprobs, GRPO advantages), at the shape of a ppo-step checkpoint folder, so bench/ppo_step/
large.sh's tokens/s have a peer to stand beside. Prints one JSON line per case: tokens/s (median and
min..max over REPS steps after one warm-up), peak device memory.

  python3 bench/ppo_step/torch_compare.py --base /tmp/ppo_large/base_1.5b --tokens 8192 [--lora 64]
  [--checkpointing] [--reps 3]

Full fine-tuning: fp32 master weights under autocast with AdamW (torch.optim.AdamW, fused when
available), as ppo-step keeps fp32 masters and computes in bf16. LoRA: peft's LoraConfig(r, alpha 2r,
every linear layer) on a bf16 base. Logits are never materialised whole for long sequences: the head
runs in chunks of --head-chunk rows (as ppo-step does), so the comparison is of the same memory plan.
"""
import argparse
import json
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--checkpointing", action="store_true")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--head-chunk", type=int, default=882)
    ap.add_argument("--clip-low", type=float, default=0.2)
    ap.add_argument("--clip-high", type=float, default=0.28)
    a = ap.parse_args()

    from transformers import AutoModelForCausalLM
    dev = torch.device("cuda")
    dtype = torch.bfloat16 if a.lora else torch.float32
    model = AutoModelForCausalLM.from_pretrained(a.base, torch_dtype=dtype, attn_implementation="sdpa").to(dev)
    if a.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.data = p.data.float()  # adapters in fp32, as ppo-step keeps them
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if a.lora:
            model.enable_input_require_grads()
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        opt = torch.optim.AdamW(params, lr=1e-6, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(params, lr=1e-6)
    cfg = model.config
    V = cfg.vocab_size
    T = a.tokens
    g = torch.Generator().manual_seed(T)
    tokens = torch.randint(0, min(V, 150000), (1, T), generator=g).to(dev)
    prompt = max(1, T // 10)
    mask = torch.zeros(T - 1, device=dev)
    mask[prompt - 1:] = 1.0
    old_lp = torch.full((T - 1,), -11.9, device=dev)
    adv = torch.ones(T - 1, device=dev)
    backbone = model.get_base_model().model if a.lora else model.model
    head = model.get_base_model().lm_head if a.lora else model.lm_head

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = backbone(input_ids=tokens).last_hidden_state[0, :-1]  # [T-1, C]
        targets = tokens[0, 1:]
        n = mask.sum()
        total = 0.0
        # The head in chunks, each chunk's graph freed by its own backward into h (as ppo-step does).
        h_detached = h.detach().requires_grad_(True)
        for r0 in range(0, T - 1, a.head_chunk):
            r1 = min(T - 1, r0 + a.head_chunk)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = head(h_detached[r0:r1]).float()
            lp = torch.log_softmax(logits, -1).gather(-1, targets[r0:r1, None])[:, 0]
            ratio = torch.exp(lp - old_lp[r0:r1])
            pg = torch.maximum(-adv[r0:r1] * ratio, -adv[r0:r1] * ratio.clamp(1 - a.clip_low, 1 + a.clip_high))
            loss = (pg * mask[r0:r1]).sum() / n
            loss.backward()
            total += float(loss)
        h.backward(h_detached.grad)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return total

    step()  # warm-up: allocator, cuBLAS plans, kernels
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    rates = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        rates.append((T - 1) / (time.perf_counter() - t0))
    print(json.dumps({"peer": "transformers+peft" if a.lora else "transformers", "torch": torch.__version__,
                      "base": a.base, "tokens": T, "lora": a.lora, "checkpointing": a.checkpointing,
                      "tokens_per_s": round(statistics.median(rates)), "min": round(min(rates)), "max": round(max(rates)),
                      "peak_device_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
                      "device": torch.cuda.get_device_name()}))


if __name__ == "__main__":
    main()
