"""The two endpoints an agent sees inside the sandbox, served from one asyncio loop in a background thread.

- Tools: an MCP server (the official `mcp` SDK, low-level `Server`) on the agent's own stdin/stdout. One tool per
  scenario contract (its fields as the JSON schema), plus an optional `workspace` argument naming the scenario
  workspace a call runs in.
- Model: `POST /v1/chat/completions` (OpenAI-compatible, whole completions, no streaming) on the sandbox network
  namespace's own address (`NAMESPACE_HOST`, on its `lo`) at the fixed `MODEL_PORT`; any other path or method is a
  404/405.

Neither endpoint decides anything: each request becomes a `Request` on `requests`, which the decider (on the
engine's thread) takes, turns into engine actions, and answers through the request's future. While the decider
is not asking, requests wait. No socket module is imported here: `asyncio.start_server` makes the listener.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import json
import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from ..contracts import Contract

MAX_BODY = 8 << 20
# The model endpoint's port on the sandbox namespace's own address: fixed, so OPENAI_BASE_URL is the same in every
# replay (docs/agents.md "Determinism"); nothing else listens in the replay's network namespace.
MODEL_PORT = 8400
MAX_HEADERS = 64


@dataclass
class Request:
    kind: str  # "chat" | "tool" | "exit"
    body: Any
    reply: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class Refused(Exception):
    """The answer to a request is an error (its message goes back to the agent)."""


_JSON_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}


def tool_schema(contract: Contract, workspaces: Iterable[str]) -> dict[str, Any]:
    """The MCP input schema of a contract: its semantic fields, required as the contract says."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in contract.fields.items():
        if spec.type == "array":
            items = {"type": "object"} if spec.items == "object" else {"type": _JSON_TYPES[spec.items or "string"]}
            prop: dict[str, Any] = {"type": "array", "items": items}
        elif spec.type == "object":
            prop = {"type": "object"}
        else:
            prop = {"type": _JSON_TYPES[spec.type]}
        if spec.nullable:
            prop = {"anyOf": [prop, {"type": "null"}]}
        if spec.has_default:
            prop["default"] = spec.default
        elif spec.required:
            required.append(name)
        properties[name] = prop
    names = sorted(workspaces)
    if names:
        properties["workspace"] = {"type": "string", "enum": names, "description": "the workspace the call runs in"}
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


class Bridge:
    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.tools = tools  # [{"name", "description", "input_schema"}]
        self.requests: queue.Queue[Request] = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="n17q-agent-bridge", daemon=True)
        self.server: asyncio.base_events.Server | None = None
        self.mcp: concurrent.futures.Future[None] | None = None
        self.closed = False

    # -- the model endpoint ------------------------------------------------------------------------------------

    def start_model_endpoint(self, host: str, port: int = MODEL_PORT) -> int:
        """Listen on `host` (the sandbox namespace's own address) at `port`; returns the port.

        The port is fixed, not any free one the kernel picks: the namespace is the replay's own (nothing else listens
        on its address), and the agent sees it in OPENAI_BASE_URL, so it is the same in every replay (issue 36)."""
        self.thread.start()
        started = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._http, host, port), self.loop)
        self.server = started.result(timeout=30)
        return int(self.server.sockets[0].getsockname()[1])

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while not self.closed:
                line = await reader.readline()
                if not line:
                    return
                method, _, rest = line.decode("latin-1").strip().partition(" ")
                path = rest.split(" ", 1)[0]
                headers: dict[str, str] = {}
                for _ in range(MAX_HEADERS + 1):
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                else:
                    await self._respond(writer, 431, {"error": {"message": "too many headers"}})
                    return
                length = int(headers.get("content-length") or 0)
                if length < 0 or length > MAX_BODY:
                    await self._respond(writer, 413, {"error": {"message": "request too large"}})
                    return
                body = await reader.readexactly(length) if length else b""
                if path.rstrip("/") != "/v1/chat/completions":
                    await self._respond(writer, 404, {"error": {"message": f"no endpoint {path}", "type": "not_found"}})
                elif method != "POST":
                    await self._respond(writer, 405, {"error": {"message": "POST only"}})
                else:
                    status, answer = await self._chat(body)
                    await self._respond(writer, status, answer)
                if headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    async def _chat(self, raw: bytes) -> tuple[int, Any]:
        try:
            body = json.loads(raw)
        except ValueError:
            return 400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}}
        if not isinstance(body, dict):
            return 400, {"error": {"message": "the body is not a JSON object", "type": "invalid_request_error"}}
        if body.get("stream"):
            return 400, {"error": {"message": "streaming is not served here", "type": "invalid_request_error"}}
        body.pop("stream", None)
        try:
            return 200, await self.ask("chat", body)
        except Refused as exc:
            # 424: not retried by the openai client (it retries 408, 409, 429 and 5xx): the run has stopped.
            return 424, {"error": {"message": str(exc), "type": "fixture_missing", "code": "n17q.stopped"}}

    @staticmethod
    async def _respond(writer: asyncio.StreamWriter, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\ncontent-type: application/json\r\n"
        writer.write(head.encode() + f"content-length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()

    # -- the tools endpoint ------------------------------------------------------------------------------------

    def serve_tools(self, agent_stdout: IO[bytes], agent_stdin: IO[bytes]) -> None:
        self.mcp = asyncio.run_coroutine_threadsafe(self._mcp(agent_stdout, agent_stdin), self.loop)

    async def _mcp(self, agent_stdout: IO[bytes], agent_stdin: IO[bytes]) -> None:
        import anyio
        import mcp_types as types
        from mcp.server.lowlevel import Server
        from mcp.server.stdio import stdio_server

        tools = [
            types.Tool(name=t["name"], description=t["description"], input_schema=t["input_schema"]) for t in self.tools
        ]

        async def list_tools(_ctx: Any, _params: Any) -> Any:
            return types.ListToolsResult(tools=tools)

        async def call_tool(_ctx: Any, params: Any) -> Any:
            try:
                answer = await self.ask("tool", {"name": params.name, "arguments": dict(params.arguments or {})})
            except Refused as exc:
                return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
            text = json.dumps(answer, sort_keys=True)
            return types.CallToolResult(
                content=[types.TextContent(text=text)],
                structured_content=answer,
                is_error=answer.get("outcome") != "ok",
            )

        server: Any = Server("n17q-scenario-tools", on_list_tools=list_tools, on_call_tool=call_tool)
        read = anyio.wrap_file(io.TextIOWrapper(agent_stdout, encoding="utf-8", errors="replace"))
        write = anyio.wrap_file(io.TextIOWrapper(agent_stdin, encoding="utf-8", write_through=True))
        async with stdio_server(read, write) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    # -- both ------------------------------------------------------------------------------------------------------

    async def ask(self, kind: str, body: Any) -> Any:
        if self.closed:
            raise Refused("the replay has stopped")
        request = Request(kind, body)
        self.requests.put(request)
        return await asyncio.wrap_future(request.reply)

    def close(self) -> None:
        """Refuse whatever still waits, stop listening, stop the loop."""
        self.closed = True
        while True:
            try:
                pending = self.requests.get_nowait()
            except queue.Empty:
                break
            if not pending.reply.done():
                pending.reply.set_exception(Refused("the replay has stopped"))
        if self.thread.is_alive():
            if self.server is not None:
                self.loop.call_soon_threadsafe(self.server.close)
            if self.mcp is not None:
                self.mcp.cancel()
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
