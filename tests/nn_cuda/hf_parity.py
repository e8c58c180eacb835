"""Parity of the native model on CUDA and of the native tokenizer with Hugging Face (on the device).

1. A tiny random Qwen2 (transformers, save_pretrained): logits, per-token logprobs and the gradient of
   every parameter under a PPO loss, from nn-cuda-parity in f32 and bf16, against PyTorch in fp32 (TF32
   off, eager attention). f32 must match to fp32 rounding; bf16 must be within a small factor of
   PyTorch's own bf16 (autocast-free bf16 model) error against the same fp32 reference.
2. Byte-level BPE tokenizers trained here with the tokenizers package (Qwen2's regex + ByteLevel, and
   GPT-2's ByteLevel) on this repository's text: nn-cuda-tokenize's ids equal tokenizers' on held-out
   code and prose (plus non-ASCII lines), and decode(encode(x)) == x.
Exit 0 when everything is inside its bound, 1 otherwise; a table of the numbers on stdout."""
import argparse
import glob
import json
import os
import subprocess
import sys
import unicodedata

import torch
from safetensors.torch import load_file

ap = argparse.ArgumentParser()
ap.add_argument("--bin", required=True)
ap.add_argument("--src", required=True)
ap.add_argument("--work", required=True)
args = ap.parse_args()
failures = []


def nmse(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    den = (b * b).sum().item()
    return ((a - b) ** 2).sum().item() / (den if den > 0 else 1.0)


def check(name, value, bound):
    ok = value <= bound
    print(f"{'ok  ' if ok else 'FAIL'} {name:58s} {value:.3e}  (bound {bound:.1e})")
    if not ok:
        failures.append(name)


# ---------------------------------------------------------------- model parity
def model_parity(hidden_size, intermediate_size):
    """Four heads, two KV heads: head_dim 32 runs the FMA attention kernels in bf16, head_dim 64 the
    tensor-core ones."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    print(f"---- tiny Qwen2, hidden {hidden_size}, head_dim {hidden_size // 4}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=256, hidden_size=hidden_size, intermediate_size=intermediate_size, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu")
    model = Qwen2ForCausalLM(cfg).float()
    # non-trivial norms and biases, so their gradients are tested too
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or "bias" in n:
                p.add_(0.1 * torch.randn_like(p))
    ckpt = os.path.join(args.work, f"tiny-qwen2-{hidden_size}")
    model.save_pretrained(ckpt, safe_serialization=True)
    # The native loader reads rope_theta at the top level (transformers 5 writes rope_parameters).
    with open(os.path.join(ckpt, "config.json")) as f:
        cj = json.load(f)
    theta = getattr(model.config, "rope_theta", None)
    if theta is None:
        theta = (cj.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    rp = cj.pop("rope_parameters", None)
    if rp and rp.get("rope_type", "default") != "default":
        raise SystemExit("unexpected rope type in the tiny config")
    if cj.get("rope_scaling") and cj["rope_scaling"].get("rope_type", "default") == "default":
        cj.pop("rope_scaling")
    cj["rope_theta"] = theta
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)

    T = 200
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (T,), generator=g)
    temperature, ent_coef = 1.0, 0.01
    adv = torch.randn(T, generator=g)
    mask = (torch.rand(T, generator=g) < 0.7).float()
    mask[-1] = 0

    def ppo(m, dtype):
        m = m.to("cuda", dtype)
        try:
            m.set_attn_implementation("eager")
        except Exception:
            m.config._attn_implementation = "eager"
        m.zero_grad(set_to_none=True)
        ids = tokens.cuda()[None]
        logits = m(input_ids=ids).logits[0].float()
        logp_all = torch.log_softmax(logits / temperature, -1)
        tgt = torch.cat([tokens[1:], tokens[:1]]).cuda()
        lp = logp_all.gather(-1, tgt[:, None])[:, 0]
        ent = -(logp_all.exp() * logp_all).sum(-1)
        return m, logits, lp, ent

    ref_model, logits, lp, ent = ppo(model, torch.float32)
    old = (lp.detach() + 0.3 * torch.randn(T, generator=g).cuda()).float()
    inputs = {"tokens": tokens.tolist(), "old_logprob": old.tolist(), "advantages": adv.tolist(),
              "mask": mask.tolist(), "temperature": temperature, "entropy_coef": ent_coef}

    def loss_of(lp, ent):
        m = mask.cuda()
        r = torch.exp(torch.clamp(lp - old, -20, 20))
        a = adv.cuda()
        pg = torch.maximum(-a * r, -a * torch.clamp(r, 1 - 0.2, 1 + 0.28))
        return (pg * m).sum() / m.sum() - ent_coef * (ent * m).sum() / m.sum()

    loss_of(lp, ent).backward()
    ref = {"logits": logits.detach(), "logprob": lp.detach(), "entropy": ent.detach()}
    ref_grads = {n: p.grad.detach().float() for n, p in ref_model.named_parameters()}
    valid = mask.bool().cuda()  # logprob/entropy rows that count (the last has no target)
    valid[-1] = False

    # PyTorch in bf16: the yardstick for "within bf16 tolerance"
    import copy
    bf_model, bl, blp, bent = ppo(copy.deepcopy(model).float(), torch.bfloat16)
    loss_of(blp, bent).backward()
    torch_bf16 = {"logits": nmse(bl, ref["logits"]), "logprob": nmse(blp[valid], ref["logprob"][valid]),
                  "grads": nmse(torch.cat([p.grad.float().flatten() for _, p in bf_model.named_parameters()]),
                                torch.cat([ref_grads[n].flatten() for n, _ in bf_model.named_parameters()]))}
    print(f"PyTorch bf16 vs fp32: logits {torch_bf16['logits']:.3e}, logprob {torch_bf16['logprob']:.3e}, "
          f"grads {torch_bf16['grads']:.3e}")

    inp = os.path.join(args.work, "inputs.json")
    with open(inp, "w") as f:
        json.dump(inputs, f)
    for dtype in ["f32", "bf16"]:
        for ckpt_flag in ([False, True] if dtype == "bf16" else [False]):
            inputs["checkpointing"] = ckpt_flag
            with open(inp, "w") as f:
                json.dump(inputs, f)
            out = os.path.join(args.work, f"native-{dtype}.safetensors")
            subprocess.run([os.path.join(args.bin, "nn-cuda-parity"), ckpt, inp, dtype, out], check=True)
            got = load_file(out, device="cuda")
            tag = f"D={hidden_size // 4} native {dtype}{' +checkpointing' if ckpt_flag else ''} vs torch fp32"
            names = [n for n, _ in ref_model.named_parameters()]
            g_all = torch.cat([got["grad." + n].flatten() for n in names])
            r_all = torch.cat([ref_grads[n].flatten() for n in names])
            e_logits = nmse(got["logits"], ref["logits"])
            e_lp = nmse(got["logprob"][valid], ref["logprob"][valid])
            e_ent = nmse(got["entropy"][valid], ref["entropy"][valid])
            e_grads = nmse(g_all, r_all)
            worst = max(names, key=lambda n: nmse(got["grad." + n], ref_grads[n]))
            print(f"     {tag}: worst tensor {worst} {nmse(got['grad.' + worst], ref_grads[worst]):.3e}")
            if dtype == "f32":
                check(f"{tag}: logits", e_logits, 1e-9)
                check(f"{tag}: logprobs", e_lp, 1e-9)
                check(f"{tag}: entropies", e_ent, 1e-9)
                check(f"{tag}: all gradients", e_grads, 1e-7)
                check(f"{tag}: worst tensor's gradient", nmse(got["grad." + worst], ref_grads[worst]), 1e-5)
            else:
                # within 4x PyTorch bf16's own error, with a floor for when PyTorch is lucky
                check(f"{tag}: logits", e_logits, max(4 * torch_bf16["logits"], 1e-5))
                check(f"{tag}: logprobs", e_lp, max(4 * torch_bf16["logprob"], 1e-5))
                check(f"{tag}: all gradients", e_grads, max(4 * torch_bf16["grads"], 1e-4))


# ---------------------------------------------------------------- tokenizer parity
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def tokenizer_parity():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    files = sorted(glob.glob(os.path.join(args.src, "libcommon/**/*.*pp"), recursive=True) +
                   glob.glob(os.path.join(args.src, "tools/**/*.*pp"), recursive=True) +
                   glob.glob(os.path.join(args.src, "**/*.py"), recursive=True) +
                   glob.glob(os.path.join(args.src, "**/*.md"), recursive=True) +
                   glob.glob(os.path.join(args.src, "man/*"), recursive=True))
    texts = []
    for p in files:
        try:
            with open(p, encoding="utf-8") as f:
                texts.append(f.read())
        except (UnicodeDecodeError, IsADirectoryError):
            pass
    train, held = texts[::2], texts[1::2]
    extra = ["Ünïcödé naïve café — “quotes” ½ ²³ ٣٤٥ Ⅳ", "中文的句子，還有標點。日本語のテキスト", "emoji 😀👍🏽 mixed",
             "I'LL say it's 1234567 dollars, they'RE ok", "tabs\tand\r\nwindows\r\n\r\n   lines   ",
             "def f(x):\n    return x**2  # comment\n\n\n", "__global__ void k(float* __restrict__ y) { y[threadIdx.x] += 1e-3f; }",
             "   leading", "trailing   ", "\n", " ", "a  b   c\n  d", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]
    held_lines = []
    for t in held:
        held_lines += [t[i:i + 400] for i in range(0, min(len(t), 4000), 400)]
    held_lines += extra
    nfc = [s for s in held_lines if unicodedata.normalize("NFC", s) == s]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for kind in ["qwen2", "gpt2"]:
        tok = Tokenizer(models.BPE())
        if kind == "qwen2":
            tok.normalizer = normalizers.NFC()
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        else:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(train, trainer)
        path = os.path.join(args.work, f"tokenizer-{kind}.json")
        tok.save(path)
        feed = "".join(json.dumps({"text": s}) + "\n" for s in nfc)
        res = subprocess.run([os.path.join(args.bin, "nn-cuda-tokenize"), path], input=feed, capture_output=True,
                             text=True, check=True)
        rows = [json.loads(l) for l in res.stdout.splitlines()]
        mismatch, roundtrip_bad, n_tokens = 0, 0, 0
        for s, row in zip(nfc, rows):
            want = tok.encode(s, add_special_tokens=False).ids
            n_tokens += len(want)
            if row["ids"] != want:
                if mismatch < 3:
                    print(f"     {kind} mismatch on {s[:60]!r}: native {row['ids'][:20]} hf {want[:20]}")
                mismatch += 1
            roundtrip_bad += 0 if row["roundtrip"] else 1
        print(f"     tokenizer {kind}: {len(nfc)} texts ({len(held_lines) - len(nfc)} not NFC skipped), "
              f"{n_tokens} tokens, vocab {tok.get_vocab_size()}")
        check(f"tokenizer {kind}: texts whose ids differ from tokenizers'", mismatch, 0)
        check(f"tokenizer {kind}: texts where decode(encode(x)) != x", roundtrip_bad, 0)


try:
    model_parity(128, 352)
    model_parity(256, 704)
except Exception as e:  # a crash is a failure with its reason, and the tokenizer part still runs
    import traceback
    traceback.print_exc()
    failures.append(f"model parity: {e}")
try:
    tokenizer_parity()
except Exception as e:
    import traceback
    traceback.print_exc()
    failures.append(f"tokenizer parity: {e}")
print("hf_parity:", "PASS" if not failures else "FAIL: " + "; ".join(failures))
sys.exit(1 if failures else 0)
