"""`manage.py stage_model_answer REPLAY [--answer FILE|-] [--content TEXT] [--tool-calls JSON] [--copy-similar]
[--missing N] [--user NAME] --json`: the model-fixture loop's command (issue 36, docs/agents.md "Model fixtures").

Stages, for review, the exact model request replay REPLAY stopped on (the normalized request of its `model.chat`
tool.call) with a proposed answer: typed (`--answer`: a chat completion or an assistant message as JSON, from a file
or `-` for stdin; or `--content` text and/or `--tool-calls`, a JSON list of `{name, arguments}` or OpenAI tool
calls), or copied from the nearest recorded model answer of the replay's scenario version (`--copy-similar`, which
says the fixture it copied). Same intake and four-eyes review as any capture (`replays.model_answers`).

Prints the `capture --json` keys (`staged`, `redactions`, `findings`, `promotable`, `blockers`, `scenario`, `tool`,
`request_digest`) plus `run`, `missing`, `answer` ("typed" | "copied") and `copied_from` ({fixture, scenario,
shared_messages} or null). Refusals are one line; nothing is staged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.model_answers import MAX_ANSWER_BYTES, parse_answer
from replays.model_answers import (
    ModelAnswerForbidden,
    ModelAnswerNotFound,
    ModelAnswerRefused,
    replay_model_answer_stage,
)


class Command(JsonCommand):
    help = "Stage a proposed answer to the model request a replay stopped on, for review."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("replay", help="the replay's number (replay --json says it)")
        super().add_arguments(parser)
        parser.add_argument(
            "--answer", metavar="FILE", help="a chat completion or assistant message as JSON; '-' reads stdin"
        )
        parser.add_argument("--content", help="the assistant's text (built into a completion)")
        parser.add_argument(
            "--tool-calls", metavar="JSON", help='the assistant\'s tool calls, e.g. [{"name": "x", "arguments": {}}]'
        )
        parser.add_argument(
            "--copy-similar", action="store_true", help="copy the nearest model answer of the scenario version"
        )
        parser.add_argument("--missing", type=int, help="which missing fixture of the replay (default: its model one)")
        parser.add_argument("--user", help="who stages it (who may then not approve it); default: nobody")

    def run(self, *, replay: str, **options: Any) -> dict[str, Any]:
        user = self.named_user(options.get("user"))
        try:
            answer = None
            if options.get("answer") is not None:
                answer = parse_answer(self._read(options["answer"]))
            tool_calls = None
            if options.get("tool_calls") is not None:
                tool_calls = parse_answer(options["tool_calls"], "--tool-calls")
                if not isinstance(tool_calls, list):
                    raise ModelAnswerRefused("--tool-calls: a JSON list of tool calls")
            staged = replay_model_answer_stage(
                replay_id=replay,
                index=options.get("missing"),
                user=user,
                answer=answer,
                content=options.get("content"),
                tool_calls=tool_calls,
                copy_similar=bool(options.get("copy_similar")),
            )
        except (ModelAnswerNotFound, ModelAnswerForbidden, ModelAnswerRefused) as exc:
            raise CommandError(" ".join(str(exc).splitlines())) from None
        return staged.to_json()

    def _read(self, where: str) -> bytes:
        if where == "-":
            return sys.stdin.buffer.read(MAX_ANSWER_BYTES + 1)
        path = Path(where)
        try:
            with path.open("rb") as handle:
                return handle.read(MAX_ANSWER_BYTES + 1)
        except OSError as exc:
            raise ModelAnswerRefused(f"--answer {where}: cannot be read ({exc.strerror or exc})") from None

    def human(self, result: dict[str, Any]) -> str:
        copied = result.get("copied_from")
        how = f"copied from {copied['fixture']} of {copied['scenario']}" if copied else "typed"
        line = f"staged {result['staged']}: the model answer ({how}) to {result['missing']} of {result['run']}"
        if not result["promotable"]:
            line += f"; not promotable yet: {'; '.join(result['blockers'])}"
        return line + ". It satisfies nothing until a reviewer other than you approves it."
