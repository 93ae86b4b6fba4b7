"""`manage.py replay RUN --mode {reconstruction,rerun,counterfactual} [--vary KEY=VALUE] [--checkpoint ID]
[--model-connection NAME] (--wait | --inline) --json`.

The model connection (issues 18, 33, docs/agents.md) is the counterfactual form's: with an agent decider, its model
calls are relayed live by the worker through the approved model connection NAME, to the endpoint it names with the
one credential reference it names (held in the worker's environment; the value is never typed, stored or sent into
the sandbox); the run is a fresh comparison run.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from replays.launch import launch_options
from replays.models import Replay
from replays.services import ReplayRefused, parse_vary, replay_create, replay_execute, replay_json, replay_launch
from runs.models import Run


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
            help="the one variable a counterfactual changes (decider, policy, human, human.<event id>, fault, clock, "
            "budget.<resource>, delay.<tool>)",
        )
        parser.add_argument(
            "--checkpoint",
            default="start",
            metavar="ID",
            help="branch from this recorded checkpoint event of the run (default: start); the history before it is "
            "rebuilt from the recording's own decisions, the variable applies from it",
        )
        parser.add_argument(
            "--scenario",
            metavar="NAME@VERSION",
            help="the scenario version to replay in (default: the run's recorded version: the one it names, or the "
            "first one recorded from it; never a newer or regression version unless named here)",
        )
        parser.add_argument(
            "--model-connection",
            metavar="NAME",
            help="with an agent decider: relay its model calls live through this approved model connection (an admin "
            "registers its endpoint and credential reference, another person approves it; a fresh comparison run, "
            "not a replay)",
        )
        how = parser.add_mutually_exclusive_group(required=True)
        how.add_argument("--inline", action="store_true", help="run the worker's task in this process, still sandboxed")
        how.add_argument("--wait", action="store_true", help="enqueue for a worker and wait for it")
        parser.add_argument("--timeout", type=float, default=600, help="--wait: seconds to wait (default 600)")
        parser.add_argument(
            "--ping-timeout",
            type=float,
            default=3,
            help="--wait: seconds to wait for a worker to answer a ping before anything is queued (default 3)",
        )
        parser.add_argument(
            "--claim-timeout",
            type=float,
            default=60,
            help="--wait: seconds a queued replay may wait for a worker to take it (default 60)",
        )

    def run(self, **options: Any) -> dict[str, Any]:
        run = Run.objects.filter(run_id=options["run"]).first()
        if run is None:
            raise CommandError(f"no run {options['run']!r}")
        mode, vary, scenario = options["mode"], parse_vary_or_fail(options["vary"]), options.get("scenario")
        checkpoint = options.get("checkpoint") or "start"
        choices = launch_options(run)
        if not scenario and choices.recorded is not None:
            # Explicitly, not left to the service's own lookup: a regression or promoted version is recorded from
            # the run too, and must never replace the version the run was recorded in without being asked for.
            scenario = choices.recorded.ref
        chosen = choices.choice(scenario) if scenario else None
        connection = options.get("model_connection") or None
        try:
            if options["inline"]:
                replay = replay_execute(
                    replay_create(
                        run, mode=mode, vary=vary, scenario=scenario, checkpoint=checkpoint, model_connection=connection
                    ).pk
                )
            else:
                _worker_answers(options["ping_timeout"])
                replay = replay_launch(
                    run, mode=mode, vary=vary, scenario=scenario, checkpoint=checkpoint, model_connection=connection
                )
                replay = _wait(replay, options["timeout"], options["claim_timeout"])
        except ReplayRefused as exc:
            flag = {
                "scenario": "--scenario",
                "vary": "--vary",
                "checkpoint": "--checkpoint",
                "model": "--model-connection",
            }.get(exc.field or "")
            raise CommandError(f"{exc} ({flag})" if flag else str(exc)) from None
        result = replay_json(replay)
        # Added key (DESIGN §8: extend only): the scenario version replayed in, and how it relates to the run.
        result["scenario"] = (
            {"ref": replay.scenario_version.ref, "label": chosen.label if chosen else "named with --scenario"}
            if replay.scenario_version
            else None
        )
        result["checkpoint"] = replay.checkpoint  # added key (issue 18): the checkpoint it branched from
        # Added keys (issue 18): the declared model connection (URL and the credential's NAME, never its value) and
        # what the run is: a replay, or a fresh comparison run when the agent's model answered live.
        result["model_connection"] = dict(replay.model_connection) or None
        # Added key (issue 33): the relay's calls, those its per-replay cap refused, and whether the cap stopped it.
        result["model_calls"] = replay.model_relay_record
        result["run_label"] = (replay.environment or {}).get("run_label")
        if replay.state in (Replay.State.REFUSED, Replay.State.FAILED, Replay.State.INTERRUPTED):
            raise CommandError(f"replay {replay.pk} {replay.state}: {replay.error}")
        return result

    def human(self, result: dict[str, Any]) -> str:
        lines = [
            f"replay {result['replay']}: {result['mode']} -> run {result['run']} ({result['state']}, "
            f"isolation {result['isolation']})"
        ]
        if result.get("scenario"):
            lines.append(f"  scenario: {result['scenario']['ref']} ({result['scenario']['label']})")
        if result.get("model_connection"):
            connection = result["model_connection"]
            lines.append(
                f"  model: relayed live through {connection.get('connection')} to {connection['base_url']} with the "
                f"credential named {connection['credential_name']} "
                f"({result.get('run_label') or 'a fresh comparison run'})"
            )
            calls = result.get("model_calls") or {}
            if calls.get("stopped_by_cap"):
                lines.append(
                    f"  model calls: {calls['calls']}, then the cap of {calls['cap']} refused {calls['refused_by_cap']}"
                )
        if result.get("checkpoint") not in (None, "start"):
            lines.append(f"  from checkpoint: {result['checkpoint']} (the history before it re-run as recorded)")
        lines += [
            f"  missing: {m['tool']} r{m['contract_revision']} {m['request_digest']}: {m['reason']}"
            for m in result["missing"]
        ]
        lines += [f"  {f['code']} {f['from']} -> {f['to']}: {f['message']}" for f in result["findings"]]
        return "\n".join(lines)


def parse_vary_or_fail(items: list[str]) -> dict[str, str]:
    try:
        return parse_vary(items)
    except ReplayRefused as exc:
        raise CommandError(str(exc)) from None


def _broker() -> str:
    from celery import current_app as app

    return app.connection().as_uri()  # the password, if any, is masked


def _worker_answers(timeout: float) -> None:
    """Refuse before queueing anything when no worker is there to take it."""
    from celery import current_app as app

    queue = settings.N17Q_REPLAY_QUEUE
    try:
        answers = app.control.inspect(timeout=timeout).active_queues() or {}
    except Exception as exc:  # kombu's connection errors: the broker itself is unreachable
        raise CommandError(f"the broker at {_broker()} cannot be reached ({exc}); nothing was queued") from None
    if not any(q.get("name") == queue for queues in answers.values() for q in queues or []):
        heard = f" ({len(answers)} answered, none consuming it)" if answers else ""
        raise CommandError(
            f"no Celery worker consuming queue {queue!r} answered within {timeout:g} s on {_broker()}{heard}; "
            "nothing was queued. Start one with `celery -A n17q_site worker` (or use --inline)"
        )


def _wait(replay: Replay, timeout: float, claim_timeout: float) -> Replay:
    started = time.monotonic()
    while not replay.ended:
        waited = time.monotonic() - started
        if replay.state == Replay.State.QUEUED and waited > claim_timeout:
            raise CommandError(
                f"replay {replay.pk} was queued but no worker took it within {claim_timeout:g} s; it stays queued "
                "and runs when a worker takes it"
            )
        if waited > timeout:
            raise CommandError(f"replay {replay.pk} is still {replay.state} after {timeout:g} s")
        time.sleep(0.1)
        replay.refresh_from_db()
    return replay
