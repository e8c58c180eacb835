"""Synthetic multi-turn episodes for ppo-step's GPU tests: user prompt, assistant turn with recorded
logprobs, a tool result (masked out of the loss), a second assistant turn; rewards from the first
response token so a critic has something to learn. One long episode crosses several attention tiles.
usage: gpu_episodes.py VOCAB SEED [N] > episodes.jsonl"""
import json
import random
import sys

vocab, seed = int(sys.argv[1]), int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
rng = random.Random(seed)
for i in range(n):
    long = i == 0
    toks = lambda k: [rng.randrange(vocab) for _ in range(k)]
    a1 = toks(700 if long else rng.randrange(20, 60))
    a2 = toks(rng.randrange(5, 30))
    turns = [{"role": "user", "token_ids": toks(rng.randrange(10, 40))},
             {"role": "assistant", "token_ids": a1, "logprobs": [-4.6 + rng.gauss(0, 0.3) for _ in a1]},
             {"role": "tool", "token_ids": toks(rng.randrange(5, 20))},
             {"role": "assistant", "token_ids": a2, "logprobs": [-4.6 + rng.gauss(0, 0.3) for _ in a2]}]
    reward = [-1.0, 0.0, 1.0, 2.0][a1[0] % 4]
    print(json.dumps({"task_id": "t%d" % (i // 2), "episode_id": "e%d" % i,
                      "episode": {"turns": turns}, "reward": {"value": reward, "scheme": "milestone"}}))
