"""A real Inspect AI eval whose sample carries a secret, for the secret tests of kept originals (issue 32).

Usage: python inspect_token_producer.py LOG_DIR, with the secret in the environment (N17Q_TEST_SECRET, built at run
time by the test). One sample, one epoch, `.eval` format (zstd members, as Inspect writes them), or `.json` with
N17Q_TEST_LOG_FORMAT=json: the user's input and the mock model's answer both hold the secret, so it sits in the sample
member, its summary and the journal.
"""

from __future__ import annotations

import os
import sys

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

MODEL = "mockllm/model"


def main(log_dir: str) -> None:
    secret = os.environ["N17Q_TEST_SECRET"]
    output = ModelOutput.from_content(MODEL, f"Use the token {secret} for the deploy.")
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    inspect_eval(
        Task(
            name="deploy",
            dataset=[Sample(id="deploy", input=f"Deploy with GITHUB_TOKEN={secret}", target="ok")],
            solver=[generate()],
            scorer=match(),
        ),
        model=get_model(MODEL, custom_outputs=iter([output])),
        log_dir=log_dir,
        log_format="json" if os.environ.get("N17Q_TEST_LOG_FORMAT") == "json" else "eval",
        display="none",
    )


if __name__ == "__main__":
    main(sys.argv[1])
