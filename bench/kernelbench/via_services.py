#!/usr/bin/env python3
"""The toolchain pipe with the judge services in place of the processes: each candidate record is
POSTed to kernel-check's /v1/check and its answer to kernel-prof's /v1/profile, one record per
request, the two stages overlapping as the processes of a pipe do (the next candidate is checked
while the last is timed). Records come out on stdout in input order, as the pipe writes them, for
reward-calc. Standard library only.

  via_services.py --check http://127.0.0.1:P1 --profile http://127.0.0.1:P2 < cands.jsonl
"""
import argparse
import json
import queue
import sys
import threading
import urllib.error
import urllib.request


def post(url, body, timeout):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-ndjson"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise SystemExit(f"via_services: {url}: HTTP {e.code}: {e.read()[:400].decode(errors='replace')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", required=True, help="kernel-check service, http://HOST:PORT")
    ap.add_argument("--profile", required=True, help="kernel-prof service, http://HOST:PORT")
    ap.add_argument("--timeout-s", type=float, default=600)
    a = ap.parse_args()
    lines = [l for l in sys.stdin.buffer.read().splitlines() if l.strip()]
    checked = queue.Queue()
    failure = []

    def check_stage():
        try:
            for line in lines:
                checked.put(post(a.check.rstrip("/") + "/v1/check", line + b"\n", a.timeout_s))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failure.append(e)
        checked.put(None)

    t = threading.Thread(target=check_stage, daemon=True)
    t.start()
    n = 0
    while True:
        body = checked.get()
        if body is None:
            break
        out = post(a.profile.rstrip("/") + "/v1/profile", body, a.timeout_s)
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        n += 1
    t.join()
    if failure:
        raise SystemExit(f"via_services: check stage: {failure[0]}")
    if n != len(lines):
        raise SystemExit(f"via_services: {n} of {len(lines)} records came back")
    print(json.dumps({"via_services": n}), file=sys.stderr)


if __name__ == "__main__":
    main()
