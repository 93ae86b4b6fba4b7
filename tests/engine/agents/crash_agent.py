"""An agent that crashes (the agent-contract tests, issue 36): `start` raises before it speaks MCP; `after-call`
opens its MCP session the way a real agent does (the `mcp` SDK's ClientSession over its stdio), calls one tool and
then raises inside the session. Its last stderr line is the exception's; the run must end at once naming it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.server.stdio import stdio_server


class AgentCrashed(RuntimeError):
    pass


async def main(mode: str) -> int:
    async with stdio_server() as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        call = json.loads(Path("call.json").read_text())  # the tool and arguments the test chose
        await session.call_tool(call["tool"], call["arguments"])
        raise AgentCrashed(f"crash-agent gave up after calling {call['tool']}")
    return 0


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "start"
    print(f"crash-agent: starting ({mode})", file=sys.stderr, flush=True)
    if mode == "start":
        raise AgentCrashed("crash-agent refused to start: no task for me")
    sys.exit(anyio.run(main, mode))
