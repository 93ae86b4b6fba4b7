"""Model fixtures: an agent's model calls are fixtures of the pseudo tool `model.chat` (docs/agents.md).

A scenario that replays an agent carries the `model.chat` contract below in contracts.json and one fixture per
model call in fixtures.json, exactly like a tool's: the normalized chat-completions request (model, messages,
tools, tool_choice, temperature, max_tokens, ...) is the key, its digest the lookup, the completion the response
body. A request with a field the contract does not know fails closed (`fixture.missing`, "request does not fit"),
and so does one no fixture answers: the run stops as `incomplete_test_world`, the agent gets an HTTP error.
`stream` is refused (the endpoint answers whole completions only).

The request is normalized by the scenario's own `model.chat` contract (the engine's tool-call path), so a scenario
whose contract declares `volatile` parts (`contracts.py`, e.g. `messages[].tool_call_id`) has them replaced by the
marker before the digest; MODEL_CONTRACT below declares none, so its digests are what they always were."""

from __future__ import annotations

from typing import Any

MODEL_TOOL = "model.chat"

MODEL_CONTRACT: dict[str, Any] = {
    "tool": MODEL_TOOL,
    "revision": 1,
    "effect_class": "read",
    "fields": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": "object"},
        "tools": {"type": "array", "items": "object", "required": False},
        "tool_choice": {"type": "object", "required": False, "nullable": True},
        "temperature": {"type": "number", "required": False},
        "top_p": {"type": "number", "required": False},
        "max_tokens": {"type": "integer", "required": False},
        "max_completion_tokens": {"type": "integer", "required": False},
        "seed": {"type": "integer", "required": False},
        "stop": {"type": "array", "items": "string", "required": False},
        "parallel_tool_calls": {"type": "boolean", "required": False},
        "response_format": {"type": "object", "required": False},
    },
    "transport": ["user", "metadata", "store", "n"],
    "fault_stages": ["before_send"],
    "outcomes": ["ok", "error"],
}


def model_fixture(
    fixture_id: str,
    request: dict[str, Any],
    completion: dict[str, Any],
    *,
    recorded_at: str,
    connection: str = "model-provider",
    synthetic: bool = False,
    fidelity_note: str | None = None,
) -> dict[str, Any]:
    """One model fixture (fixtures.json entry): the chat request as the agent sends it, the completion as the
    provider answered (or, `synthetic=True`, as a person wrote it for the scenario)."""
    return {
        "id": fixture_id,
        "tool": MODEL_TOOL,
        "contract_revision": MODEL_CONTRACT["revision"],
        "request": request,
        "response": {"outcome": "ok", "body": completion},
        "provenance": {
            "recorded_at": recorded_at,
            "source_revision": None,
            "connection": connection,
            "synthetic": synthetic,
            "fidelity_note": fidelity_note,
        },
    }


def completion(
    content: str | None, tool_calls: list[tuple[str, str, str]] | None = None, *, model: str, number: int
) -> dict[str, Any]:
    """A chat completion body: `tool_calls` as (call id, tool name, JSON arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


class LiveModel:
    """The live model relay, inside the sandbox (docs/agents.md): the agent's chat requests go out through the
    sandbox's relay pipe pair (`n17q_engine.sandbox._RelayChannel`) to the launcher, which alone holds the
    operator's credential and forwards them to the declared provider. Nothing here opens a connection: one JSON
    line out, one JSON line back (`{"body": <chat completion>}` or `{"error": "..."}`)."""

    def __init__(self, read_fd: int, write_fd: int, connection: str) -> None:
        self.read_fd, self.write_fd, self.connection = read_fd, write_fd, connection
        self.buffer = b""

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        import json
        import os

        data = json.dumps(request, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        try:
            while data:
                data = data[os.write(self.write_fd, data) :]
            while b"\n" not in self.buffer:
                chunk = os.read(self.read_fd, 65536)
                if not chunk:
                    return {"error": "the relay closed"}
                self.buffer += chunk
        except OSError as exc:
            return {"error": f"the relay failed: {exc}"}
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            return {"error": "the relay answered something that is not JSON"}
        return answer if isinstance(answer, dict) else {"error": "the relay answered something that is not an object"}


def builtin_contract(tool: str) -> Any:
    """The contract a tool has where a scenario pins none: `model.chat`'s (MODEL_CONTRACT, its revision stable),
    so every scenario allows agents (docs/agents.md "Model fixtures"); None for any other tool."""
    from ..contracts import Contract

    return Contract.from_dict(MODEL_CONTRACT) if tool == MODEL_TOOL else None


def contract_for(contracts: Any, tool: str) -> Any:
    """The contract `tool` has in a scenario (`contracts`: its ContractSet): the one it pins, else the built-in
    one (`builtin_contract`), else None."""
    return contracts.get(tool) if tool in contracts else builtin_contract(tool)
