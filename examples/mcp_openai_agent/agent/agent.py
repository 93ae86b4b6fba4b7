"""An agent built on the official `mcp` client and the official `openai` client, written from docs/agents.md.

It knows of N17Q only what docs/agents.md documents. Its tools come from an MCP server on its own stdin/stdout (it
is the MCP client: `ClientSession` over `mcp.server.stdio.stdio_server()`); its model is whatever OpenAI-compatible
endpoint `OPENAI_BASE_URL` names (the sandbox sets it, with a dummy `OPENAI_API_KEY`). It lists the tools, offers
them to its model as functions, calls the tools the model asks for, feeds each result back, and stops when the model
answers without a tool call.

Its task comes as docs/agents.md ("What your agent receives") says: the MCP prompt `n17q-task` (the task, the
instructions, the workspaces, where the replay starts and what the recorded run did before it), which becomes the
conversation's first user message. Given a task on the command line instead (outside a replay), it uses that.

MCP tool names such as `email.send` are not valid OpenAI function names (letters, digits, `_` and `-` only), so
each tool is offered under the OpenAI name the server gives it in `_meta["n17q/openai_name"]` (`email--send`), and
called by the name the model answered with: the server takes a tool by either name.

Run:  python agent.py ["the task"]
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

MODEL = os.environ.get("AGENT_MODEL", "example-model")
SYSTEM = (
    "You are a careful operations agent. Use the tools you are given. Check what a tool answered before the next "
    "step, never repeat a send, and stop (answer without a tool call) when the task is done or a check fails."
)
MAX_TURNS = 24
TASK_PROMPT = "n17q-task"


def openai_tools(listed: Any) -> list[dict[str, Any]]:
    """The MCP tools as OpenAI functions, each under the name the server gives it (docs/agents.md)."""
    return [
        {
            "type": "function",
            "function": {
                "name": (tool.meta or {}).get("n17q/openai_name", tool.name),
                "description": tool.description or "",
                "parameters": tool.input_schema,
            },
        }
        for tool in listed.tools
    ]


async def task_text(session: ClientSession, given: str | None) -> str:
    """The task: the command line's, or the replay's `n17q-task` prompt."""
    if given:
        return given
    prompt = await session.get_prompt(TASK_PROMPT)
    return "\n".join(getattr(m.content, "text", "") for m in prompt.messages)


async def converse(session: ClientSession, given: str | None) -> int:
    client = OpenAI(max_retries=0)  # base_url and api_key from the environment
    await session.initialize()
    task = await task_text(session, given)
    functions = openai_tools(await session.list_tools())
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
            result = await session.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
            text = "".join(getattr(block, "text", "") for block in result.content)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    print("agent: out of turns", file=sys.stderr)
    return 2


async def main() -> None:
    given = sys.argv[1] if len(sys.argv) > 1 else None
    async with stdio_server() as (read, write), ClientSession(read, write) as session:
        code = await converse(session, given)
        # The stdio helper reads stdin in a thread only an end of file ends, and the server keeps our stdin open
        # while we might still call a tool: end the process once done (docs/agents.md, "known limit").
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    anyio.run(main)
