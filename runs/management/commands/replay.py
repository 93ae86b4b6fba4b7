"""`manage.py replay RUN --mode {reconstruction,rerun,counterfactual} [--vary KEY=VALUE] (--wait | --inline) --json`."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandError

from runs.management.base import JsonCommand
from runs.models import Replay, Run
from runs.replays import ReplayRefused, parse_vary, replay_create, replay_execute, replay_json


class Command(JsonCommand):
    help = "Replay a run in fixtures (sandboxed) and import the result as a child run."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("run", help="the id of the run to replay")
        parser.add_argument("--mode", required=True, choices=["reconstruction", "rerun", "counterfactual"])
        parser.add_argument(
            "--vary",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="the one variable a counterfactual changes (decider, policy, human, fault, clock, "
            "budget.<resource>, delay.<tool>)",
        )
        parser.add_argument(
            "--scenario",
            metavar="NAME@VERSION",
            help="the scenario version to replay in (default: the one the run names or was recorded into)",
        )
        how = parser.add_mutually_exclusive_group(required=True)
        how.add_argument("--inline", action="store_true", help="run the worker's task in this process, still sandboxed")
        how.add_argument("--wait", action="store_true", help="enqueue for a worker and wait for it")
        parser.add_argument("--timeout", type=float, default=600, help="--wait: seconds to wait (default 600)")

    def run(self, **options: Any) -> dict[str, Any]:
        run = Run.objects.filter(run_id=options["run"]).first()
        if run is None:
            raise CommandError(f"no run {options['run']!r}")
        try:
            replay = replay_create(
                run, mode=options["mode"], vary=parse_vary(options["vary"]), scenario=options.get("scenario")
            )
        except ReplayRefused as exc:
            raise CommandError(str(exc)) from None
        if options["inline"]:
            replay = replay_execute(replay.pk)
        else:
            from runs.tasks import replay_run

            replay_run.delay(replay.pk)
            deadline = time.monotonic() + options["timeout"]
            while replay.state in (Replay.State.QUEUED, Replay.State.RUNNING):
                if time.monotonic() > deadline:
                    raise CommandError(f"replay {replay.pk} is still {replay.state} after {options['timeout']:g} s")
                time.sleep(0.2)
                replay.refresh_from_db()
        result = replay_json(replay)
        if replay.state in (Replay.State.REFUSED, Replay.State.FAILED):
            raise CommandError(f"replay {replay.pk} {replay.state}: {replay.error}")
        return result

    def human(self, result: dict[str, Any]) -> str:
        lines = [
            f"replay {result['replay']}: {result['mode']} -> run {result['run']} ({result['state']}, "
            f"isolation {result['isolation']})"
        ]
        lines += [
            f"  missing: {m['tool']} r{m['contract_revision']} {m['request_digest']}: {m['reason']}"
            for m in result["missing"]
        ]
        lines += [f"  {f['code']} {f['from']} -> {f['to']}: {f['message']}" for f in result["findings"]]
        return "\n".join(lines)
