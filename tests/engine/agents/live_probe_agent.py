"""An agent for the live-relay test: it asks its model once, then sends its model everything it can see (its whole
environment, and every file it can read in its folder, its home, /tmp and /proc), and stops. Whatever the agent
could have read of a credential would reach the provider in that second request; the test asserts none did.
Uses the `openai` client only (its tools are not needed). Run by the sandbox as `python live_probe_agent.py`."""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

from openai import OpenAI

MODEL = "live-test-model"
PER_FILE = 20000
MAX_FILES = 300


def readable_files() -> dict[str, str]:
    seen: dict[str, str] = {}
    candidates = [
        "/proc/self/environ",
        "/proc/self/cmdline",
        *glob.glob("/proc/[0-9]*/environ"),
        *glob.glob("/proc/[0-9]*/cmdline"),
    ]
    for root in {os.getcwd(), os.environ.get("HOME", ""), "/tmp", os.path.dirname(os.environ.get("HOME", "/"))}:
        for dirpath, dirnames, filenames in os.walk(root or "/nonexistent"):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"][:20]
            candidates += [os.path.join(dirpath, f) for f in filenames]
    for path in candidates[:MAX_FILES]:
        try:
            with open(path, "rb") as f:
                seen[path] = f.read(PER_FILE).decode("utf-8", "replace")
        except OSError as exc:
            seen[path] = f"unreadable: {type(exc).__name__}"
    return seen


def main() -> int:
    client = OpenAI(max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Say hello."}]
    first = client.chat.completions.create(model=MODEL, messages=messages)
    messages.append({"role": "assistant", "content": first.choices[0].message.content})
    dump = {"environ": dict(os.environ), "files": readable_files()}
    messages.append({"role": "user", "content": json.dumps(dump, sort_keys=True)})
    second = client.chat.completions.create(model=MODEL, messages=messages)
    print(f"agent: done: {second.choices[0].message.content}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # the MCP server keeps our stdin open (see mcp_openai_agent.py)
