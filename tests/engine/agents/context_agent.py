"""An agent for the agent-contract tests (issue 36): written against docs/agents.md, "What your agent receives".

It reads its task every way the sandbox offers it (the MCP resource `n17q://task`, the MCP prompt `n17q-task`, the
variables N17Q_TASK_ID / N17Q_TASK_TITLE / N17Q_TASK_FILE), offers its model the tools under their OpenAI function
names (each tool's `_meta["n17q/openai_name"]`), calls the tools the model names by those names, and stops when the
model answers without a tool call. What it read goes to its model in its first request, so the run's log (the
`model.chat` call) shows exactly what it received. Run by the sandbox as `python context_agent.py`.
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


async def converse(session: ClientSession) -> int:
    client = OpenAI(max_retries=0)
    await session.initialize()
    resources = [str(r.uri) for r in (await session.list_resources()).resources]
    prompts = [p.name for p in (await session.list_prompts()).prompts]
    resource = await session.read_resource("n17q://task")
    prompt = await session.get_prompt("n17q-task")
    with open(os.environ["N17Q_TASK_FILE"], encoding="utf-8") as fh:
        task_file = fh.read()
    received = {
        "resources": resources,
        "prompts": prompts,
        "resource": resource.contents[0].text,
        "prompt": prompt.messages[0].content.text,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("N17Q_TASK")},
        "file": task_file,
    }
    listed = await session.list_tools()
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": (t.meta or {})["n17q/openai_name"],
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in listed.tools
    ]
    messages: list[Any] = [
        {"role": "system", "content": json.dumps(received, sort_keys=True)},
        {"role": "user", "content": received["prompt"]},
    ]
    for _turn in range(8):
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
        for call in message.tool_calls:  # called by its OpenAI name: the server takes either
            result = await session.call_tool(call.function.name, json.loads(call.function.arguments))
            text = "".join(getattr(block, "text", "") for block in result.content)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return 2


async def main() -> int:
    async with stdio_server() as (read, write), ClientSession(read, write) as session:
        code = await converse(session)
        sys.stderr.flush()
        os._exit(code)  # the SDK's stdin thread would keep the process waiting for the engine's end of file
    return 2


if __name__ == "__main__":
    sys.exit(anyio.run(main))
