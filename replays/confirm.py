"""A launch goes ahead only when what the person was shown is what would launch now (DESIGN §6), for every door.

`launch_preview` computes the pre-launch summary for exactly the inputs given (mode, scenario version, the one
variable, checkpoint, model connection) and its digest (`launch.summary_digest`): the launch form shows it, the API
answers it (`POST /api/v1/replays/` without a digest, or with a stale one). `replay_launch_confirmed` launches only
when the digest the client carries equals the one computed now, and once: the same person confirming the same
summary of the same run again while that replay is still queued or running (a double-clicked button, a client
retrying after a lost answer) gets that replay back instead of a second one. The web form (replays.views) and the
API (replays.api) both call these two; neither holds a rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from fixtures_review.models import ScenarioVersion
from n17q_engine.package import VARY_KEYS, vary_value_problem
from runs.models import Run

from .launch import BUTTON_FOR_MODE, launch_options, launch_summary, scenario_loaded, summary_digest, vary_check
from .models import Replay
from .services import MODES, ReplayRefused, launch_shape_check, model_connection_chosen, replay_launch

# What a door says when the digest it carries is not the summary's (the form's words since issue 6).
STALE = "What would launch changed since you looked: review it again."
UNSEEN = "Review the summary before launching: this form did not carry the summary it was launched from."


@dataclass(frozen=True)
class LaunchPreview:
    """The summary a launch of these inputs would store on its `Replay`, and its digest."""

    summary: dict[str, Any]
    digest: str
    version: ScenarioVersion | None


class LaunchUnconfirmed(Exception):
    """The launch carried no summary digest, or one that is not the summary's now: nothing was queued. `preview`
    is the summary as it is now, for the door to show again."""

    def __init__(self, message: str, preview: LaunchPreview) -> None:
        super().__init__(message)
        self.preview = preview


def launch_preview(
    run: Run,
    *,
    mode: str,
    version: ScenarioVersion | None,
    vary: dict[str, str],
    checkpoint: str,
    model_connection: str | None,
    complete: bool = True,
) -> LaunchPreview:
    """The summary of a launch, as the launch form shows it. Raises VaryRefused or ReplayRefused (one line) for a
    variation, checkpoint or model connection that cannot launch. `complete=False`: the inputs are still being
    chosen (the form's page before a counterfactual's variable is picked), so a launch's shape (one variable for a
    counterfactual, none otherwise) is not yet required; a launch always requires it."""
    if complete:
        launch_shape_check(run, mode=mode, vary=vary)
    vary_check(scenario_loaded(version) if mode != "reconstruction" else None, vary)
    chosen = model_connection_chosen(mode, vary, model_connection)
    summary = launch_summary(run, mode=mode, vary=vary, version=version, checkpoint=checkpoint, model_connection=chosen)
    return LaunchPreview(summary, summary_digest(summary), version)


def launch_version(run: Run, *, mode: str, scenario: str | None) -> ScenarioVersion | None:
    """The scenario version a launch of `mode` uses, from the versions the launch page offers for the run
    (`launch_options(run, others=True)`: its recorded version, newer and regression ones, authored ones); none
    named: the recorded one. A reconstruction uses no scenario and names the recorded one. Refuses, in one line,
    a mode the run cannot be launched in and a version not offered."""
    if mode not in MODES:
        raise ReplayRefused(f"mode must be one of {', '.join(MODES)}, got {mode!r}", field="mode")
    options = launch_options(run, others=True)
    option = options.buttons[BUTTON_FOR_MODE[mode].slug]
    if not option.available:
        raise ReplayRefused(option.reason, field="scenario")
    if mode == "reconstruction":
        if scenario and (options.recorded is None or scenario != options.recorded.ref):
            raise ReplayRefused(
                "a reconstruction re-projects the run as recorded and uses no scenario version: leave scenario out",
                field="scenario",
            )
        return options.recorded
    if not scenario:
        return options.choices[0].version if options.choices else None
    chosen = options.choice(scenario)
    if chosen is None:
        offered = ", ".join(c.ref for c in options.choices[:12])
        raise ReplayRefused(
            f"scenario {scenario!r} is not one of the versions offered for run {run.run_id} ({offered})",
            field="scenario",
        )
    return chosen.version


def vary_from_mapping(vary: Any) -> dict[str, str]:
    """`{"decider": "careful"}` as the API takes it: declared variables (n17q_engine.package.VARY_KEYS) with text
    values. The count and each value's meaning are checked by the launch itself, as for the form and the command."""
    if vary is None:
        return {}
    if not isinstance(vary, dict):
        raise ReplayRefused('vary: an object of one variable and its value, e.g. {"decider": "careful"}', field="vary")
    out: dict[str, str] = {}
    for key, value in vary.items():
        if not str(key).isprintable() or len(str(key)) > 250:
            raise ReplayRefused(f"vary: {str(key)[:40]!r} is not a variable's name", field="vary")
        if str(key).split(".", 1)[0] not in VARY_KEYS:
            raise ReplayRefused(f"vary.{key}: not a declared variable (one of {', '.join(VARY_KEYS)})", field="vary")
        if not isinstance(value, str) or not value:
            raise ReplayRefused(f"vary.{key}: give the value as text", field="vary")
        problem = vary_value_problem(str(key), value)
        if problem:
            raise ReplayRefused(problem, field="vary")
        out[str(key)] = value
    return out


def _in_flight(run: Run, user: Any, mode: str, digest: str) -> Replay | None:
    """The same person's queued or running replay of this run whose stored summary has this digest."""
    if not getattr(user, "is_authenticated", False):
        return None
    mine = Replay.objects.filter(
        source_run=run, created_by=user, mode=mode, state__in=(Replay.State.QUEUED, Replay.State.RUNNING)
    ).order_by("id")
    return next((r for r in mine if summary_digest(r.environment) == digest), None)


def replay_launch_confirmed(
    run: Run,
    *,
    mode: str,
    version: ScenarioVersion | None,
    vary: dict[str, str],
    checkpoint: str,
    model_connection: str | None,
    digest: str | None,
    user: Any,
) -> tuple[Replay, bool]:
    """Launch (queue) a replay whose summary the person confirmed by its digest: (the replay, True), or (the same
    person's replay of this very summary still queued or running, False). Raises LaunchUnconfirmed with the summary
    as it is now when `digest` is empty or not that summary's, and VaryRefused or ReplayRefused for inputs that
    cannot launch; nothing is queued then."""
    preview = launch_preview(
        run, mode=mode, version=version, vary=vary, checkpoint=checkpoint, model_connection=model_connection
    )
    if not digest:
        raise LaunchUnconfirmed(UNSEEN, preview)
    if digest != preview.digest:
        raise LaunchUnconfirmed(STALE, preview)
    with transaction.atomic():
        # One launch of a run at a time: two confirmations of one summary arriving together cannot both queue.
        Run.objects.select_for_update().filter(pk=run.pk).values_list("pk", flat=True).first()
        same = _in_flight(run, user, mode, digest)
        if same is not None:
            return same, False
        replay = replay_launch(
            run,
            mode=mode,
            vary=vary,
            scenario=version.ref if version else None,
            checkpoint=checkpoint,
            user=user,
            model_connection=model_connection,
        )
        stored = summary_digest(replay.environment)
        if stored != digest:  # it changed between the check and the launch: nothing is queued (rolled back)
            raise LaunchUnconfirmed(STALE, LaunchPreview(replay.environment, stored, version))
    return replay, True
