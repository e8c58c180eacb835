"""LoRA adapters in PEFT's format against the native model (issue 34).

Cases, each a base made by `ppo-step init` (random weights):
  qwen2 base  + the policy and critic adapters one GAE step of `ppo-step --lora-rank 4` writes (with --merge)
  llama base (attention_bias false) + the policy adapter of `ppo-step --lora-rank 4 --lora-alpha 12
              --lora-targets q_proj,k_proj,o_proj,up_proj,down_proj` (scaling 3, a subset of modules)
  foreign adapters, written by PEFT itself (--mode peft) or by this file as PEFT writes them (--mode torch):
              a llama policy (r 4, alpha 16, q_proj/v_proj/down_proj, random A and B) and a qwen2 critic
              (TOKEN_CLS, modules_to_save ["classifier", "score"] as PeftModelForTokenClassification saves it)

--mode torch (CPU, torch without transformers; label cli): an independent reader of the files computes
  the model in float64 with PEFT's rules (a module is adapted when its name ends with a target; y = W x +
  b + (lora_alpha / r) B A x; a critic's `score` from modules_to_save replaces the LM head), and checks
    - the adapter's tensors are exactly the keys and shapes PEFT implies for the base and the config
    - nn-lora-parity's CPU path (unmerged adapter) and merged path (what the samplers run) are within
      1e-4 (max abs) of it; the adapter moves the outputs by >= 1e-2, and removing any one site moves
      them by more than 10x the tolerance (so no site can be skipped, mis-keyed or mis-scaled unseen)
    - ppo-step --merge's checkpoint is W + (alpha/r) B A within 1e-6, every other tensor the base's
--mode peft (device: transformers, peft, CUDA; label gpu) does all of that, and with transformers + peft:
    - AutoModelForCausalLM / AutoModelForTokenClassification(num_labels=1) + PeftModel.from_pretrained load
      every adapter with no warning about missing, unexpected or newly initialised keys; PEFT's own
      state dict of the loaded model equals the adapter file key for key and bit for bit, and loading it
      again reports no unexpected key
    - PEFT's fp32 logits (values for a critic) equal the float64 reference (checks the reference) and
      nn-lora-parity's cpu, merged and CUDA f32 within 1e-4; CUDA bf16 within 4x PyTorch bf16's own error
    - merge_and_unload() equals ppo-step --merge's checkpoint within 1e-6
Exit 0 when everything holds, 1 otherwise; one line per check on stdout."""
import argparse
import json
import os
import random
import struct
import subprocess
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--bin", required=True)
ap.add_argument("--work", required=True)
ap.add_argument("--mode", choices=["torch", "peft"], required=True)
args = ap.parse_args()
PEFT = args.mode == "peft"
failures = []
TOL = 1e-4


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'  ' + detail if detail else ''}")
    if not ok:
        failures.append(name)
    return ok


def bound(name, value, limit):
    return check(name, value <= limit, f"{value:.3e} (bound {limit:.1e})")


def at_least(name, value, limit):
    return check(name, value >= limit, f"{value:.3e} (at least {limit:.1e})")


# ---------------------------------------------------------------- safetensors without the package
DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        dt, size = DTYPES[t["dtype"]]
        a, b = t["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        x = torch.frombuffer(buf, dtype=dt) if b > a else torch.zeros(0, dtype=dt)
        out[name] = x.reshape(t["shape"]).clone()
    return out


def write_st(path, tensors):
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = struct.pack(f"<{t.numel()}f", *t.flatten().tolist())
        hdr[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_dir(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(read_st(os.path.join(d, f)))
    return out


# ---------------------------------------------------------------- the tools
def run(cmd, stdin=None, stdout=None):
    r = subprocess.run(cmd, stdin=stdin, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


PPO = os.path.join(args.bin, "ppo-step")


def make_base(name, cfg, seed):
    d = os.path.join(args.work, name)
    path = os.path.join(args.work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    run([PPO, "init", "--model-config", path, "--out", d, "--seed", str(seed), "--std", "0.05", "-q"])
    return d


def train_step(base, out, extra, seed):
    """One GAE step with LoRA on episodes the base sampled (rewards from the first sampled token); a
    large lr, so every B moves well off zero."""
    prompts = os.path.join(args.work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for i, p in enumerate([[1], [2, 7], [3, 9, 11], [5]]):
            f.write(json.dumps({"task_id": f"t{i}", "prompt_token_ids": p}) + "\n")
    with open(prompts) as f:
        sampled = run([PPO, "sample", "--policy", base, "-n", "8", "--max-new-tokens", "6", "--seed", str(seed), "-q"], stdin=f)
    eps = os.path.join(out + ".episodes.jsonl")
    with open(eps, "w") as f:
        for line in sampled.splitlines():
            r = json.loads(line)
            first = r["episode"]["turns"][1]["token_ids"][0]
            r["reward"] = {"value": [-1, 1, 2, 3][first % 4], "scheme": "milestone", "reason": "toy"}
            f.write(json.dumps(r) + "\n")
    yaml = os.path.join(args.work, "lora.yaml")
    with open(yaml, "w") as f:
        f.write("algorithm:\n  estimator: gae\nactor:\n  lr: 5.0e-2\n  epochs: 2\ncritic:\n  lr: 5.0e-2\n  epochs: 2\n")
    with open(eps) as f:
        run([PPO, "--mode", "ppo", "--policy", base, "--critic", base, "--out", out, "--merge", out + ".merged",
             "--config", yaml, "--seed", str(seed), "--no-store", "-q"] + extra, stdin=f, stdout=subprocess.DEVNULL)
    return out, os.path.join(out, "critic"), out + ".merged"


SEQS = []
rng = random.Random(7)
for T in (5, 17, 24):
    SEQS.append([rng.randrange(64) for _ in range(T)])


def native(adapter, mode):
    inp = os.path.join(args.work, "seqs.json")
    with open(inp, "w") as f:
        json.dump({"sequences": SEQS}, f)
    out = os.path.join(args.work, f"native-{mode}.safetensors")
    run([os.path.join(args.bin, "nn-lora-parity"), adapter, inp, mode, out])
    got = read_st(out)
    return [got[f"out.{i}"].double() for i in range(len(SEQS))]


# ---------------------------------------------------------------- PEFT's rules, from the files
def adapter_files(adapter):
    cfg = json.load(open(os.path.join(adapter, "adapter_config.json")))
    w = read_st(os.path.join(adapter, "adapter_model.safetensors"))
    base = cfg["base_model_name_or_path"]
    if not os.path.isabs(base):
        base = os.path.join(adapter, base)
    return cfg, w, base


def expected_keys(cfg, base_cfg, base_w):
    """The adapter tensors PEFT creates for this base and config: lora_A/lora_B of every nn.Linear whose
    module name equals a target or ends with "." + target ("all-linear": every linear but the output
    layer); a TOKEN_CLS adapter's modules_to_save `score` saved whole (weight and bias) without
    PEFT's wrapper prefix."""
    assert cfg["peft_type"] == "LORA", cfg["peft_type"]
    assert not cfg.get("use_rslora") and not cfg.get("use_dora") and cfg.get("bias", "none") == "none", cfg
    assert not cfg.get("layers_to_transform") and not cfg.get("rank_pattern") and not cfg.get("alpha_pattern"), cfg
    r, tm = cfg["r"], cfg["target_modules"]
    linears = [n[:-len(".weight")] for n, t in base_w.items()
               if n.endswith(".weight") and t.dim() == 2 and n.startswith("model.layers.")]
    want = {}
    for m in linears:
        hit = m.split(".")[-1] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj") \
            if tm == "all-linear" else any(m == t or m.endswith("." + t) for t in tm)
        if hit:
            out_dim, in_dim = base_w[m + ".weight"].shape
            want[f"base_model.model.{m}.lora_A.weight"] = [r, in_dim]
            want[f"base_model.model.{m}.lora_B.weight"] = [out_dim, r]
    if cfg.get("task_type") == "TOKEN_CLS":
        assert "score" in (cfg.get("modules_to_save") or []), cfg.get("modules_to_save")
        want["base_model.model.score.weight"] = [1, base_cfg["hidden_size"]]
        want["base_model.model.score.bias"] = [1]
    return want


def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def ref_forward(base_cfg, W, tokens, lora, scaling, score=None):
    """Qwen2 / Llama in float64 as transformers computes it, with y += scaling * B A x on `lora`'s modules;
    logits [T, V], or values [T] with a `score` (weight, bias)."""
    C, H = base_cfg["hidden_size"], base_cfg["num_attention_heads"]
    KV = base_cfg.get("num_key_value_heads", H)
    D = base_cfg.get("head_dim") or C // H
    eps, theta = base_cfg.get("rms_norm_eps", 1e-6), base_cfg.get("rope_theta", 10000.0)
    T = len(tokens)

    def lin(x, m):
        y = x @ W[m + ".weight"].T
        if m + ".bias" in W:
            y = y + W[m + ".bias"]
        if m in lora:
            A, B = lora[m]
            y = y + scaling * ((x @ A.T) @ B.T)
        return y

    x = W["model.embed_tokens.weight"][torch.tensor(tokens)]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv[None]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for l in range(base_cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").view(T, H, D).transpose(0, 1)
        k = lin(h, p + "self_attn.k_proj").view(T, KV, D).transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").view(T, KV, D).transpose(0, 1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + mask, -1) @ v
        x = x + lin(att.transpose(0, 1).reshape(T, H * D), p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(torch.nn.functional.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    xf = rms(x, W["model.norm.weight"], eps)
    if score is not None:
        return (xf @ score[0].T + score[1])[:, 0]
    head = W["model.embed_tokens.weight"] if base_cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return xf @ head.T


def max_abs(a, b):
    return max((x.double() - y.double()).abs().max().item() for x, y in zip(a, b))


def nmse(a, b):
    a = torch.cat([x.double().flatten() for x in a])
    b = torch.cat([x.double().flatten() for x in b])
    return ((a - b) ** 2).sum().item() / max((b * b).sum().item(), 1e-30)


def reference(tag, adapter):
    """Format checks and the float64 reference of one adapter folder; returns what the PEFT part needs."""
    cfg, aw, base = adapter_files(adapter)
    base_cfg = json.load(open(os.path.join(base, "config.json")))
    W = {k: v.double() for k, v in read_dir(base).items()}
    want = expected_keys(cfg, base_cfg, W)
    got = {k: list(v.shape) for k, v in aw.items()}
    check(f"{tag}: adapter keys are PEFT's for this base and target_modules ({len(want)} tensors)",
          got == want, "" if got == want else f"missing {sorted(set(want) - set(got))[:4]} unexpected "
          f"{sorted(set(got) - set(want))[:4]} shapes {[(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]}")
    scaling = cfg["lora_alpha"] / cfg["r"]
    lora = {}
    for k in aw:
        if k.endswith(".lora_A.weight"):
            m = k[len("base_model.model."):-len(".lora_A.weight")]
            lora[m] = (aw[k].double(), aw[k.replace("lora_A", "lora_B")].double())
    critic = cfg.get("task_type") == "TOKEN_CLS"
    score = (aw["base_model.model.score.weight"].double(), aw["base_model.model.score.bias"].double()) if critic else None
    ref = [ref_forward(base_cfg, W, s, lora, scaling, score) for s in SEQS]
    plain = [ref_forward(base_cfg, W, s, {}, scaling, score) for s in SEQS]
    at_least(f"{tag}: the adapter moves the float64 {'values' if critic else 'logits'} (max abs)", max_abs(ref, plain), 1e-2)
    weakest = min(((max_abs([ref_forward(base_cfg, W, SEQS[2], {k: v for k, v in lora.items() if k != m}, scaling, score)],
                            [ref[2]]), m) for m in lora))
    at_least(f"{tag}: dropping any one of {len(lora)} sites moves them (weakest {weakest[1]})", weakest[0], 10 * TOL)
    for mode in ("cpu", "merged"):
        bound(f"{tag}: nn-lora-parity {mode} vs float64 PEFT rules (max abs)", max_abs(native(adapter, mode), ref), TOL)
    return {"cfg": cfg, "aw": aw, "base": base, "ref": ref, "W": W, "scaling": scaling, "lora": lora, "critic": critic}


def merged_check(tag, info, merged_dir):
    M = read_dir(merged_dir)
    W, lora, s = info["W"], info["lora"], info["scaling"]
    check(f"{tag}: --merge has the base's tensors", set(M) == set(W), str(sorted(set(M) ^ set(W))[:4]))
    worst, same = 0.0, True
    for n, w in W.items():
        m = n[:-len(".weight")]
        if m in lora:
            A, B = lora[m]
            worst = max(worst, (M[n].double() - (w + s * B @ A)).abs().max().item())
        else:
            same = same and torch.equal(M[n].double(), w)
    bound(f"{tag}: --merge equals W + (alpha/r) B A (max abs)", worst, 1e-6)
    check(f"{tag}: --merge leaves every tensor without an adapter as the base's", same)
    return M


# ---------------------------------------------------------------- foreign adapters written here (torch mode)
def write_foreign(base, out, critic):
    """A policy (llama: r 4, alpha 16, q_proj/v_proj/down_proj) or a critic (qwen2: r 2, alpha 4, every
    linear, TOKEN_CLS) as PEFT's save_pretrained writes it, with random A and B."""
    W = read_dir(base)
    g = torch.Generator().manual_seed(11 if critic else 12)
    r, alpha = (2, 4) if critic else (4, 16)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] if critic else ["down_proj", "q_proj", "v_proj"]
    tensors = {}
    for n, t in W.items():
        m = n[:-len(".weight")]
        if n.endswith(".weight") and t.dim() == 2 and m.split(".")[-1] in targets and m.startswith("model.layers."):
            out_dim, in_dim = t.shape
            tensors[f"base_model.model.{m}.lora_A.weight"] = (torch.rand(r, in_dim, generator=g) * 2 - 1) / in_dim ** 0.5
            tensors[f"base_model.model.{m}.lora_B.weight"] = torch.randn(out_dim, r, generator=g) * 0.1
    cfg = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": base, "bias": "none",
           "corda_config": None, "eva_config": None, "exclude_modules": None, "fan_in_fan_out": False,
           "inference_mode": True, "init_lora_weights": True, "layer_replication": None, "layers_pattern": None,
           "layers_to_transform": None, "loftq_config": {}, "lora_alpha": alpha, "lora_bias": False,
           "lora_dropout": 0.0, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
           "peft_type": "LORA", "r": r, "rank_pattern": {}, "revision": None, "target_modules": targets,
           "task_type": "CAUSAL_LM", "trainable_token_indices": None, "use_dora": False, "use_rslora": False}
    if critic:
        C = W["model.norm.weight"].shape[0]
        tensors["base_model.model.score.weight"] = torch.randn(1, C, generator=g) * 0.3
        tensors["base_model.model.score.bias"] = torch.tensor([0.25])
        cfg["task_type"], cfg["modules_to_save"] = "TOKEN_CLS", ["classifier", "score"]
    os.makedirs(out, exist_ok=True)
    write_st(os.path.join(out, "adapter_model.safetensors"), tensors)
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return out


# ---------------------------------------------------------------- transformers + peft (device)
def hf_kwargs():
    import transformers
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    return {key: torch.float32, "attn_implementation": "eager"}


def hf_base(base, critic):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification
    if critic:
        return AutoModelForTokenClassification.from_pretrained(base, num_labels=1, **hf_kwargs()).eval()
    return AutoModelForCausalLM.from_pretrained(base, **hf_kwargs()).eval()


class Captured:
    """Python warnings and transformers/peft log records while a block runs."""

    def __enter__(self):
        import logging
        import warnings
        self.messages = []
        self._w = warnings.catch_warnings(record=True)
        self._rec = self._w.__enter__()
        warnings.simplefilter("always")
        cap = self

        class H(logging.Handler):
            def emit(self, record):
                cap.messages.append(record.getMessage())

        self._h = H(level=logging.WARNING)
        self._loggers = [logging.getLogger(n) for n in ("transformers", "peft")]
        for lg in self._loggers:
            lg.addHandler(self._h)
        return self

    def __exit__(self, *exc):
        for lg in self._loggers:
            lg.removeHandler(self._h)
        self.messages += [str(w.message) for w in self._rec]
        self._w.__exit__(*exc)
        return False


KEY_WORDS = ("missing", "unexpected", "not used", "newly initialized", "not initialized", "mismatch", "were not")


def peft_load(tag, info, adapter):
    from peft import PeftModel
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    critic = info["critic"]
    base_model = hf_base(info["base"], critic)
    # transformers read our base checkpoint whole: its state dict is the file's, bit for bit
    sd = base_model.state_dict()
    theirs = {k: v for k, v in sd.items() if not (critic and k.startswith("score."))}
    ours = {k: v for k, v in info["W"].items() if not (critic and k == "lm_head.weight")}
    check(f"{tag}: transformers loads the base checkpoint exactly", set(theirs) == set(ours) and
          all(torch.equal(theirs[k].double(), ours[k]) for k in ours), str(sorted(set(theirs) ^ set(ours))[:4]))
    with Captured() as cap:
        model = PeftModel.from_pretrained(base_model, adapter).eval()
    bad = [m for m in cap.messages if any(w in m.lower() for w in KEY_WORDS)]
    for m in cap.messages:
        print(f"     {tag}: load said: {m[:300]}")
    check(f"{tag}: PeftModel.from_pretrained warns of no missing/unexpected key", not bad, "; ".join(bad)[:500])
    mine = info["aw"]
    theirs = get_peft_model_state_dict(model)
    check(f"{tag}: PEFT's state dict of the loaded model is the adapter file (keys and bits)",
          set(theirs) == set(mine) and all(torch.equal(theirs[k].float().cpu(), mine[k].float()) for k in mine),
          f"only PEFT {sorted(set(theirs) - set(mine))[:4]}, only ours {sorted(set(mine) - set(theirs))[:4]}")
    res = set_peft_model_state_dict(model, {k: v.clone() for k, v in mine.items()})
    missing = [k for k in res.missing_keys if "lora_" in k or "modules_to_save" in k]
    check(f"{tag}: loading the file again: no unexpected key, no missing adapter key",
          not res.unexpected_keys and not missing, f"unexpected {res.unexpected_keys[:4]} missing {missing[:4]}")
    return model


def peft_outputs(model, critic, device="cpu", dtype=torch.float32):
    model = model.to(device, dtype)
    outs = []
    with torch.no_grad():
        for s in SEQS:
            o = model(input_ids=torch.tensor([s], device=device)).logits[0].float().cpu()
            outs.append(o[:, 0] if critic else o)
    return outs


def peft_compare(tag, info, model):
    import copy
    critic = info["critic"]
    what = "values" if critic else "logits"
    peft32 = peft_outputs(model, critic)
    bound(f"{tag}: PEFT fp32 {what} vs the float64 reference (max abs)", max_abs(peft32, info["ref"]), TOL)
    adapter = info["adapter"]
    for mode in ("cpu", "merged", "f32"):
        bound(f"{tag}: nn-lora-parity {mode} vs PEFT fp32 {what} (max abs)", max_abs(native(adapter, mode), peft32), TOL)
    torch_bf16 = nmse(peft_outputs(copy.deepcopy(model), critic, "cuda", torch.bfloat16), peft32)
    bound(f"{tag}: nn-lora-parity bf16 (CUDA) vs PEFT fp32 {what} (nmse; PyTorch bf16 {torch_bf16:.2e})",
          nmse(native(adapter, "bf16"), peft32), max(4 * torch_bf16, 1e-5))


def peft_merge(tag, model, merged):
    m = model.merge_and_unload()
    sd = {k: v.detach().double().cpu() for k, v in m.state_dict().items()}
    check(f"{tag}: merge_and_unload() has --merge's tensors", set(sd) == set(merged), str(sorted(set(sd) ^ set(merged))[:4]))
    bound(f"{tag}: merge_and_unload() vs ppo-step --merge (max abs)",
          max((sd[k] - merged[k].double()).abs().max().item() for k in merged if k in sd), 1e-6)


def peft_write_foreign(base, out, critic):
    """The same foreign adapters as write_foreign, written by PEFT's save_pretrained."""
    from peft import LoraConfig, get_peft_model
    model = hf_base(base, critic)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] if critic else ["q_proj", "v_proj", "down_proj"]
    lc = LoraConfig(r=2 if critic else 4, lora_alpha=4 if critic else 16, target_modules=targets, lora_dropout=0.0,
                    task_type="TOKEN_CLS" if critic else "CAUSAL_LM")
    pm = get_peft_model(model, lc)
    g = torch.Generator().manual_seed(13)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif "modules_to_save" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    pm.save_pretrained(out)
    return out


# ---------------------------------------------------------------- the cases
def case(tag, adapter, merged=None):
    try:
        info = reference(tag, adapter)
        info["adapter"] = adapter
        M = merged_check(tag, info, merged) if merged else None
        if PEFT:
            model = peft_load(tag, info, adapter)
            peft_compare(tag, info, model)
            if M is not None:
                peft_merge(tag, model, M)
    except Exception as e:  # a crash is a failure with its reason; the other cases still run
        import traceback
        traceback.print_exc()
        check(f"{tag}: ran", False, f"{type(e).__name__}: {e}"[:800])


SHAPE = {"vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": False}
try:
    qwen = make_base("qwen2", dict(SHAPE, model_type="qwen2"), 3)
    llama = make_base("llama", dict(SHAPE, model_type="llama", attention_bias=False), 4)
    q_pol, q_crit, q_merged = train_step(qwen, os.path.join(args.work, "qwen2-step"), ["--lora-rank", "4"], 1)
    l_pol, _, l_merged = train_step(llama, os.path.join(args.work, "llama-step"),
                                    ["--lora-rank", "4", "--lora-alpha", "12", "--lora-targets",
                                     "q_proj,k_proj,o_proj,up_proj,down_proj"], 2)
except Exception as e:
    check("making the bases and adapters with ppo-step", False, str(e)[:2000])
    print("lora_parity: FAIL")
    sys.exit(1)

case("qwen2 policy (ppo-step)", q_pol, q_merged)
case("qwen2 critic (ppo-step)", q_crit)
case("llama policy (ppo-step, alpha 12, 5 targets)", l_pol, l_merged)
writer = peft_write_foreign if PEFT else write_foreign
for tag, base, critic in (("llama policy (foreign, alpha 16, q/v/down)", llama, False), ("qwen2 critic (foreign)", qwen, True)):
    out = os.path.join(args.work, "foreign-" + ("critic" if critic else "policy"))
    try:
        writer(base, out, critic)
    except Exception as e:
        import traceback
        traceback.print_exc()
        check(f"{tag}: written by {'PEFT' if PEFT else 'this file'}", False, str(e)[:800])
        continue
    case(tag + (" by PEFT" if PEFT else ""), out)

# A critic's modules_to_save naming a module the native critic does not save (PEFT would keep lm_head
# trainable and save it) is refused, naming the key, not run without it.
try:
    bad = os.path.join(args.work, "foreign-critic-lm_head")
    write_foreign(qwen, bad, True)
    cj = json.load(open(os.path.join(bad, "adapter_config.json")))
    cj["modules_to_save"] = ["score", "lm_head"]
    with open(os.path.join(bad, "adapter_config.json"), "w") as f:
        json.dump(cj, f)
    r = subprocess.run([os.path.join(args.bin, "nn-lora-parity"), bad, os.path.join(args.work, "seqs.json"), "cpu",
                        os.path.join(args.work, "bad.safetensors")], capture_output=True, text=True)
    check("modules_to_save [score, lm_head] is refused (exit 2, naming modules_to_save)",
          r.returncode == 2 and "modules_to_save" in r.stderr, f"exit {r.returncode}: {r.stderr.strip()[:300]}")
except Exception as e:
    check("the modules_to_save refusal ran", False, str(e)[:500])

print(f"lora_parity ({args.mode}):", "PASS" if not failures else f"FAIL ({len(failures)}): " + "; ".join(failures))
sys.exit(1 if failures else 0)
