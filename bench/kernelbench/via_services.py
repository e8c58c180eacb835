#!/usr/bin/env python3
"""The toolchain pipe with the judge services in place of the processes: each candidate record is
POSTed to kernel-check's /v1/check and its answer to kernel-prof's /v1/profile, one record per
request, the two stages overlapping as the processes of a pipe do (the next candidate is checked
while the last is timed). Records come out on stdout in input order, as the pipe writes them, for
reward-calc. Standard library only.

  via_services.py --check http://127.0.0.1:P1 --profile http://127.0.0.1:P2 [--secret-file F] < cands.jsonl

Records go without their `task`: a service runs the tasks of its own --tasks (it refuses task code a
client sends unless started --accept-tasks), as the docs start it. With --secret-file (the services
started with one, as a public service must be), every request carries `Authorization: Bearer`.
"""
import argparse
import json
import queue
import sys
import threading
import urllib.error
import urllib.request


def without_task(body):
    """The records of a JSON Lines body without their `task` (the service has it from --tasks)."""
    out = []
    for line in body.splitlines():
        if line.strip():
            r = json.loads(line)
            r.pop("task", None)
            out.append(json.dumps(r).encode() + b"\n")
    return b"".join(out)


SECRET = None


def post(url, body, timeout):
    headers = {"Content-Type": "application/x-ndjson"}
    if SECRET:
        headers["Authorization"] = "Bearer " + SECRET
    req = urllib.request.Request(url, data=without_task(body), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        raise SystemExit(f"via_services: {url}: HTTP {e.code}: {e.read()[:400].decode(errors='replace')}")


def probe(check_url, line, timeout):
    """The documented refusals, on the live service: a request without the secret is answered 401
    before its body is read, and a record carrying its own task code is refused (not run)."""
    found = {}
    req = urllib.request.Request(check_url, data=line + b"\n", headers={"Content-Type": "application/x-ndjson"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            found["unauthenticated"] = r.status
    except urllib.error.HTTPError as e:
        found["unauthenticated"] = e.code
    headers = {"Content-Type": "application/x-ndjson", "Authorization": "Bearer " + SECRET}
    req = urllib.request.Request(check_url, data=line + b"\n", headers=headers)  # with its task
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read().decode(errors="replace")
            found["client_task"] = "refused" if "--accept-tasks" in body else "ANSWERED: " + body[:300]
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        found["client_task"] = "refused" if "--accept-tasks" in body else "HTTP %d: %s" % (e.code, body[:300])
    print(json.dumps({"probe": found}), file=sys.stderr)
    if found.get("unauthenticated") != 401 or found.get("client_task") != "refused":
        raise SystemExit("via_services: the service did not refuse as documented: %s" % found)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", required=True, help="kernel-check service, http://HOST:PORT")
    ap.add_argument("--profile", required=True, help="kernel-prof service, http://HOST:PORT")
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--secret-file", help="the services' shared secret (its first line)")
    a = ap.parse_args()
    global SECRET
    if a.secret_file:
        with open(a.secret_file) as f:
            SECRET = f.readline().strip()
    lines = [l for l in sys.stdin.buffer.read().splitlines() if l.strip()]
    if SECRET and lines:
        probe(a.check.rstrip("/") + "/v1/check", lines[0], a.timeout_s)
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
