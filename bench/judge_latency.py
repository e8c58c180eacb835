#!/usr/bin/env python3
"""Verify and profile latency through the judge services (kernel-check --serve, kernel-prof --serve)
against a process per call, on one GPU, for an L1-sized task (relu(x) * 2 on 4096 x 2048 fp32, as
KernelBench level 1's elementwise tasks) with its baselines cached. Prints JSON lines: one per
(call, mode) with n, p10, p50, p90, min, max in seconds, and the issue's goal (verify p50 <= 0.5 s,
profile p50 <= 2 s) where it applies. What a number includes: the whole call as a client sees it
(HTTP round trip, or process start to exit), the record's compile (verify_new: a new bundle each
call; verify_same: the same bundle, its cubin cached), reference inputs and outputs, trials, and
for profile the timed loops and the cached baselines' look-up.

usage: judge_latency.py --bin BUILD/bin --src CHECKOUT [--n 20] [--process-n N] [--gpu 0] [--work DIR]
Standard library only.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

p = argparse.ArgumentParser()
p.add_argument("--bin", required=True)
p.add_argument("--src", required=True)
p.add_argument("--n", type=int, default=20)
p.add_argument("--gpu", type=int, default=0)
p.add_argument("--work", default=None)
p.add_argument("--process-n", type=int, default=None, help="process-per-call rounds (default: --n; 0: none)")
args = p.parse_args()
work = args.work or tempfile.mkdtemp(prefix="judge-bench.")
os.makedirs(work, exist_ok=True)
KC, KP = os.path.join(args.bin, "kernel-check"), os.path.join(args.bin, "kernel-prof")
env = dict(os.environ)
env.setdefault("CUDA_AGENT_PYTHONPATH", os.path.join(args.src, "libcommon", "python"))
env["CUDA_AGENT_CACHE"] = os.path.join(work, "cache")
env["CUDA_AGENT_LOCK_DIR"] = os.path.join(work, "locks")
# One store per writer (DESIGN.md §10): kernel-check's checks, kernel-prof's profiles and baselines.
check_store = os.path.join(work, "check.db")
store = os.path.join(work, "prof.db")

# The task and records of tests/kernel-prof/fixtures (relu * 2, 4096 x 2048).
subprocess.run([sys.executable, os.path.join(args.src, "tests/kernel-prof/fixtures/make_records.py"), work], check=True)
tasks = os.path.join(work, "tasks.jsonl")
task = json.loads(open(tasks).readline())
good = json.loads(open(os.path.join(work, "good.jsonl")).readline())


def candidate(i):
    """A candidate for kernel-check: a new bundle for each i (a comment differs), with its task."""
    src = good["bundle"]["kernels"]["relu2.cu"] + "\n// call %d\n" % i
    return {"task_id": task["task_id"], "bundle": {"kernels": {"relu2.cu": src}, "plan": good["bundle"]["plan"]}, "task": task}


def line(rec):
    return (json.dumps(rec) + "\n").encode()


def post(url, body, timeout=600):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-ndjson"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return [json.loads(l) for l in r.read().decode().splitlines() if l.strip()]


def start(argv, name):
    port_file = os.path.join(work, name + ".port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(work, name + ".log"), "w")
    proc = subprocess.Popen(argv + ["--serve", "127.0.0.1:0", "--port-file", port_file], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(1200):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        if proc.poll() is not None:
            sys.exit("%s exited %s: see %s" % (name, proc.returncode, log.name))
        time.sleep(0.1)
    return proc, "http://" + open(port_file).read().strip()


def stats(what, mode, times, goal=None, note=""):
    xs = sorted(times)
    q = statistics.quantiles(xs, n=10, method="inclusive") if len(xs) > 1 else [xs[0]] * 9
    out = {"bench": "judge_latency", "call": what, "mode": mode, "n": len(xs), "p10_s": round(q[0], 4),
           "p50_s": round(statistics.median(xs), 4), "p90_s": round(q[8], 4), "min_s": round(xs[0], 4),
           "max_s": round(xs[-1], 4)}
    if goal is not None:
        out["goal_p50_s"] = goal
        out["meets_goal"] = out["p50_s"] <= goal
    if note:
        out["note"] = note
    print(json.dumps(out), flush=True)
    return out


def timed(fn):
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


gpu = ["--gpus", str(args.gpu)]
n = args.n
# Warm the store's baselines once (eager and compile for this task on this GPU), by the CLI.
checked = subprocess.run([KC] + gpu + ["--store", check_store], input=line(candidate(-1)), env=env, capture_output=True, check=True)
passing = json.loads(checked.stdout.decode().splitlines()[-1])
assert passing["check"]["status"] == "passed", passing["check"]
subprocess.run([KP] + gpu + ["--store", store, "--tasks", tasks], input=line(passing), env=env, capture_output=True, check=True)

# Services: started once; their first call pays the one-time costs (the task load), left out.
kc, kc_url = start([KC] + gpu + ["--store", check_store], "kernel-check")
kp, kp_url = start([KP] + gpu + ["--store", store, "--tasks", tasks], "kernel-prof")
try:
    post(kc_url + "/v1/check", line(candidate(-2)))
    post(kp_url + "/v1/profile", line(passing))
    results = []
    t_new, t_same, t_prof = [], [], []
    stages = {}  # check.stage_s of the verify_new calls: where a verify's time goes
    for i in range(n):
        dt, out = timed(lambda: post(kc_url + "/v1/check", line(candidate(i))))
        assert out[0]["check"]["status"] == "passed", out[0]["check"]
        t_new.append(dt)
        for k, v in out[0]["check"].get("stage_s", {}).items():
            stages.setdefault(k, []).append(v)
        stages.setdefault("compile", []).append(out[0]["check"].get("compile_ms", 0) / 1000)
    same = line(candidate(0))
    for i in range(n):
        dt, out = timed(lambda: post(kc_url + "/v1/check", same))
        assert out[0]["check"]["status"] == "passed" and out[0]["check"]["cached"], out[0]["check"]
        t_same.append(dt)
    prof_times = []
    for i in range(n):
        dt, out = timed(lambda: post(kp_url + "/v1/profile", line(passing)))
        pr = out[0]["prof"]
        assert pr["status"] == "timed" and all(pr["baselines"][m]["cached"] for m in pr["baselines"]), pr.get("reason")
        t_prof.append(dt)
        prof_times.append(pr["time_us"]["median"])
    results.append(stats("verify_new", "service", t_new, 0.5, "a new bundle each call: NVRTC compile included"))
    print(json.dumps({"bench": "judge_latency", "call": "verify_new", "mode": "service", "stage_s_p50":
                      {k: round(statistics.median(v), 4) for k, v in sorted(stages.items())}}), flush=True)
    results.append(stats("verify_same", "service", t_same, 0.5, "the same bundle: cubin cached"))
    results.append(stats("profile", "service", t_prof, 2.0, "baselines cached; candidate %.2f us median of medians"
                         % statistics.median(prof_times)))
finally:
    for proc in (kc, kp):
        proc.send_signal(signal.SIGTERM)
    for proc in (kc, kp):
        proc.wait(timeout=120)

# A process per call, as agent-run without --judge.
t_new, t_prof = [], []
pn = n if args.process_n is None else args.process_n
if pn <= 0:
    print(json.dumps({"bench": "judge_latency", "summary": True, "process_per_call": "skipped (--process-n 0)",
                      "goals_met": all(r.get("meets_goal", True) for r in results)}), flush=True)
    sys.exit(0)
for i in range(pn):
    dt, r = timed(lambda: subprocess.run([KC] + gpu + ["--store", check_store, "--shard", "0/1"], input=line(candidate(100 + i)),
                                         env=env, capture_output=True))
    assert json.loads(r.stdout.decode().splitlines()[-1])["check"]["status"] == "passed", r.stderr.decode()[-500:]
    t_new.append(dt)
for i in range(pn):
    dt, r = timed(lambda: subprocess.run([KP] + gpu + ["--store", store, "--tasks", tasks, "--shard", "0/1"], input=line(passing),
                                         env=env, capture_output=True))
    assert json.loads(r.stdout.decode().splitlines()[-1])["prof"]["status"] == "timed", r.stderr.decode()[-500:]
    t_prof.append(dt)
results.append(stats("verify_new", "process", t_new, None, "process start, import torch, task load each call"))
results.append(stats("profile", "process", t_prof, None, "process start, worker, GPU setup each call; baselines from the store"))
sv = {(r["call"], r["mode"]): r["p50_s"] for r in results}
print(json.dumps({"bench": "judge_latency", "summary": True,
                  "verify_speedup_p50": round(sv[("verify_new", "process")] / sv[("verify_new", "service")], 2),
                  "profile_speedup_p50": round(sv[("profile", "process")] / sv[("profile", "service")], 2),
                  "goals_met": all(r.get("meets_goal", True) for r in results)}), flush=True)
