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
from .names import openai_name, tool_name
from .task import TASK_PROMPT, TASK_URI

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


def tool_catalogue(contracts: Iterable[Contract], workspaces: Iterable[str], model_tool: str) -> list[dict[str, Any]]:
    """The tools a scenario offers a decider or an agent, each as the MCP server lists it: its name, its OpenAI name,
    a description and its input schema (`model_tool`, the agent's model endpoint, is no tool it is offered). The one
    list the agent's bridge serves and a replay's `model.proposal` records as its tool catalogue (issue 39)."""
    names = list(workspaces)
    return [
        {
            "name": c.tool,
            "openai_name": openai_name(c.tool),
            "description": f"{c.tool} (contract revision {c.revision}, {c.effect_class})",
            "input_schema": tool_schema(c, names),
        }
        for c in contracts
        if c.tool != model_tool
    ]


WAKE_PREFIX = "n17q-wake-"
OPENAI_META = "n17q/openai_name"  # a tool's `_meta` key holding its OpenAI function name (`names.openai_name`)


class _Wire:
    """The MCP channel's two text ends, as `stdio_server` reads and writes them, with the engine's wake-up pings.

    The `mcp` SDK's stdio transport reads its stdin in a worker thread that no cancellation reaches: an agent whose
    code raises inside its `ClientSession` waits there, alive and silent, until one more line arrives. So while the
    engine waits for an agent that spoke MCP and has gone quiet, it sends a JSON-RPC `ping` (`wake`): a live client
    answers it (the answer is dropped here, the server never sees it), a crashed one reads it, unwinds, prints its
    traceback and exits, and the run ends at once with its last stderr lines. A ping is never part of the run's log."""

    def __init__(self, agent_stdout: IO[bytes], agent_stdin: IO[bytes]) -> None:
        self.reader = io.TextIOWrapper(agent_stdout, encoding="utf-8", errors="replace")
        self.writer = io.TextIOWrapper(agent_stdin, encoding="utf-8", write_through=True)
        self.lock = threading.Lock()
        self.spoke = False  # the agent sent its first MCP message (pings before it could confuse a starting client)
        self.pings = 0

    def readline(self, size: int = -1) -> str:
        while True:
            line = self.reader.readline(size)
            if line:
                self.spoke = True
            if WAKE_PREFIX in line and self._answers_a_ping(line):
                continue
            return line

    def __iter__(self) -> _Wire:
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    @staticmethod
    def _answers_a_ping(line: str) -> bool:
        try:
            message = json.loads(line)
        except ValueError:
            return False
        return (
            isinstance(message, dict)
            and "method" not in message
            and isinstance(message.get("id"), str)
            and message["id"].startswith(WAKE_PREFIX)
        )

    def write(self, text: str) -> int:
        with self.lock:
            return self.writer.write(text)

    def flush(self) -> None:
        with self.lock:
            self.writer.flush()

    def ping(self) -> None:
        """One `ping` request on the agent's stdin (blocking: called on a worker thread)."""
        with self.lock:
            self.pings += 1
            self.writer.write(
                json.dumps({"jsonrpc": "2.0", "id": f"{WAKE_PREFIX}{self.pings}", "method": "ping"}) + "\n"
            )
            self.writer.flush()


class Bridge:
    def __init__(self, tools: list[dict[str, Any]], context: dict[str, Any] | None = None, prompt: str = "") -> None:
        self.tools = tools  # [{"name", "description", "input_schema", "openai_name"}]
        self.context = context  # the task and the recorded run's context (`n17q://task`), or None
        self.prompt = prompt  # the task as a prompt's text (`n17q-task`)
        self.requests: queue.Queue[Request] = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="n17q-agent-bridge", daemon=True)
        self.server: asyncio.base_events.Server | None = None
        self.mcp: concurrent.futures.Future[None] | None = None
        self.wire: _Wire | None = None
        self.pinging: concurrent.futures.Future[None] | None = None
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

        def tool(t: dict[str, Any]) -> Any:
            fields: dict[str, Any] = {
                "name": t["name"],
                "title": t.get("openai_name"),
                "description": t["description"],
                "input_schema": t["input_schema"],
                "meta": {OPENAI_META: t["openai_name"]} if t.get("openai_name") else None,  # `_meta` on the wire
            }
            return types.Tool(**fields)

        tools = [tool(t) for t in self.tools]
        names = {t["name"] for t in self.tools}
        by_openai = {t["openai_name"]: t["name"] for t in self.tools if t.get("openai_name")}

        def tool_called(name: str) -> str:
            """A tool by its name, or by its OpenAI name (the table's, else the rule's): a contract name wins."""
            if name in names:
                return name
            if name in by_openai:
                return by_openai[name]
            return tool_name(name) or name

        async def list_tools(_ctx: Any, _params: Any) -> Any:
            return types.ListToolsResult(tools=tools)

        async def call_tool(_ctx: Any, params: Any) -> Any:
            try:
                answer = await self.ask(
                    "tool", {"name": tool_called(params.name), "arguments": dict(params.arguments or {})}
                )
            except Refused as exc:
                return types.CallToolResult(content=[types.TextContent(text=str(exc))], is_error=True)
            text = json.dumps(answer, sort_keys=True)
            return types.CallToolResult(
                content=[types.TextContent(text=text)],
                structured_content=answer,
                is_error=answer.get("outcome") != "ok",
            )

        context_text = json.dumps(self.context, sort_keys=True, ensure_ascii=False, indent=1) if self.context else ""
        resources = (
            [
                types.Resource(
                    name="task",
                    title="The task and the recorded run's context",
                    uri=TASK_URI,
                    mime_type="application/json",
                    description="the task as the recorded run states it, its workspaces, the branch point, and what "
                    "the run did before it",
                )
            ]
            if self.context
            else []
        )
        prompts = (
            [types.Prompt(name=TASK_PROMPT, title="The task", description="the task of the replayed run, as text")]
            if self.context
            else []
        )

        async def list_resources(_ctx: Any, _params: Any) -> Any:
            return types.ListResourcesResult(resources=resources)

        async def read_resource(_ctx: Any, params: Any) -> Any:
            if not self.context or str(params.uri) != TASK_URI:
                raise ValueError(f"no resource {params.uri}; there is {TASK_URI}")
            return types.ReadResourceResult(
                contents=[types.TextResourceContents(uri=TASK_URI, mime_type="application/json", text=context_text)]
            )

        async def list_prompts(_ctx: Any, _params: Any) -> Any:
            return types.ListPromptsResult(prompts=prompts)

        async def get_prompt(_ctx: Any, params: Any) -> Any:
            if not self.context or params.name != TASK_PROMPT:
                raise ValueError(f"no prompt {params.name}; there is {TASK_PROMPT}")
            return types.GetPromptResult(
                description="the task of the replayed run",
                messages=[types.PromptMessage(role="user", content=types.TextContent(text=self.prompt))],
            )

        server: Any = Server(
            "n17q-scenario-tools",
            instructions=self.prompt or None,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_read_resource=read_resource,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
        )
        wire = self.wire = _Wire(agent_stdout, agent_stdin)
        read: Any = anyio.wrap_file(wire)  # type: ignore[arg-type]  # a text file as far as the SDK reads it
        write: Any = anyio.wrap_file(wire)  # type: ignore[arg-type]
        async with stdio_server(read, write) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    def wake(self) -> bool:
        """Ping a quiet agent that has spoken MCP (see `_Wire`); False when there is none to ping (yet), or the last
        ping is still being written (an agent that does not read its stdin is not sent more)."""
        wire = self.wire
        if self.closed or wire is None or not wire.spoke or (self.pinging is not None and not self.pinging.done()):
            return False
        self.pinging = asyncio.run_coroutine_threadsafe(self._ping(wire), self.loop)
        return True

    @staticmethod
    async def _ping(wire: _Wire) -> None:
        try:
            await asyncio.to_thread(wire.ping)
        except (OSError, ValueError):  # the agent's stdin is closed: its exit is on its way
            return

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
