#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat-completions server on loopback, for agent-run's tests.

usage: mock_openai.py SCRIPT.json PORT_FILE REQUEST_LOG

SCRIPT: {"expect_tools": [names], "steps": [step, ...]}. Each POST /v1/chat/completions takes the
next step: {"status": 503} answers that HTTP status (with "retry_after": S, a Retry-After header); {"message": {"content": ..., "tool_calls":
[{"name": ..., "arguments": {...} | "raw text"}]}, "finish_reason": ...} answers a completion in the
exact wire format (tool_calls with JSON-string arguments, usage, logprobs with token ids,
prompt_token_ids when the request asks return_token_ids;
"reasoning" adds reasoning_content, "no_usage" / "no_logprobs" leave those out).
POST /update_weights_from_disk {"model_path": DIR} (SGLang's weight reload) makes DIR the served
weights when DIR holds a config.json ({"success": true}; else HTTP 400 and {"success": false}; a DIR
holding answer.json gets HTTP 200 and that file's JSON, the weights unchanged);
GET /v1/models lists the model with "root" = the served weights (as vLLM does), and every request's
log entry carries "weights", the weights served when it was answered (SCRIPT "model_path" at start).
Every request is checked (the tools offered, the tool answers to every earlier call); a violation
is answered with HTTP 400 and logged. Each request is appended to REQUEST_LOG as one JSON line:
{"n", "path", "status", "violations", "body", "time", "auth", "weights"}. The chosen port is written to PORT_FILE.

SCRIPT "lora_server": "vllm" | "sglang" makes it that server's runtime LoRA API, each accepting only its
documented path and payload (anything else: 404 for a path, 400 and a violation for a payload):
  vllm    POST /v1/load_lora_adapter {"lora_name", "lora_path"} -> 200 text "Success: ..." (only with
          SCRIPT "runtime_lora" true, the default: VLLM_ALLOW_RUNTIME_LORA_UPDATING; else 404);
          POST /v1/unload_lora_adapter {"lora_name"}; a request selects the adapter by "model": <name>
          (an unknown model: 404), and sends no "lora_path" (not vLLM's).
  sglang  POST /load_lora_adapter {"lora_name", "lora_path"} -> {"success": true, "loaded_adapters"}
          (SCRIPT "enable_lora" false: 400 {"success": false}); POST /unload_lora_adapter {"lora_name"};
          a request selects it by "model": "<base>:<name>" (split at the first colon, as SGLang does) or
          "lora_path": <name>; both given must agree here.
A load needs a folder with adapter_config.json and adapter_model.safetensors and a name not loaded yet.
GET /v1/models lists the loaded adapters after the base model, with "parent" and "root" (the adapter
path) and "owned_by" the server. Chat entries in the log carry "adapter" (the name served, or null)
and "adapter_path".
Standard library only.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCRIPT = json.load(open(sys.argv[1]))
PORT_FILE, LOG = sys.argv[2], sys.argv[3]
STEPS = SCRIPT["steps"]
LOCK = threading.Lock()
STATE = {"next": 0, "n": 0, "weights": SCRIPT.get("model_path", "mock-model"), "adapters": {}}
LORA = SCRIPT.get("lora_server")
BASE = "mock-model"


def is_adapter_dir(path):
    return isinstance(path, str) and all(os.path.isfile(os.path.join(path, f))
                                         for f in ("adapter_config.json", "adapter_model.safetensors"))


def lora_admin(path, body):
    """The runtime LoRA endpoints of LORA's server: (status, answer, text?) or None for another path."""
    vllm = LORA == "vllm"
    prefix = "/v1" if vllm else ""
    load, unload = prefix + "/load_lora_adapter", prefix + "/unload_lora_adapter"
    if path not in (load, unload):
        return None
    if vllm and not SCRIPT.get("runtime_lora", True):
        return 404, {"detail": "Not Found"}, False  # the routes exist only with the environment variable
    want = {"lora_name", "lora_path"} if path == load else {"lora_name"}
    if not isinstance(body, dict) or set(body) != want or not all(isinstance(body[k], str) for k in want):
        return 400, {"error": "expected exactly %s as strings, got %s" % (sorted(want), json.dumps(body)[:200])}, False
    name = body["lora_name"]
    if not vllm and not SCRIPT.get("enable_lora", True):
        return 400, {"success": False, "error_message": "LoRA is not enabled: start the server with --enable-lora",
                     "loaded_adapters": None}, False
    if path == load:
        if name in STATE["adapters"]:
            msg = "The lora adapter '%s' has already been loaded." % name
        elif not is_adapter_dir(body["lora_path"]):
            msg = "No adapter found for %s" % body["lora_path"]
        else:
            STATE["adapters"][name] = body["lora_path"]
            if vllm:
                return 200, "Success: LoRA adapter '%s' added successfully." % name, True
            return 200, {"success": True, "error_message": None, "loaded_adapters": dict(STATE["adapters"])}, False
    else:
        if name in STATE["adapters"]:
            del STATE["adapters"][name]
            if vllm:
                return 200, "Success: LoRA adapter '%s' removed successfully." % name, True
            return 200, {"success": True, "error_message": None, "loaded_adapters": dict(STATE["adapters"])}, False
        msg = "The lora adapter '%s' cannot be found." % name
    if vllm:
        return 400, {"object": "error", "message": msg, "type": "BadRequestError", "code": 400}, False
    return 400, {"success": False, "error_message": msg, "loaded_adapters": dict(STATE["adapters"])}, False


def lora_select(body):
    """The adapter a chat request selects on LORA's server: (name or None, violation or None)."""
    model = body.get("model")
    if LORA == "vllm":
        if "lora_path" in body:
            return None, "lora_path is not a vLLM request field"
        if model == BASE:
            return None, None
        if model in STATE["adapters"]:
            return model, None
        return None, "The model `%s` does not exist." % model
    base, _, named = str(model).partition(":")
    named = named.strip() or None
    explicit = body.get("lora_path")
    if named and explicit is not None and explicit != named:
        return None, "model names adapter %s, lora_path %s" % (named, explicit)
    name = named or explicit
    if base.strip() != BASE:
        return None, "base model %r is not served" % base
    if name is not None and name not in STATE["adapters"]:
        return None, "LoRA adapter %r is not loaded" % name
    return name, None


def check_request(body):
    v = []
    names = sorted(t.get("function", {}).get("name") for t in body.get("tools", []))
    if "expect_tools" in SCRIPT and names != sorted(SCRIPT["expect_tools"]):
        v.append("tools offered %s, expected %s" % (names, sorted(SCRIPT["expect_tools"])))
    for t in body.get("tools", []):
        if t.get("type") != "function" or "parameters" not in t.get("function", {}):
            v.append("tool without type=function/parameters: %s" % json.dumps(t)[:100])
    msgs = body.get("messages", [])
    if not msgs or msgs[0].get("role") != "system":
        v.append("first message is not the system prompt")
    answered = {m.get("tool_call_id") for m in msgs if m.get("role") == "tool"}
    for m in msgs:
        for c in m.get("tool_calls") or []:
            if not isinstance(c.get("function", {}).get("arguments"), str):
                v.append("tool call %s: arguments are not a string" % c.get("id"))
            if c.get("id") not in answered:
                v.append("tool call %s has no tool answer" % c.get("id"))
    for k in ("model", "temperature", "top_p", "max_tokens", "seed"):
        if k not in body:
            v.append("request without %s" % k)
    return v


# Token ids as a ChatML server would give them (return_token_ids): each message is START, a few ids
# of its role and text, END; an assistant message this server generated is GEN, its completion ids,
# END; the prompt ends with GEN (the generation prompt). So every turn's prompt plus completion is a
# prefix of the next turn's prompt, as with vLLM and a template that does not re-render history.
START, END, GEN = 250, 251, 252
GENERATED = {}


def message_key(m):
    calls = [c.get("id") for c in m.get("tool_calls") or []]
    return json.dumps(["calls", calls] if calls else ["text", m.get("content") or ""])


def prompt_token_ids(messages):
    ids = []
    for m in messages:
        key = message_key(m)
        if m.get("role") == "assistant" and key in GENERATED:
            ids += [GEN] + GENERATED[key] + [END]
        else:
            text = ("%s:%s" % (m.get("role", ""), m.get("content") or "")).encode()[:24]
            ids += [START] + [2 + b % 240 for b in text] + [END]
    return ids + [GEN]


def completion(step, n, prompt_chars, body):
    msg = step.get("message", {})
    calls = []
    for i, c in enumerate(msg.get("tool_calls", [])):
        args = c.get("arguments", {})
        calls.append({"id": "call_%d_%d" % (n, i), "type": "function",
                      "function": {"name": c["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args)}})
    text = msg.get("content", "")
    out = {"role": "assistant", "content": text if text or not calls else None}
    if "reasoning" in msg:
        out["reasoning_content"] = msg["reasoning"]
    if calls:
        out["tool_calls"] = calls
    n_tokens = max(1, (len(text) + sum(len(c["function"]["arguments"]) for c in calls)) // 4)
    ids = [2 + (n * 37 + i * 11) % 240 for i in range(n_tokens)]
    prompt_ids = prompt_token_ids(body.get("messages", []))
    GENERATED[message_key(out)] = ids
    choice = {"index": 0, "message": out,
              "finish_reason": step.get("finish_reason", "tool_calls" if calls else "stop"),
              "logprobs": {"content": [{"token": "token_id:%d" % t, "logprob": -0.5, "bytes": None,
                                        "top_logprobs": []} for t in ids]},
              "token_ids": ids}
    if step.get("no_logprobs"):
        del choice["logprobs"], choice["token_ids"]
    answer = {"id": "chatcmpl-%d" % n, "object": "chat.completion", "created": int(time.time()),
              "model": "mock-model", "choices": [choice],
              "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": n_tokens,
                        "total_tokens": prompt_chars // 4 + n_tokens}}
    if step.get("no_usage"):
        del answer["usage"]
    if body.get("return_token_ids") and not step.get("no_logprobs"):
        answer["prompt_token_ids"] = prompt_ids
    return answer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, obj, headers=None, text=False):
        data = obj.encode() if text else json.dumps(obj).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain" if text else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            with LOCK:
                root = STATE["weights"]
                data = [{"id": BASE, "object": "model", "root": root}]
                if LORA:
                    data[0].update(owned_by=LORA, parent=None)
                    data += [{"id": name, "object": "model", "owned_by": LORA, "root": path, "parent": BASE}
                             for name, path in STATE["adapters"].items()]
            self.reply(200, {"object": "list", "data": data})
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with LOCK:
            STATE["n"] += 1
            n = STATE["n"]
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            entry = {"n": n, "path": self.path, "violations": [], "body": body, "time": time.time(),
                     "auth": self.headers.get("Authorization")}
            headers = {}
            text = False
            admin = lora_admin(self.path, body) if LORA else None
            if admin is not None:
                status, obj, text = admin
            elif self.path.rstrip("/") == "/update_weights_from_disk":
                path = (body or {}).get("model_path") if isinstance(body, dict) else None
                if isinstance(path, str) and os.path.isfile(os.path.join(path, "answer.json")):
                    status, obj = 200, json.load(open(os.path.join(path, "answer.json")))  # a scripted odd answer
                elif isinstance(path, str) and os.path.isfile(os.path.join(path, "config.json")):
                    STATE["weights"] = path
                    status, obj = 200, {"success": True, "message": "Succeeded to update model weights.",
                                        "num_paused_requests": 0}
                else:
                    status, obj = 400, {"success": False,
                                        "message": "Failed to update weights: no model at %r" % (path,)}
            elif not self.path.endswith("/chat/completions"):
                status, obj = 404, {"error": "not found"}
            elif body is None:
                status, obj = 400, {"error": "body is not JSON"}
            else:
                entry["violations"] = check_request(body)
                if LORA:
                    entry["adapter"], why = lora_select(body)
                    entry["adapter_path"] = STATE["adapters"].get(entry["adapter"])
                    if why:
                        entry["violations"].append(why)
                if entry["violations"]:
                    status, obj = 400, {"error": {"message": "; ".join(entry["violations"])}}
                elif STATE["next"] >= len(STEPS):
                    status, obj = 400, {"error": {"message": "script exhausted"}}
                else:
                    step = STEPS[STATE["next"]]
                    STATE["next"] += 1
                    if "status" in step:
                        status, obj = step["status"], {"error": {"message": "scripted %d" % step["status"]}}
                        if "retry_after" in step:
                            headers["Retry-After"] = str(step["retry_after"])
                    else:
                        status, obj = 200, completion(step, n, len(raw), body)
            entry["status"] = status
            entry["weights"] = STATE["weights"]
            with open(LOG, "a") as f:
                f.write(json.dumps(entry) + "\n")
        self.reply(status, obj, headers, text)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
