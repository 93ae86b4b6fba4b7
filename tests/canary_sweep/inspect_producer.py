"""A real Inspect AI eval whose log holds the canary sweep's secrets, run in a child process by inspect_logs().

Usage: python inspect_producer.py LOG_DIR TEXTS_JSON. TEXTS_JSON holds {"input", "tool_output", "answer",
"metadata"}: the sample's input, what the `fetch_config` tool returns, the model's final answer and the sample's
metadata. The mock model proposes `fetch_config` and then answers; one log is written in each format, under
LOG_DIR/eval and LOG_DIR/json. Nothing leaves the machine (see tests/engine/inspect_producer.py).
"""

from __future__ import annotations

import json
import sys

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import tool

MODEL = "mockllm/model"


def main(log_dir: str, texts_path: str) -> None:
    with open(texts_path) as fh:
        texts = json.load(fh)

    @tool
    def fetch_config():
        async def execute(name: str):
            """Fetch a service's configuration.

            Args:
                name: The service.

            Returns:
                Its configuration.
            """
            return texts["tool_output"]

        return execute

    def outputs():
        for output in (
            ModelOutput.for_tool_call(MODEL, "fetch_config", {"name": "deploy"}),
            ModelOutput.from_content(MODEL, texts["answer"]),
        ):
            output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
            yield output

    for fmt in ("eval", "json"):
        inspect_eval(
            Task(
                name="deploy",
                dataset=[Sample(id="one", input=texts["input"], target="done", metadata=texts["metadata"])],
                solver=[use_tools(fetch_config()), generate()],
                scorer=match(),
            ),
            model=get_model(MODEL, custom_outputs=outputs()),
            log_dir=f"{log_dir}/{fmt}",
            log_format=fmt,
            display="none",
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
