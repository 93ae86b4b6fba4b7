"""A real agent for the agent-decider tests: the `mcp` client SDK for its tools, the `openai` client for its model.

It knows nothing of N17Q: it lists the tools its MCP server offers (over its own stdin/stdout), asks its model
(OPENAI_BASE_URL) what to do, calls the tools the model asks for, feeds the results back, and stops when the model
answers without a tool call. Run by the sandbox as `python mcp_openai_agent.py`; not imported by the tests.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.server.stdio import stdio_server
from openai import OpenAI

MODEL = "n17q-test-model"
SYSTEM = "You are a careful engineering agent. Use the tools; never carry evidence across workspaces."
TASK = "Carry out the task of the run you are replayed in. Stop when done, or when a check fails."
MAX_TURNS = 24


async def converse(session: ClientSession) -> int:
    client = OpenAI(max_retries=0)  # base_url and api_key from the environment the sandbox gives it
    await session.initialize()
    listed = await session.list_tools()
    tools: list[Any] = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
        }
        for t in listed.tools
    ]
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for _turn in range(MAX_TURNS):
        response = client.chat.completions.create(model=MODEL, messages=messages, tools=tools, temperature=0)
        message = response.choices[0].message
        entry: dict = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in message.tool_calls
            ]
        messages.append(entry)
        if not message.tool_calls:
            print(f"agent: done: {message.content}", file=sys.stderr)
            return 0
        for call in message.tool_calls:
            result = await session.call_tool(call.function.name, json.loads(call.function.arguments))
            text = "".join(getattr(block, "text", "") for block in result.content)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    print("agent: out of turns", file=sys.stderr)
    return 2


async def main() -> int:
    async with stdio_server() as (read, write), ClientSession(read, write) as session:
        code = await converse(session)
        _end(code)
    return 2


def _end(code: int) -> None:
    # The MCP stdio helper reads stdin in a worker thread that only an EOF ends, and the engine (the server, on the
    # other side of our stdin) keeps it open while we might still call a tool: end the process once we are done.
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
