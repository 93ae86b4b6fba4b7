"""One staging request over an imported run (issue 37): its tool results (`run_results.run_recordings_stage`), its
model calls (`run_model_calls.run_model_calls_stage`), or both, as one answer. Every door (the `capture_from_run`
command, `POST /api/v1/runs/<run_id>/captures/`, the run page's stage form) calls `run_stage`, so "what" means the
same thing everywhere; each result and each call is still staged, skipped or refused on its own."""

from __future__ import annotations

import json
from typing import Any

from .review_rules import ReviewRefused
from .run_model_calls import run_model_calls_stage
from .run_results import RunRecordingsResult, run_recordings_stage
from .scenarios import scenario_for_run

STAGE_WHATS = ("tool-results", "model-calls", "all")
MAX_MODEL_TOOLS_BYTES = 256 * 1024  # the tools offered to a model: a few dozen definitions, never megabytes
MAX_MODEL_TOOLS = 256


def model_tools_parse(raw: Any) -> list[dict[str, Any]] | None:
    """The tools offered to the model, given at staging for a trace that did not record them (GenAI's openai-v2
    instrumentation records none): JSON text or a list, in the OpenAI form the agent sends
    (`[{"type": "function", "function": {"name", "description", "parameters"}}]`), kept exactly as given (the
    request key is the agent's bytes, so nothing is rewritten). None or empty: none given. ReviewRefused (one line)
    for anything else."""
    if raw is None or raw == "" or raw == []:
        return None
    if isinstance(raw, (bytes, str)):
        if len(raw) > MAX_MODEL_TOOLS_BYTES:
            raise ReviewRefused(f"model_tools: at most {MAX_MODEL_TOOLS_BYTES // 1024} KiB of tool definitions")
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ReviewRefused(f"model_tools: not JSON ({exc.args[0][:80]})") from None
    if not isinstance(raw, list) or not raw:
        raise ReviewRefused('model_tools: a list of tool definitions ([{"type": "function", "function": {...}}])')
    if len(raw) > MAX_MODEL_TOOLS:
        raise ReviewRefused(f"model_tools: at most {MAX_MODEL_TOOLS} tool definitions")
    for i, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or item.get("type") != "function"
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise ReviewRefused(
                f'model_tools[{i}]: a tool definition {{"type": "function", "function": {{"name": ..., '
                '"parameters": ...}}} as the agent offers it'
            )
    return raw


def run_stage(
    *,
    run: Any,
    what: str = "tool-results",
    user: Any = None,
    token: Any = None,
    scenario: str | None = None,
    effect_class: str | None = None,
    tool: str | None = None,
    events: list[str] | None = None,
    subtree: str | None = None,
    contract_revisions: Any = None,
    connection: str | None = None,
    model_tools: list[dict[str, Any]] | None = None,
) -> RunRecordingsResult:
    """Stage `what` of `run`: "tool-results" (the default, as before issue 37), "model-calls", or "all". The
    selection by tool or subtree chooses tool results, so it is refused with model calls; `events` chooses among
    both (a tool.result or a model.proposal id). With "all", a part that has nothing to stage (a run without model
    calls) is told in `refused` with its reason while the other part stages; a request-level fault (role, scenario,
    connection) refuses the request, as each part does alone. A run that names no scenario, given none, stages into
    the scenario proposed from it (`scenario_for_run`)."""
    if what not in STAGE_WHATS:
        raise ReviewRefused(f"what: one of {', '.join(STAGE_WHATS)}, got {str(what)[:40]!r}")
    if what != "tool-results" and (tool or subtree):
        raise ReviewRefused(
            "tool and subtree choose tool results: stage model calls by event, or stage what=tool-results"
        )
    if what == "model-calls" and (effect_class or contract_revisions):
        raise ReviewRefused(
            "effect_class and contract_revision are for tool results: a model call is a read under the model.chat "
            "contract the scenario pins (else the built-in one)"
        )
    if not run.scenario_name and not (scenario or "").strip():
        # A run that names no scenario (an imported trace) stages into the one proposed from it, if any
        # (replays.trace_scenarios records the run in the version's source_runs): the flow's next step, no retyping.
        proposed = scenario_for_run(run)
        scenario = proposed.name if proposed is not None else None
    common = dict(run=run, user=user, token=token, scenario=scenario, connection=connection)
    if what == "tool-results":
        return run_recordings_stage(
            **common,
            effect_class=effect_class,
            tool=tool,
            events=events,
            subtree=subtree,
            contract_revisions=contract_revisions,
        )
    if what == "model-calls":
        return run_model_calls_stage(**common, events=events, model_tools=model_tools)
    tool_events = model_events = None
    if events is not None:
        from runs.models import Event

        kinds = dict(Event.objects.filter(run=run, event_id__in=events).values_list("event_id", "kind"))
        tool_events = [e for e in events if kinds.get(e) != "model.proposal"]
        model_events = [e for e in events if kinds.get(e) == "model.proposal"]
    parts: list[RunRecordingsResult] = []
    refusals: list[dict[str, Any]] = []
    errors: list[ReviewRefused] = []
    if tool_events != []:
        try:
            parts.append(
                run_recordings_stage(
                    **common, effect_class=effect_class, events=tool_events, contract_revisions=contract_revisions
                )
            )
        except ReviewRefused as exc:
            errors.append(exc)
            refusals.append({"event": None, "tool": None, "reason": f"tool results: {exc}"})
    if model_events != []:
        try:
            parts.append(run_model_calls_stage(**common, events=model_events, model_tools=model_tools))
        except ReviewRefused as exc:
            errors.append(exc)
            refusals.append({"event": None, "tool": "model.chat", "reason": f"model calls: {exc}"})
    if not parts:
        raise errors[0]
    return RunRecordingsResult(
        run=parts[0].run,
        scenario=parts[0].scenario,
        staged=[s for p in parts for s in p.staged],
        skipped=[s for p in parts for s in p.skipped],
        already=[a for p in parts for a in p.already],
        refused=[r for p in parts for r in p.refused] + refusals,
    )
