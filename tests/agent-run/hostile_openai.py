#!/usr/bin/env python3
"""A hostile OpenAI-compatible server on loopback, for agent-run's bounds tests (issue 32).

usage: hostile_openai.py SCRIPT.json PORT_FILE REQUEST_LOG

SCRIPT: {"steps": [step, ...], "repeat_last": true}. Each POST .../chat/completions takes the next
step (the last one again once they are used up when repeat_last). A step is one of
  {"kind": "deep", "depth": N, "where": "arguments" | "extra"}
      a 200 answer nested N deep (inside the tool call's arguments object, or under a key nobody reads)
  {"kind": "deep_string_args", "depth": N}
      a well-formed answer whose bash call has arguments "[[[...]]]" N deep as a JSON string
  {"kind": "content_length", "mib": M}
      a 200 answer with Content-Length M MiB (as much of it is sent as the client reads)
  {"kind": "chunked"}
      a 200 chunked answer that never ends (a JSON string that never closes)
  {"kind": "gzip", "mib": M}
      a gzip body that inflates to M MiB of one JSON string (about 1 KB per MiB on the wire)
  {"kind": "content", "bytes": B, "usage_tokens": U, "tool": true|false}
      a well-formed answer whose content is B bytes (usage reports U prompt and completion tokens;
      "tool": a bash call `true` besides, so the episode goes on)
  {"kind": "sleep", "s": S}
      answers a well-formed 'Done.' after S seconds
  {"kind": "retry_after", "s": S}
      HTTP 503 with Retry-After: S
  {"kind": "done"}
      a well-formed answer without tool calls
It is also a hostile judge service (kernel-check --serve's protocol): GET /v1/health says
kernel-check; POST /v1/check answers the record with a `check` section nested SCRIPT "judge_depth"
levels deep. Each request is logged to REQUEST_LOG as {"n", "time", "kind"}. Standard library only.
"""
import json
import os
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = json.load(open(sys.argv[1]))
PORT_FILE, LOG = sys.argv[2], sys.argv[3]
STEPS = SCRIPT["steps"]
LOCK = threading.Lock()
STATE = {"n": 0}


def completion(content, calls=(), usage_tokens=None):
    msg = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = [{"id": "call_%d" % i, "type": "function",
                              "function": {"name": name, "arguments": args}} for i, (name, args) in enumerate(calls)]
    out = {"id": "x", "object": "chat.completion", "model": "hostile",
           "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}]}
    if usage_tokens is not None:
        out["usage"] = {"prompt_tokens": usage_tokens, "completion_tokens": usage_tokens}
    return out


def gzip_bomb(mib):
    """A gzip stream of '{"choices": "' followed by mib MiB of 'a' (never closed), built in pieces."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [co.compress(b'{"choices": "')]
    block = b"a" * (1 << 20)
    for _ in range(mib):
        parts.append(co.compress(block))
    parts.append(co.flush())
    return b"".join(parts)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, data, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.endswith("/v1/health"):
            self.send(200, json.dumps({"tool": "kernel-check", "status": "ok", "queue": 0}).encode())
            return
        self.send(200, json.dumps({"object": "list", "data": [{"id": "hostile", "object": "model"}]}).encode())

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith("/v1/check"):
            rec = json.loads(raw.decode().strip().splitlines()[-1])
            n = SCRIPT.get("judge_depth", 1)
            text = json.dumps(rec)[:-1] + ', "check": ' + "[" * n + "]" * n + "}\n"
            with open(LOG, "a") as f:
                f.write(json.dumps({"n": -1, "time": time.time(), "kind": "judge"}) + "\n")
            self.send(200, text.encode())
            return
        with LOCK:
            i = STATE["n"]
            STATE["n"] += 1
        step = STEPS[min(i, len(STEPS) - 1)] if (i < len(STEPS) or SCRIPT.get("repeat_last")) else {"kind": "done"}
        kind = step["kind"]
        with open(LOG, "a") as f:
            f.write(json.dumps({"n": i, "time": time.time(), "kind": kind}) + "\n")
        try:
            self.answer(step)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def answer(self, step):
        kind = step["kind"]
        if kind == "deep":
            n = step["depth"]
            deep = "[" * n + "]" * n
            if step.get("where") == "extra":
                body = '{"extra": %s, "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}' % deep
            else:
                body = ('{"choices": [{"message": {"content": "", "tool_calls": [{"id": "c", "type": "function", '
                        '"function": {"name": "bash", "arguments": {"command": %s}}}]}, "finish_reason": "tool_calls"}]}'
                        % deep)
            self.send(200, body.encode())
        elif kind == "deep_string_args":
            n = step["depth"]
            self.send(200, json.dumps(completion("", [("bash", "[" * n + "]" * n)])).encode())
        elif kind == "content_length":
            total = step["mib"] << 20
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(total))
            self.end_headers()
            block = b'{"choices": "' + b"a" * ((1 << 20) - 13)
            sent = 0
            while sent < total:
                chunk = block[: min(len(block), total - sent)]
                self.wfile.write(chunk)
                sent += len(chunk)
                block = b"a" * (1 << 20)
        elif kind == "chunked":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            first = b'{"choices": "'
            self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
            block = b"a" * (1 << 20)
            while True:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
        elif kind == "gzip":
            data = BOMBS.setdefault(step["mib"], gzip_bomb(step["mib"]))
            self.send(200, data, [("Content-Encoding", "gzip")])
        elif kind == "content":
            calls = [("bash", json.dumps({"command": "true"}))] if step.get("tool") else []
            self.send(200, json.dumps(completion("x" * step["bytes"], calls, step.get("usage_tokens"))).encode())
        elif kind == "sleep":
            time.sleep(step["s"])
            self.send(200, json.dumps(completion("Done.")).encode())
        elif kind == "retry_after":
            self.send(503, b'{"error": {"message": "busy"}}', [("Retry-After", str(step["s"]))])
        else:
            self.send(200, json.dumps(completion("Done.")).encode())


BOMBS = {}
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
