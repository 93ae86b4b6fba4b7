"""A small real Inspect AI eval, run by tests/engine/test_format_inspect.py in a child process to produce logs.

Usage: python inspect_producer.py LOG_DIR. Writes, under LOG_DIR:
- `eval/` and `json/`: the task "adder" (two samples, two epochs) in each log format: the built-in mock model
  proposes `add`, then `shell` three times (a passing command, a failing one, and one the approval policy
  rejects), then answers; `shell` runs in Inspect's local sandbox, so the log holds sandbox exec events.
- `broken/`: a sample whose tool raises (the sample errors) and one stopped by a message limit.
- `report/`: the task "report": `shell` runs a focused unittest module that passes, then a broad one that fails, and
  the final answer says "All tests pass and the review request is ready." (the claims the importer extracts, seed 003).

Every model output carries its usage, so the mock model never counts tokens itself (tiktoken would download its
encoding): nothing leaves the machine.
"""

from __future__ import annotations

import sys

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.approval import Approval, ApprovalPolicy, approver, auto_approver
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolError, tool
from inspect_ai.util import sandbox

MODEL = "mockllm/model"


@tool
def add():
    async def execute(x: int, y: int):
        """Add two numbers.

        Args:
            x: First number to add.
            y: Second number to add.

        Returns:
            The sum of the two numbers.
        """
        return x + y

    return execute


@tool
def shell():
    async def execute(cmd: str):
        """Run a shell command in the sandbox.

        Args:
            cmd: The command.

        Returns:
            The command's output.
        """
        result = await sandbox().exec(["sh", "-c", cmd])
        if not result.success:
            raise ToolError(f"exit {result.returncode}: {result.stdout}{result.stderr}")
        return result.stdout

    return execute


@tool
def explode():
    async def execute(reason: str):
        """Fail hard.

        Args:
            reason: Why.

        Returns:
            Nothing: it raises.
        """
        raise RuntimeError(f"the tool broke: {reason}")

    return execute


@approver(name="shell_guard")
def shell_guard():
    async def approve(message, call, view, history):
        if "rm " in str(call.arguments.get("cmd", "")):
            return Approval(decision="reject", explanation="No deletions.")
        return Approval(decision="approve", explanation="Harmless.")

    return approve


def used(output: ModelOutput, input_tokens: int, output_tokens: int) -> ModelOutput:
    output.usage = ModelUsage(
        input_tokens=input_tokens, output_tokens=output_tokens, total_tokens=input_tokens + output_tokens
    )
    return output


def adder_outputs():
    for _ in range(4):  # two samples x two epochs, one after the other (max_samples=1)
        yield used(ModelOutput.for_tool_call(MODEL, "add", {"x": 1, "y": 2}), 10, 5)
        yield used(ModelOutput.for_tool_call(MODEL, "shell", {"cmd": "echo hello"}), 20, 6)
        yield used(ModelOutput.for_tool_call(MODEL, "shell", {"cmd": "echo oops; exit 3"}), 30, 7)
        yield used(ModelOutput.for_tool_call(MODEL, "shell", {"cmd": "rm -rf ./nothing-here"}), 40, 8)
        yield used(ModelOutput.from_content(MODEL, "3"), 50, 1)


def adder() -> Task:
    return Task(
        name="adder",
        version=3,
        dataset=[
            Sample(id="one", input="What is 1+2?", target="3"),
            Sample(id=2, input="What is 1+2, again?", target="3"),
        ],
        solver=[use_tools(add(), shell()), generate()],
        scorer=match(),
        sandbox="local",
    )


def main(log_dir: str) -> None:
    for fmt in ("eval", "json"):
        inspect_eval(
            adder(),
            model=get_model(MODEL, custom_outputs=adder_outputs()),
            epochs=2,
            max_samples=1,
            log_dir=f"{log_dir}/{fmt}",
            log_format=fmt,
            display="none",
            approval=[ApprovalPolicy(shell_guard(), "shell"), ApprovalPolicy(auto_approver(), "*")],
        )
    broken_outputs = iter(
        [
            used(ModelOutput.for_tool_call(MODEL, "explode", {"reason": "on purpose"}), 5, 5),
        ]
    )
    inspect_eval(
        Task(
            name="broken",
            dataset=[Sample(id="boom", input="Break.", target="x")],
            solver=[use_tools(explode()), generate()],
        ),
        model=get_model(MODEL, custom_outputs=broken_outputs),
        log_dir=f"{log_dir}/broken",
        log_format="eval",
        display="none",
        fail_on_error=False,
    )
    focused = (
        "printf 'import unittest\\nclass T(unittest.TestCase):\\n    def test_ok(self):\\n        pass\\n' "
        "> test_focused.py && python3 -m unittest test_focused"
    )
    broad = (
        "printf 'import unittest\\nclass B(unittest.TestCase):\\n    def test_bad(self):\\n        self.fail()\\n' "
        "> test_broad.py && python3 -m unittest test_focused test_broad"
    )
    report_outputs = iter(
        [
            used(ModelOutput.for_tool_call(MODEL, "shell", {"cmd": focused}), 5, 5),
            used(ModelOutput.for_tool_call(MODEL, "shell", {"cmd": broad}), 5, 5),
            used(
                ModelOutput.from_content(
                    MODEL, "I fixed the parser. All tests pass and the review request is ready. I sent the alert."
                ),
                5,
                5,
            ),
        ]
    )
    inspect_eval(
        Task(
            name="report",
            dataset=[Sample(id="fix", input="Fix the parser and report.", target="x")],
            solver=[use_tools(shell()), generate()],
            sandbox="local",
        ),
        model=get_model(MODEL, custom_outputs=report_outputs),
        log_dir=f"{log_dir}/report",
        log_format="eval",
        display="none",
    )
    limited_outputs = iter([used(ModelOutput.for_tool_call(MODEL, "add", {"x": 2, "y": 2}), 5, 5) for _ in range(5)])
    inspect_eval(
        Task(
            name="limited",
            dataset=[Sample(id="loop", input="Add forever.", target="x")],
            solver=[use_tools(add()), generate()],
            message_limit=3,
        ),
        model=get_model(MODEL, custom_outputs=limited_outputs),
        log_dir=f"{log_dir}/limited",
        log_format="eval",
        display="none",
    )


if __name__ == "__main__":
    main(sys.argv[1])
