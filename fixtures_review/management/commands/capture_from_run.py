"""`manage.py capture_from_run RUN [--what tool-results|model-calls|all] [--tool T] [--event ID ...] [--subtree ID]
[--contract-revision N|TOOL=N ...] [--model-tools FILE] [--scenario S] [--effect-class C] --connection C --json`: the
trace as the recording. Stages a selection of an imported run's tool results, and/or its model calls as
`model.chat` recordings, each with its provenance (run, event), through the same intake, record policy and
four-eyes review as a capture (`fixtures_review.run_staging.run_stage`).

Prints `{"run", "scenario", "recordings": [<capture answer> + "event", "call", "outcome"], "skipped": [{"event",
"tool", "reason"}], "already": [{"event", "recording", "state"}], "refused": [{"event", "tool", "reason"[,
"observation"]}]}`: each result staged, skipped or refused on its own; a result staged before is listed in `already`
and never staged twice. A bad request (a field, a selection that matches nothing) is one line; nothing is stored.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.intake import CaptureError
from fixtures_review.run_staging import MAX_MODEL_TOOLS_BYTES, STAGE_WHATS, model_tools_parse, run_stage
from fixtures_review.services import ReviewRefused, contract_revisions_parse
from runs.models import Run


class Command(JsonCommand):
    help = (
        "Stage a run's recorded tool results and/or model calls for review (the trace as the recording); nothing "
        "becomes a fixture."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run", help="the run's id")
        super().add_arguments(parser)
        parser.add_argument(
            "--what",
            choices=STAGE_WHATS,
            default="tool-results",
            help="the run's tool results (the default), its model calls (as model.chat recordings), or all",
        )
        parser.add_argument(
            "--model-tools",
            metavar="FILE",
            help="the tools offered to the model, as the agent offers them (a JSON list of OpenAI tool definitions), "
            "for a trace that did not record them; '-' reads stdin",
        )
        parser.add_argument("--tool", help="only the results of this tool")
        parser.add_argument("--event", action="append", help="only this tool.result event (repeatable)")
        parser.add_argument(
            "--subtree", help="only the results under this span (a span id, or an event id) of an imported trace"
        )
        parser.add_argument(
            "--contract-revision",
            action="append",
            metavar="N|TOOL=N",
            help="the contract revision of calls that record none (repeatable; TOOL=N for one tool); default: the "
            "revision the scenario pins for the tool",
        )
        parser.add_argument("--scenario", help="the scenario, for a run that names none")
        parser.add_argument(
            "--effect-class", choices=("read", "mutation"), help="for tools the scenario pins no contract for"
        )
        parser.add_argument(
            "--connection", help="the reviewed connection the run's tool calls went through (required: record policy)"
        )
        parser.add_argument("--user", help="who stages them (who may then not approve them); default: nobody")

    def run(self, *, run: str, **options: Any) -> dict[str, Any]:
        stored = Run.objects.filter(run_id=run).first()
        if stored is None:
            raise CommandError(f"no run {run!r}")
        user = self.named_user(options.get("user"))
        try:
            revisions = contract_revisions_parse(options.get("contract_revision"))
            result = run_stage(
                run=stored,
                what=options.get("what") or "tool-results",
                model_tools=model_tools_parse(self._model_tools(options.get("model_tools"))),
                user=user,
                scenario=options.get("scenario"),
                effect_class=options.get("effect_class"),
                tool=options.get("tool"),
                events=options.get("event"),
                subtree=options.get("subtree"),
                contract_revisions=revisions,
                connection=options.get("connection"),
            )
        except (ReviewRefused, CaptureError) as exc:
            raise CommandError(str(exc)) from None
        return result.to_json()

    def _model_tools(self, path: str | None) -> str | None:
        if not path:
            return None
        try:
            if path == "-":
                return sys.stdin.read(MAX_MODEL_TOOLS_BYTES + 1)
            with open(path, encoding="utf-8") as fh:
                return fh.read(MAX_MODEL_TOOLS_BYTES + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--model-tools {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None

    def human(self, result: dict[str, Any]) -> str:
        lines = [
            f"{result['run']} ({result['scenario']}): {len(result['recordings'])} staged, {len(result['refused'])} "
            f"refused, {len(result['skipped'])} skipped"
        ]
        lines += [
            f"  {r['event']} -> {r['staged']} ({r['tool']}, {r['outcome']})"
            + ("" if r["promotable"] else f": not promotable yet: {'; '.join(r['blockers'])}")
            for r in result["recordings"]
        ]
        lines += [f"  {a['event']}: already staged as {a['recording']} ({a['state']})" for a in result["already"]]
        lines += [f"  {s['event']} skipped: {s['reason']}" for s in result["skipped"]]
        lines += [f"  {r['event']} refused: {r['reason']}" for r in result["refused"]]
        return "\n".join(lines)
