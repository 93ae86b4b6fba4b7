"""A scripted OpenAI-compatible model on loopback, for the traced agent's production runs (issue 37).

Deterministic: its answer is keyed by the conversation so far (how many assistant turns the request holds), never by
time or chance:

1. no assistant turn yet: two `get_forecast` calls, Oslo (a forecast) and Atlantis (the agent's tool raises: the
   trace's tool error);
2. one: a `list_alerts` call for the north region;
3. two or more: the final answer, without a tool call.

Any client that speaks chat completions with tools (the `openai` client, LangChain's ChatOpenAI) gets the same three
turns. Every request body is appended, as received, to the `--log` file (JSON lines), so a test can compare what an
agent sent in two modes. It also serves a small page (`/page`) that fetches JSON from `/forecast/oslo`, for the
browser HAR.

Run:  python scripted_model.py [--port 0] [--log requests.jsonl]   (prints "listening on http://127.0.0.1:PORT")
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-4o-mini"
CREATED = 1_767_225_600  # a fixed time: answers are the same bytes on every run
PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Forecast</title><link rel="icon" href="data:,"></head>
<body><h1>Forecast</h1><pre id="out">loading</pre>
<script>
fetch("/forecast/oslo").then(r => r.json()).then(d => {
  document.getElementById("out").textContent = JSON.stringify(d);
  document.title = "Forecast loaded";
});
</script></body></html>
"""


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
    }


def answer_for(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message for a conversation: the script's turn after as many assistant turns as it holds."""
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    if turn == 0:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call("call_forecast_oslo", "get_forecast", {"city": "Oslo"}),
                _call("call_forecast_atlantis", "get_forecast", {"city": "Atlantis"}),
            ],
        }
    if turn == 1:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("call_alerts_north", "list_alerts", {"region": "north"})],
        }
    return {
        "role": "assistant",
        "content": "Oslo: storm tomorrow (4/-2 C, wind 70 km/h). Atlantis: no forecast available. "
        "North region: one active alert (alert-17, ice on the coastal road); no new alert sent.",
    }


def completion(body: dict[str, Any], serial: int) -> dict[str, Any]:
    messages = body.get("messages") or []
    message = answer_for(messages)
    prompt_tokens = sum(len(json.dumps(m)) // 4 for m in messages)
    completion_tokens = len(json.dumps(message)) // 4
    return {
        "id": f"chatcmpl-scripted-{serial}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body.get("model") or MODEL,
        "system_fingerprint": "fp_scripted",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedModel(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], log: str | None = None) -> None:
        super().__init__(address, Handler)
        self.log_path = log
        self.requests: list[dict[str, Any]] = []  # the chat request bodies, in order
        self.raw: list[bytes] = []  # the same, as the bytes received
        self.served: list[tuple[str, str]] = []  # every request: (method, path)
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: ScriptedModel

    def _send(self, status: int, body: bytes, media: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        with self.server.lock:
            self.server.served.append(("GET", path))
        if path == "/page":
            self._send(200, PAGE, "text/html; charset=utf-8")
        elif path == "/forecast/oslo":
            self._send(200, json.dumps({"city": "Oslo", "summary": "storm", "high_c": 4}).encode())
        elif path in ("/v1/models", "/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
        else:
            self._send(404, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.served.append(("POST", self.path.split("?", 1)[0]))
        if not self.path.split("?", 1)[0].endswith("/chat/completions"):
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": {"message": "the body is not JSON"}}')
            return
        with self.server.lock:
            self.server.requests.append(body)
            self.server.raw.append(raw)
            serial = len(self.server.requests)
            if self.server.log_path:
                with open(self.server.log_path, "a", encoding="utf-8") as fh:
                    fh.write(raw.decode("utf-8").replace("\n", " ") + "\n")
        self._send(200, json.dumps(completion(body, serial)).encode())

    def log_message(self, *args: Any) -> None:
        pass


def start(log: str | None = None, port: int = 0) -> ScriptedModel:
    """A running server on a thread of this process (tests and the trace script use it)."""
    server = ScriptedModel(("127.0.0.1", port), log)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible model on loopback.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", help="append each chat request body here (JSON lines)")
    args = parser.parse_args()
    server = ScriptedModel(("127.0.0.1", args.port), args.log)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
