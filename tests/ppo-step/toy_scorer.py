#!/usr/bin/env python3
"""Scorer of the toy RL task: reward = fraction of the target pattern the assistant turn reproduces,
position by position (the response is compared with TARGET; missing tokens count as wrong).

usage: toy_scorer.py TARGET_IDS < episodes.jsonl > scored.jsonl     (TARGET_IDS like 1,2,3,4,5)
"""
import json
import sys

target = [int(t) for t in sys.argv[1].split(",")]
for line in sys.stdin:
    if not line.strip():
        continue
    rec = json.loads(line)
    turn = [t for t in rec["episode"]["turns"] if t["role"] == "assistant"][0]
    got = turn["token_ids"]
    rec["reward"] = sum(1 for i, t in enumerate(target) if i < len(got) and got[i] == t) / len(target)
    print(json.dumps(rec))
