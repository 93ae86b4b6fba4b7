"""An agent for the canary sweep's replay doors: it sends its model what its folder's `said.txt` holds (or a
greeting), prints it to stderr, then sends the model's answer back to it once more, and stops. What it says and
what its model answers are the agent run's output the worker records. Uses the `openai` client only; run by the
sandbox as `python canary_agent.py`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from openai import OpenAI

MODEL = "canary-test-model"


def main() -> int:
    said = Path(__file__).with_name("said.txt")
    text = said.read_text() if said.exists() else "Say hello."
    client = OpenAI(max_retries=0)
    messages = [{"role": "user", "content": text}]
    first = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    answer = first.choices[0].message.content or ""
    print(f"agent: asked {text!r}, heard {answer!r}", file=sys.stderr)
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"You said: {answer}"}]
    client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # the MCP server keeps our stdin open (see tests/engine/agents/mcp_openai_agent.py)
