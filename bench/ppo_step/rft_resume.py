#!/usr/bin/env python3
"""Does an RFT step that resumes the warm-up's AdamW moments unlearn a memorized episode? (a
benchmark for the note, not a test; the question is session 7's: the demo's first RFT iteration after
the warm-up took the policy from 4 of 8 tasks passing to 0)

One demo episode, shortened (short system prompt, one tool schema, tool output cut to 80 chars), is
memorized by a warm-up RFT (--warmup-epochs at lr 2e-3, as datasets/demo/loop/warmup-gpu.yaml). Then
each assistant turn is re-sampled from the warmed-up policy with the memorized context before it
(ppo-step sample, --temperature T per case: 0 gives the policy's own greedy text, higher values give
text that drifts from the memorized one), and an RFT step as rft-gpu.yaml (100 epochs, lr 1e-3) trains
on those samples twice: resuming the warm-up's optimizer moments (what ppo-step does) and with fresh
ones. Printed per case: the samples' NLL before and after the step, the memorized episode's NLL after
it, and how many of the memorized turns' tokens greedy decoding still reproduces (before the first
difference).

    python3 bench/ppo_step/rft_resume.py --bin build/bin --src . --work /tmp/rft_resume
    (CPU, 2 cores: 15 min, 11 of them the warm-up; results in bench/ppo_step/RESULTS.md)
"""
import argparse, json, os, shutil, subprocess, sys


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--src", default=".")
    ap.add_argument("--work", default="/tmp/rft_resume")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--warmup-epochs", type=int, default=800)
    ap.add_argument("--rft-epochs", type=int, default=100)
    ap.add_argument("--temperatures", default="0,1.5")
    a = ap.parse_args()
    ppo = os.path.join(a.bin, "ppo-step")
    os.makedirs(a.work, exist_ok=True)
    W = lambda *p: os.path.join(a.work, *p)
    env = dict(os.environ)
    if a.device == "cpu":
        env["CA_FORCE_CPU"] = "1"
    train_dev = ["--device", a.device]  # training and sampling (bf16 on cuda, f32 on the CPU)

    def yaml(name, lr, epochs):
        open(W(name), "w").write("rft:\n  lr: %g\n  epochs: %d\n  weight_decay: 0.0\n  grad_clip: 1.0\n" % (lr, epochs))
        return W(name)

    def rft(cfg, policy, out, records):
        shutil.rmtree(out, ignore_errors=True)
        m = run([ppo, "--mode", "rft", "--config", cfg, "--policy", policy, "--out", out, "--no-store", "-q",
                 "-i", records, "--seed", "1"] + train_dev, env=env)
        return json.loads(m.splitlines()[-1])

    def nll(policy, records):  # an rft step with a learning rate of zero in effect: its first loss
        return rft(yaml("eval.yaml", 1e-30, 1), policy, W("eval-out"), records)["sft_loss_first"]

    # The episode: the replay policy's third demo task, shortened so the CPU can memorize it.
    demo = os.path.join(a.src, "datasets/demo")
    tasks = [json.loads(l) for l in open(os.path.join(demo, "tasks.jsonl"))][2:3]
    open(W("task.jsonl"), "w").write(json.dumps(tasks[0]) + "\n")
    ep = run([os.path.join(a.bin, "agent-run"), "--policy", "replay:" + os.path.join(demo, "replay.jsonl"), "--tasks",
              W("task.jsonl"), "--no-store", "--max-turns", "20", "--seed", "1", "-q"],
             env=dict(env, CA_KERNEL_CHECK=os.path.join(a.src, "tests/agent-run/fake-kernel-check.sh"),
                      CA_KERNEL_PROF=os.path.join(a.src, "tests/agent-run/fake-kernel-prof.sh"), FAKE_SPEEDUP="1.5"))
    r = json.loads(ep.splitlines()[0])
    r["reward"] = {"value": 3, "scheme": "milestone", "reason": "memorized"}
    e = r["episode"]
    e["prompt"]["system"] = "You write CUDA."
    e["prompt"]["user"] = e["prompt"]["user"][:200]
    e["tools"] = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    for t in e["turns"]:
        for x in t.get("tool_results") or []:
            x["content"] = x["content"][:80]
    open(W("memorized.jsonl"), "w").write(json.dumps(r) + "\n")

    model = {"model_type": "qwen2", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 192,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": False}
    json.dump(model, open(W("model.json"), "w"))
    shutil.rmtree(W("p0"), ignore_errors=True)
    run([ppo, "init", "--model-config", W("model.json"), "--out", W("p0"), "--seed", "1", "-q"], env=env)
    shutil.copy(os.path.join(demo, "tokenizer.json"), W("p0"))
    tok = json.loads(run([ppo, "tokenize", "--policy", W("p0"), "--no-store", "-q", "-i", W("memorized.jsonl")], env=env))
    ids, mask = tok["training_tokens"]["ids"], tok["training_tokens"]["mask"]
    runs = []
    for i, m in enumerate(mask):
        if runs and runs[-1][0] == (m == 1):
            runs[-1][2] = i + 1
        else:
            runs.append([m == 1, i, i + 1])
    turns = [(b, e) for m, b, e in runs if m]
    print("episode: %d tokens, %d of them the model's in %d turns" % (len(ids), sum(mask), len(turns)))

    w = rft(yaml("warmup.yaml", 2e-3, a.warmup_epochs), W("p0"), W("warm"), W("memorized.jsonl"))
    print("warm-up: %d epochs, NLL per model token %.4g -> %.4g (%.0f s)" % (a.warmup_epochs, w["sft_loss_first"],
                                                                          w["sft_loss_last"], w["seconds"]))
    shutil.rmtree(W("warm-fresh"), ignore_errors=True)
    shutil.copytree(W("warm"), W("warm-fresh"))
    os.remove(W("warm-fresh", "trainer_state", "optimizer.safetensors"))

    def resample(policy, temperature, out):  # each turn re-sampled with the memorized context before it
        inp = "".join(json.dumps({"task_id": "t%d" % k, "prompt_token_ids": ids[:b]}) + "\n" for k, (b, e) in enumerate(turns))
        got = [json.loads(l) for l in run([ppo, "sample", "--policy", policy, "--temperature", str(temperature),
                                           "--max-new-tokens", str(max(e - b for b, e in turns) + 64), "--stop", "302", "300",
                                           "--seed", "1"] + train_dev, input=inp, env=env).splitlines()]
        same, rec_turns, prev = 0, [], 0
        for (b, e), g in zip(turns, got):
            comp = g["episode"]["turns"][1]["token_ids"]
            n = 0
            while n < min(len(comp), e - b) and comp[n] == ids[b + n]:
                n += 1
            same += n
            rec_turns += [{"role": "user", "token_ids": ids[prev:b]}, {"role": "assistant", "token_ids": comp}]
            prev = e
        if out:
            rec = {"task_id": "own", "episode_id": "own-%s" % temperature, "reward": {"value": 3},
                   "episode": {"turns": rec_turns}}
            open(out, "w").write(json.dumps(rec) + "\n")
        return same / sum(mask)

    step = yaml("rft.yaml", 1e-3, a.rft_epochs)
    for temperature in [float(x) for x in a.temperatures.split(",")]:
        own = W("own-%g.jsonl" % temperature)
        match = resample(W("warm"), temperature, own)
        print("samples at temperature %g: %.3f of the memorized tokens reproduced" % (temperature, match))
        for name, start in (("resumed moments", W("warm")), ("fresh moments", W("warm-fresh"))):
            out = W("rft-%g-%s" % (temperature, name.split()[0]))
            m = rft(step, start, out, own)
            print("  %-15s samples' NLL %.4g -> %.4g, grad norm %.3g; memorized NLL %.4g, greedy reproduces %.3f" % (
                name, m["sft_loss_first"], m["sft_loss_last"], m["grad_norm"]["actor"]["mean"]
                if isinstance(m["grad_norm"]["actor"], dict) else m["grad_norm"]["actor"],
                nll(out, W("memorized.jsonl")), resample(out, 0, None)))


if __name__ == "__main__":
    main()
