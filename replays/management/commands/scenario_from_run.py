"""`manage.py scenario_from_run RUN [--scenario NAME] [--effect-class TOOL=read|mutation ...] [--propose]
[--launch AGENT [--inline]] [--user NAME] --json`: scenario from a trace (issue 37 point 3,
`replays.trace_scenarios`).

Without `--propose` or `--launch` it prints the flow's status (`trace_scenario_status`). `--propose` mints a scenario
version from the run (contracts inferred; the effect class of a tool the trace does not say is given with
`--effect-class`). `--launch AGENT` launches a counterfactual from the start whose decider is `agent:AGENT` (`recorded`
for the recorded decisions) against the latest version; the run you name is its recorded run. Running the command is
the confirmation: it launches the summary it computed (`summary` in the answer). `--inline` executes the replay here
instead of queueing it for a worker. Prints `{"status": ..., "proposed": ..., "replay": ...}`; refusals are one line.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from replays.services import replay_execute, replay_json
from replays.trace_scenarios import (
    TraceScenarioRefused,
    trace_scenario_launch,
    trace_scenario_launch_preview,
    trace_scenario_propose,
    trace_scenario_status,
)
from runs.models import Run


def parse_effect_classes(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        tool, sep, value = item.rpartition("=")
        if not sep or not tool or value not in ("read", "mutation"):
            raise CommandError(f"--effect-class {item!r}: write TOOL=read or TOOL=mutation")
        out[tool] = value
    return out


class Command(JsonCommand):
    help = "Scenario from a trace: the flow's status; propose a scenario version from a run; launch an agent against it"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run", help="the imported run's id")
        super().add_arguments(parser)
        parser.add_argument("--scenario", help="the scenario's name (default: the one proposed from the run)")
        parser.add_argument(
            "--effect-class", action="append", help="TOOL=read or TOOL=mutation, for a tool the trace does not say"
        )
        parser.add_argument("--propose", action="store_true", help="mint a scenario version from the run")
        parser.add_argument("--launch", metavar="AGENT", help="launch a replay of this registered agent (or recorded)")
        parser.add_argument("--inline", action="store_true", help="with --launch: run the replay here, now")
        parser.add_argument("--user", help="who proposes or launches (default: nobody)")

    def run(self, *, run: str, **options: Any) -> dict[str, Any]:
        stored = Run.objects.filter(run_id=run).first()
        if stored is None:
            raise CommandError(f"no run {run!r}")
        user = self.named_user(options.get("user"))
        effect_classes = parse_effect_classes(options.get("effect_class"))
        if options.get("inline") and not options.get("launch"):
            raise CommandError("--inline runs the replay --launch starts: give --launch AGENT")
        out: dict[str, Any] = {"proposed": None, "replay": None}
        name = options.get("scenario") or None
        try:
            if options.get("propose"):
                if not name:
                    raise CommandError("--propose needs --scenario NAME: the name of the scenario to mint")
                proposal = trace_scenario_propose(run=stored, name=name, effect_classes=effect_classes, user=user)
                out["proposed"] = proposal.to_json()
                name = proposal.version.name
            elif effect_classes:
                raise CommandError("--effect-class is given with --propose")
            if options.get("launch"):
                preview = trace_scenario_launch_preview(stored, agent=options["launch"])
                replay, _created = trace_scenario_launch(
                    run=stored, agent=options["launch"], user=user, digest=preview.digest
                )
                if options.get("inline"):
                    replay = replay_execute(replay.pk)
                out["replay"] = {**replay_json(replay), "summary": preview.summary}
        except TraceScenarioRefused as exc:
            raise CommandError(str(exc)) from None
        out["status"] = trace_scenario_status(stored, name)
        return out

    def human(self, result: dict[str, Any]) -> str:
        status = result["status"]
        lines = [f"{status['run']}: scenario {status['scenario'] or '(none proposed)'}"]
        if result["proposed"]:
            lines.append(f"  proposed {result['proposed']['scenario']}")
        latest = status["latest"]
        if latest:
            lines.append(f"  {latest['ref']} answers {latest['answered']} of {latest['calls']} tool calls")
        rec = status["recordings"]
        lines.append(f"  recordings: {rec['staged']} staged, {rec['approved']} approved, {rec['rejected']} rejected")
        if result["replay"]:
            replay = result["replay"]
            lines.append(f"  replay {replay['replay']}: {replay['replay_state']} (run {replay['run']})")
        lines += [f"  blocks: {b}" for b in status["blocks"]]
        return "\n".join(lines)
