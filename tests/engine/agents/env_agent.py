"""An agent that tells its model what the sandbox handed it: its environment's per-replay candidates (HOME, TMPDIR,
OPENAI_BASE_URL), its working folder and a temporary folder's name it makes. For issue 36's determinism test: two
replays of one branch must see the same, so the model request it makes is the same. Not imported by the tests."""

from __future__ import annotations

import json
import os
import sys
import tempfile

from openai import OpenAI


def main() -> int:
    seen = {name: os.environ.get(name) for name in ("HOME", "TMPDIR", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    seen["cwd"] = os.getcwd()
    seen["tempdir"] = tempfile.gettempdir()
    try:
        OpenAI(max_retries=0).chat.completions.create(
            model="n17q-env-model", messages=[{"role": "user", "content": json.dumps(seen, sort_keys=True)}]
        )
    except Exception as exc:  # the replay stops at this request (no fixture): that is the point
        print(f"env agent: {type(exc).__name__}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
