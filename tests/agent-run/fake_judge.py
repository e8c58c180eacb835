#!/usr/bin/env python3
"""A stand-in judge service for agent-run's --judge tests (the protocol of
tools/kernel-check/SERVICE.md, without a GPU): GET /v1/health and POST /v1/check or /v1/profile.

usage: fake_judge.py TOOL PORT_FILE LOG [--queue N] [--delay S] [--status CODE] [--health-tool JSON]

TOOL kernel-check answers every record with a passing check; kernel-prof adds a timed prof section
with timing seeds (which agent-run must not show the model). --queue N is the queue health
reports; --delay S sleeps before each answer; --status CODE answers every POST with that HTTP
status and an {"error": ...} body; --health-tool JSON is what health reports as "tool" (a service of
no tool agent-run knows: null, 7). Each POST is appended to LOG as {"tool", "path", "records"}.
Standard library only.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOOL, PORT_FILE, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
opts = sys.argv[4:]
QUEUE = int(opts[opts.index("--queue") + 1]) if "--queue" in opts else 0
DELAY = float(opts[opts.index("--delay") + 1]) if "--delay" in opts else 0.0
STATUS = int(opts[opts.index("--status") + 1]) if "--status" in opts else 200
HEALTH_TOOL = json.loads(opts[opts.index("--health-tool") + 1]) if "--health-tool" in opts else TOOL
LOCK = threading.Lock()
SERVED = [0]


def judged(rec):
    if TOOL == "kernel-check":
        rec["check"] = {"status": "passed", "correct": True, "compiled": True, "reason": "all 6 calls match the reference",
                        "seed": 1234}
    elif rec.get("check", {}).get("correct"):
        rec["prof"] = {"status": "timed", "correct": True, "time_us": {"median": 5.0}, "speedup_vs_eager": 3.0,
                       "speedup_vs_compile": 2.0, "method": {"seed": 987654321, "metric": "device"},
                       "outputs_check": [{"set": 0, "seed": 987654321, "ok": True}],
                       "baselines": {"eager": {"time_us": {"median": 15.0}, "method": {"seed": 987654321}}}}
    return rec


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, code, body, ctype):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path != "/v1/health":
            return self.answer(404, json.dumps({"error": "no such endpoint", "exit_code": 1}), "application/json")
        h = {"ok": True, "tool": HEALTH_TOOL, "version": "fake", "gpus": [], "queue": QUEUE, "served": SERVED[0], "uptime_s": 1.0}
        self.answer(200, json.dumps(h) + "\n", "application/json")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n).decode()
        recs = [json.loads(l) for l in body.splitlines() if l.strip()]
        with LOCK:
            with open(LOG, "a") as f:
                f.write(json.dumps({"tool": TOOL, "path": self.path, "records": recs}) + "\n")
        time.sleep(DELAY)
        if STATUS != 200:
            return self.answer(STATUS, json.dumps({"error": "fake failure %d" % STATUS, "exit_code": 3}), "application/json")
        SERVED[0] += 1
        self.answer(200, "".join(json.dumps(judged(r)) + "\n" for r in recs), "application/x-ndjson")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(PORT_FILE + ".tmp", "w") as f:
    f.write("127.0.0.1:%d\n" % server.server_address[1])
import os
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
