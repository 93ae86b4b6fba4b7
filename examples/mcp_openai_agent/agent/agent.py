"""An agent built on the official `mcp` client and the official `openai` client, written from docs/agents.md.

It knows nothing of N17Q. Its tools come from an MCP server on its own stdin/stdout (it is the MCP client:
`ClientSession` over `mcp.server.stdio.stdio_server()`); its model is whatever OpenAI-compatible endpoint
`OPENAI_BASE_URL` names (the sandbox sets it, with a dummy `OPENAI_API_KEY`). It lists the tools, offers them to
its model as functions, calls the tools the model asks for, feeds each result back, and stops when the model
answers without a tool call.

MCP tool names such as `email.send` are not valid OpenAI function names (letters, digits, `_` and `-` only), so
each tool is offered under a safe name (`email__send`) and the model's answer is mapped back through a table, never
by rewriting the string.

Run:  python agent.py ["the task"]
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.server.stdio import stdio_server
from openai import OpenAI

MODEL = os.environ.get("AGENT_MODEL", "example-model")
SYSTEM = (
    "You are a careful operations agent. Use the tools you are given. Check what a tool answered before the next "
    "step, never repeat a send, and stop (answer without a tool call) when the task is done or a check fails."
)
DEFAULT_TASK = "Carry out the task of the run you are replayed in. Stop when done, or when a check fails."
MAX_TURNS = 24
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def function_name(tool: str, taken: dict[str, str]) -> str:
    """An OpenAI-safe, unique function name for an MCP tool name."""
    base = _UNSAFE.sub("_", tool.replace(".", "__"))[:60] or "tool"
    name, n = base, 2
    while name in taken and taken[name] != tool:
        name, n = f"{base[:57]}_{n}", n + 1
    return name


async def converse(session: ClientSession, task: str) -> int:
    client = OpenAI(max_retries=0)  # base_url and api_key from the environment
    await session.initialize()
    listed = await session.list_tools()
    names: dict[str, str] = {}  # function name -> MCP tool name
    functions: list[Any] = []
    for tool in listed.tools:
        safe = function_name(tool.name, names)
        names[safe] = tool.name
        schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None) or {"type": "object"}
        functions.append(
            {
                "type": "function",
                "function": {"name": safe, "description": tool.description or "", "parameters": schema},
            }
        )
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _turn in range(MAX_TURNS):
        response = client.chat.completions.create(model=MODEL, messages=messages, tools=functions, temperature=0)
        message = response.choices[0].message
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
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
            tool = names.get(call.function.name)
            if tool is None:
                text = json.dumps({"error": f"no tool named {call.function.name}"})
            else:
                result = await session.call_tool(tool, json.loads(call.function.arguments or "{}"))
                text = "".join(getattr(block, "text", "") for block in result.content)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    print("agent: out of turns", file=sys.stderr)
    return 2


async def main() -> None:
    task = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_TASK
    async with stdio_server() as (read, write), ClientSession(read, write) as session:
        code = await converse(session, task)
        # The stdio helper reads stdin in a thread only an end of file ends, and the server keeps our stdin open
        # while we might still call a tool: end the process once done (docs/agents.md, "known limit").
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    anyio.run(main)
