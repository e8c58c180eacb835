#!/usr/bin/env python3
"""Side by side: the toolchain's records (kernel-check | kernel-prof | reward-calc) and the reference
judge's, joined by candidate_id. Prints a table, then one JSON line with the counts and wall times.

usage: compare.py TOOLCHAIN.jsonl JUDGE.jsonl [--toolchain-wall S] [--judge-wall S] [--cands FILE]

Verdicts agree when both passed, or both failed. A toolchain verdict about the task itself
(task_stochastic, task_insensitive, task_ill_conditioned: no candidate's reward can be trusted on it,
by kernel-check's own measurement; reference_error: its worker could not compute the reference; node_error: the node failed the candidate's run) is counted apart as `task_unusable`, neither agreeing nor not (the reasons are shown, the statuses may differ:
a timeout in one is a runtime_error in the other). Rewards agree when equal; a difference where
either side marked the margin decision within its measurement noise (reward-calc's within_noise,
the judge's p10-p90 test) is counted apart as `noise`, not as a disagreement.
Two comparisons of rewards: `reward` on one metric, the toolchain's (kernel-prof's default device
time: the busy time of each side's kernels, gaps between them not counted) against the judge's
reward_busy (the same quantity measured apart, by torch.profiler); `events` against the judge's
reward on CUDA events around each call (KernelBench's metric, which also counts the gaps between an
eager baseline's kernels). A judge record without reward_busy (--busy-calls 0) is compared on events
in both.
"""
import argparse
import json
import sys


# kernel-check's statuses about the task, not the candidate (check.reference says why), and a
# reference the worker could not compute.
TASK_STATUSES = ("task_stochastic", "task_insensitive", "task_ill_conditioned", "task_uncalibrated", "reference_error",
                 "node_error")


def load(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                out[r.get("candidate_id") or r.get("task_id")] = r
    return out


def med(x):
    if isinstance(x, dict):
        return x.get("median")
    return x if isinstance(x, (int, float)) else None


def fmt(v, nd=1):
    return "-" if v is None else ("%.*f" % (nd, v) if isinstance(v, float) else str(v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("toolchain")
    ap.add_argument("judge")
    ap.add_argument("--cands", help="the candidate records, for names and the order")
    ap.add_argument("--toolchain-wall", type=float)
    ap.add_argument("--judge-wall", type=float)
    a = ap.parse_args()
    tc, rj = load(a.toolchain), load(a.judge)
    order = list(rj) + [k for k in tc if k not in rj]
    names = {}
    if a.cands:
        order = []
        for line in open(a.cands):
            if line.strip():
                r = json.loads(line)
                order.append(r["candidate_id"])
                names[r["candidate_id"]] = r.get("name", r["task_id"])
    rows, n = [], {"candidates": len(order), "verdicts_agree": 0, "rewards_agree": 0, "rewards_noise": 0,
                   "rewards_differ": 0, "events_agree": 0, "events_noise": 0, "events_differ": 0, "missing": 0, "toolchain_passed": 0, "judge_passed": 0, "task_unusable": 0}
    head = ("candidate", "tc status", "ref status", "verdict", "tc R", "ref R", "reward", "ref R ev", "events",
            "tc us", "ref us", "tc eager", "ref eager", "tc compile", "ref compile", "ref ev us", "ref ev eager")
    pad = ("-",) * (len(head) - 3)
    for cid in order:
        t, r = tc.get(cid), rj.get(cid)
        name = names.get(cid) or (r or t or {}).get("name") or cid
        if t is None or r is None:
            n["missing"] += 1
            rows.append((name, "missing" if t is None else t.get("check", {}).get("status"),
                         "missing" if r is None else r["judge"]["status"]) + pad)
            continue
        ck, pf, rw, j = t.get("check", {}), t.get("prof", {}), t.get("reward", {}), r["judge"]
        ts, rs = ck.get("status"), j["status"]
        if pf and pf.get("correct") is False:
            ts = "prof_failed"
        if ts in TASK_STATUSES:
            n["task_unusable"] += 1
            rows.append((name, ts, rs, "task", "-", fmt(j.get("reward_busy", j.get("reward"))), "task")
                        + ("-",) * (len(head) - 7))
            continue
        tpass, rpass = ts == "passed", rs == "passed"
        n["toolchain_passed"] += tpass
        n["judge_passed"] += rpass
        vagree = tpass == rpass
        n["verdicts_agree"] += vagree
        tr, rr = rw.get("value"), j.get("reward")
        busy = "reward_busy" in j
        rbusy = j["reward_busy"] if busy else rr

        def state(theirs, their_noise):
            if tr == theirs:
                return "agree"
            return "noise" if rw.get("within_noise") or their_noise else "DIFFER"
        rstate = state(rbusy, j.get("within_noise_busy" if busy else "within_noise"))
        estate = state(rr, j.get("within_noise"))
        n["rewards_" + rstate.lower()] += 1
        n["events_" + estate.lower()] += 1
        base = pf.get("baselines", {})
        rb = j.get("baselines") or {}
        bb = j.get("busy_baselines") or rb
        rows.append((name, ts, rs, "agree" if vagree else "DIFFER", fmt(tr), fmt(rbusy), rstate, fmt(rr), estate,
                     fmt(med(pf.get("time_us"))), fmt(med(j.get("busy_us") if busy else j.get("time_us"))),
                     fmt(med((base.get("eager") or {}).get("time_us"))), fmt(med(bb.get("eager"))),
                     fmt(med((base.get("compile") or {}).get("time_us"))), fmt(med(bb.get("compile"))),
                     fmt(med(j.get("time_us"))), fmt(med(rb.get("eager")))))
        if not (tpass and rpass) and not (ts == rs):
            # prof_failed: the check passed, so its reason ("all 6 calls match") says nothing; kernel-prof's does.
            reason_t = ((pf.get("reason") if ts == "prof_failed" else None) or ck.get("reason") or pf.get("reason")
                        or "")[:160]
            reason_r = (j.get("reason") or "")[:160]
            rows.append(("  reasons", "tc: " + reason_t, "ref: " + reason_r) + ("",) * (len(head) - 3))
    widths = [max(len(str(x[i])) for x in rows + [head]) if i < 3 else max(len(str(x[i])) for x in
              [rr_ for rr_ in rows if rr_[0] != "  reasons"] + [head]) for i in range(len(head))]
    line = lambda row: "  ".join(str(v).ljust(widths[i]) if i < 3 or row[0] != "  reasons" else str(v)
                                 for i, v in enumerate(row)).rstrip()
    print(line(head))
    for row in rows:
        print(line(row))
    print("times: microseconds, medians; tc = kernel-prof (device time by default); ref = the reference judge's busy time "
          "(torch.profiler), ref ev = its CUDA events; reward: tc R against ref R (busy), events: against ref R ev")
    n["toolchain_wall_s"], n["judge_wall_s"] = a.toolchain_wall, a.judge_wall
    if a.toolchain_wall and a.judge_wall:
        n["toolchain_over_judge"] = round(a.toolchain_wall / a.judge_wall, 3)
    print(json.dumps(dict(kind="kernelbench-compare", **n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
