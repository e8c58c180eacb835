#!/usr/bin/env python3
"""Independent reference for `ppo-step advantages`: GAE written as the closed-form sum over the model
tokens alone (tool tokens removed, then given the advantage of the next model token), and GRPO with
numpy's group statistics. Compares with the tool's output to a tolerance.

usage: advantages_reference.py gae|grpo INPUT TOOL_OUTPUT [--gamma G] [--lam L] [--whiten] [--tol T]
Exit 0 when every advantage and return matches, 1 otherwise (each mismatch printed).
"""
import argparse
import json
import sys

import numpy as np


def token_rewards(rec):
    mask = np.array(rec["response_mask"], dtype=float)
    if "token_rewards" in rec:
        return np.array(rec["token_rewards"], dtype=float)
    r = np.zeros_like(mask)
    r[np.nonzero(mask)[0][-1]] = rec["reward"]
    return r


def gae_reference(rec, gamma, lam):
    mask = np.array(rec["response_mask"], dtype=float)
    values = np.array(rec["values"], dtype=float)
    rewards = token_rewards(rec)
    idx = np.nonzero(mask)[0]            # positions of model tokens
    v = values[idx]
    r = rewards[idx]                     # rewards on tool tokens are not part of the model-token MDP
    v_next = np.append(v[1:], 0.0)       # the next model token's value, 0 after the last
    delta = r + gamma * v_next - v
    n = len(idx)
    adv_model = np.array([sum((gamma * lam) ** (j - i) * delta[j] for j in range(i, n)) for i in range(n)])
    adv = np.zeros(len(mask))
    for k, pos in enumerate(idx):
        adv[pos] = adv_model[k]
    # A tool token carries the advantage of the next model token after it (0 when none follows).
    for t in range(len(mask)):
        if mask[t] == 0:
            later = idx[idx > t]
            adv[t] = adv[later[0]] if len(later) else 0.0
    return adv, adv + values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("estimator", choices=["gae", "grpo"])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=0.95)
    ap.add_argument("--whiten", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    inputs = [json.loads(l) for l in open(a.input) if l.strip()]
    outputs = [json.loads(l) for l in open(a.output) if l.strip()]
    if len(inputs) != len(outputs):
        print(f"expected {len(inputs)} records, got {len(outputs)}", file=sys.stderr)
        return 1
    want = {}
    if a.estimator == "gae":
        for rec in inputs:
            want[rec["id"]] = gae_reference(rec, a.gamma, a.lam)
        if a.whiten:
            masked = np.concatenate([want[r["id"]][0][np.array(r["response_mask"]) == 1] for r in inputs])
            mean, std = masked.mean(), np.sqrt(masked.var(ddof=1) + 1e-8)
            for k in want:
                want[k] = ((want[k][0] - mean) / std, want[k][1])
    else:
        scores = {r["id"]: token_rewards(r).sum() for r in inputs}
        groups = {}
        for r in inputs:
            groups.setdefault(r["group"], []).append(scores[r["id"]])
        for r in inputs:
            g = np.array(groups[r["group"]])
            mean, std = (g.mean(), g.std(ddof=1)) if len(g) > 1 else (0.0, 1.0)
            adv = (scores[r["id"]] - mean) / (std + 1e-6) * np.array(r["response_mask"], dtype=float)
            want[r["id"]] = (adv, adv)
    bad = 0
    worst = 0.0
    for rec in outputs:
        adv, ret = want[rec["id"]]
        for name, ref in (("advantages", adv), ("returns", ret)):
            got = np.array(rec[name], dtype=float)
            err = np.abs(got - ref).max()
            worst = max(worst, err)
            if got.shape != ref.shape or err > a.tol:
                bad += 1
                print(f"{rec['id']}: {name} {got.tolist()} != reference {ref.tolist()}", file=sys.stderr)
    print(f"{a.estimator}: {len(outputs)} sequences, max abs difference {worst:.3g} (tolerance {a.tol:g})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
