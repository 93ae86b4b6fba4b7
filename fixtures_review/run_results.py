"""The trace as the recording: an imported run's tool results staged as recordings (`run_recordings_stage`),
each with its provenance (run, result event, call), through the same intake, record policy and four-eyes review as a
capture. Only answers that came from the world are staged; a result staged before is reported, never staged twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError

from n17q_engine.package import PackageError

from . import connections, intake
from .approval import promotion_blockers
from .copying import _recorded_body
from .models import ScenarioVersion, StagedRecording
from .review_rules import _OUTCOME_STATUS, CAPTURE_PERM, ReviewRefused
from .scenarios import ScenarioRefused, loaded_scenario
from .staging import StageResult, _stage_all, capture_digest_key

# The review services log under the one name they had before the split (a log line's `logger` is unchanged).
log = logging.getLogger("fixtures_review.services")


# Results whose answer came from the world; `fixture` and `derived` ones were answered by this console's own
# fixtures (or computed), and staging them would pass a fixture off as an observation.
RECORDED_ORIGINS = ("historical", "live")
MAX_RUN_RESULTS = 200  # results staged in one request; more: narrow it by tool or event
_WORLD_KINDS = ("checkpoint", "world.observation", "world.transition")


@dataclass
class RunRecordingsResult:
    run: str
    scenario: str
    staged: list[tuple[dict[str, Any], StageResult]]  # (the tool.result body, its StageResult)
    skipped: list[dict[str, Any]]  # {event, tool, reason}: nothing a recording could be made of
    already: list[dict[str, Any]]  # {event, recording, state}: staged from this result before
    refused: list[dict[str, Any]] = field(default_factory=list)  # {event, tool, reason[, observation]}

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "scenario": self.scenario,
            "recordings": [
                {**result.to_json(), "event": body["id"], "call": body.get("call_id"), "outcome": body.get("outcome")}
                for body, result in self.staged
            ],
            "skipped": self.skipped,
            "already": self.already,
            "refused": self.refused,
        }


@dataclass(frozen=True)
class ContractRevisions:
    """The contract revisions given at staging: `default` for every tool, `by_tool` for one tool (it wins over
    `default` for that tool). Empty: none given."""

    default: int | None = None
    by_tool: Mapping[str, int] = field(default_factory=dict)

    def given(self, tool: str) -> int | None:
        return self.by_tool.get(tool, self.default)


def contract_revisions_parse(values: Iterable[Any] | None) -> ContractRevisions:
    """The contract revisions as the doors take them: each value `N` (every tool) or `TOOL=N` (that tool), N a
    positive integer; a text value may hold several, separated by commas or spaces (the run page's one field).
    ReviewRefused (one line naming the field) for anything else."""
    default: int | None = None
    by_tool: dict[str, int] = {}
    for value in values or ():
        if isinstance(value, int) and not isinstance(value, bool):
            parts = [str(value)]
        elif isinstance(value, str):
            parts = value.replace(",", " ").split()
        else:
            raise ReviewRefused("contract_revision: a positive integer, or TOOL=N")
        for part in parts:
            tool, sep, number = part.rpartition("=")
            revision = int(number) if number.isascii() and number.isdigit() and len(number) <= 18 else 0
            if revision < 1 or (sep and not tool):
                raise ReviewRefused(f"contract_revision: a positive integer, or TOOL=N (got {part[:80]!r})")
            if by_tool.get(tool, revision) != revision or (not tool and default not in (None, revision)):
                raise ReviewRefused(f"contract_revision: {tool[:80] or 'every tool'}'s given twice, differently")
            if tool:
                by_tool[tool] = revision
            else:
                default = revision
    return ContractRevisions(default, by_tool)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _spans_of(body: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The span an imported event came from and the spans above it (OTLP: `otlp.span`, `otlp.ancestors`; Inspect:
    `inspect.span`, `inspect.ancestors`), or (None, [])."""
    for key in ("otlp", "inspect"):
        ref = body.get(key)
        if isinstance(ref, dict) and isinstance(ref.get("span"), str):
            above = ref.get("ancestors")
            return ref["span"], [a for a in above if isinstance(a, str)] if isinstance(above, list) else []
    return None, []


def run_recordings_stage(
    *,
    run: Any,
    user: Any = None,
    token: Any = None,
    scenario: str | None = None,
    effect_class: str | None = None,
    tool: str | None = None,
    events: Iterable[str] | None = None,
    subtree: str | None = None,
    contract_revisions: ContractRevisions | None = None,
    connection: str | None = None,
) -> RunRecordingsResult:
    """Stage a selection of an imported run's tool results as recordings, each with its provenance (run, result
    event, call), through the same intake, record policy and four-eyes review as a capture.

    The selection: every `tool.result` of the run, narrowed by `tool`, by `events` (result ids) and by `subtree`
    (an event id or a span id: the results under that span of an imported trace; a tool.call's own results; a
    tool.result itself). Each selected result is then, one by one, staged, skipped (nothing a recording could be
    made of: answered by a fixture, `unknown` outcome, no call, no object of arguments, its body expired) or
    refused (a recording it could be, but not now: no contract revision known or one that disagrees with the
    call's, effect class unknown, intake refused it, the record policy refused it: `observation` names the kept
    trace). A result staged before is reported in `already`, never staged twice.

    The contract revision: the call's when it records a positive one (a given one that differs refuses that
    result, naming both); else the one given (`contract_revisions`, per tool or for all); else the revision of the
    contract the scenario version pins for the tool; else that result is refused. The scenario is the run's; a run
    without one needs `scenario`. The effect class is the scenario's contract's for the tool, else `effect_class`.

    `ReviewRefused` (one line) only for the request itself: the role, the scenario, the connection, a field, a
    selection that matches nothing, more than MAX_RUN_RESULTS to stage."""
    from runs.models import Event, RunBlob
    from runs.retention import run_blob_expiries

    if user is not None and getattr(user, "is_authenticated", False) and not user.has_perm(CAPTURE_PERM):
        raise ReviewRefused("staging a run's results needs the operator or reviewer role")
    scenario = (scenario or "").strip() or None
    name = run.scenario_name or scenario
    if not name:
        raise ReviewRefused(
            f"scenario: run {run.run_id} names no scenario: say which scenario its results were recorded in "
            "(--scenario, or the scenario field)"
        )
    if run.scenario_name and scenario and scenario != run.scenario_name:
        raise ReviewRefused(
            f"scenario: run {run.run_id} was recorded in {run.scenario_name}, not {scenario}: its results are "
            f"staged into {run.scenario_name}"
        )
    if effect_class not in (None, "", *intake.EFFECT_CLASSES):
        raise ReviewRefused(f"effect_class: one of {', '.join(intake.EFFECT_CLASSES)}, got {effect_class!r}")
    connection = (connection or "").strip()
    if not connection:
        raise ReviewRefused(
            f"connection: say which reviewed connection the tool calls of run {run.run_id} went through (--connection, "
            "or the connection field): record mode stages only what came through an approved connection"
        )
    given = contract_revisions or ContractRevisions()
    subtree = (subtree or "").strip() or None
    version = None
    if run.scenario_name == name and run.scenario_version is not None:
        version = ScenarioVersion.objects.filter(name=name, version=run.scenario_version).first()
    if version is None:
        version = ScenarioVersion.objects.filter(name=name).order_by("-version").first()
    contracts = None
    if version is not None:
        try:
            contracts = loaded_scenario(version).contracts
        except (ScenarioRefused, PackageError):
            contracts = None
    wanted = set(events) if events is not None else None
    results = Event.objects.filter(run=run, kind="tool.result")
    if wanted is not None:
        results = results.filter(event_id__in=wanted)
    result_rows = list(results.order_by("seq").values_list("seq", "body")[: MAX_RUN_RESULTS * 10 + 1])
    if len(result_rows) > MAX_RUN_RESULTS * 10:
        raise ReviewRefused(
            f"run {run.run_id} holds more than {MAX_RUN_RESULTS * 10} tool results: stage them by tool, by event or "
            "by subtree"
        )
    if wanted is not None:
        unknown = sorted(wanted - {body.get("id") for _, body in result_rows})
        if unknown:
            raise ReviewRefused(f"run {run.run_id} holds no tool.result {unknown[0]!r}")
    if not result_rows:
        raise ReviewRefused(f"run {run.run_id} holds no tool result to stage")
    if subtree is not None:
        result_rows = _under(run, subtree, result_rows)
    call_ids = {body.get("call_id") for _, body in result_rows if isinstance(body.get("call_id"), str)}
    calls = {
        body.get("id"): body
        for body in Event.objects.filter(run=run, kind="tool.call", event_id__in=call_ids).values_list(
            "body", flat=True
        )
    }
    unknown_tools = sorted(set(given.by_tool) - {str(c.get("tool")) for c in calls.values()})
    if unknown_tools:
        raise ReviewRefused(
            f"contract_revision: no selected result of run {run.run_id} is of tool {unknown_tools[0][:80]!r}"
        )
    held = {
        r.source_event: r
        for r in StagedRecording.objects.filter(
            source_run=run.run_id, source_event__in=[body.get("id") for _, body in result_rows]
        )
    }
    skipped: list[dict[str, Any]] = []
    already: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    chosen: list[tuple[int, dict[str, Any], dict[str, Any], int, str]] = []
    # A body whose bytes the retention sweep removed cannot become a recording: skipped, saying so (docs/retention.md).
    expiries = run_blob_expiries(run, (body["blob"] for _, body in result_rows if isinstance(body.get("blob"), str)))
    selected = 0
    for seq, body in result_rows:
        call = calls.get(body.get("call_id"))
        called = str((call or {}).get("tool") or "")
        if tool and called != tool:
            continue
        selected += 1

        def skip(reason: str, body: dict[str, Any] = body, called: str = called) -> None:
            skipped.append({"event": body.get("id"), "tool": called or None, "reason": reason})

        def refuse(reason: str, body: dict[str, Any] = body, called: str = called) -> None:
            refused.append({"event": body.get("id"), "tool": called or None, "reason": reason})

        if call is None:
            skip(f"it names no tool.call of the run (call_id {body.get('call_id')!r})")
        elif body.get("id") in held:
            prior = held[body["id"]]
            already.append({"event": body["id"], "recording": prior.public_id, "state": prior.state})
        elif body.get("origin") not in RECORDED_ORIGINS:
            skip(f"origin {body.get('origin')}: the answer came from a fixture or was derived, not from the world")
        elif body.get("outcome") not in _OUTCOME_STATUS:
            skip(f"outcome {body.get('outcome')}: not an observation a fixture can hold")
        elif not isinstance(call.get("request"), dict):
            skip("its call's request is not an object of arguments")
        elif body.get("blob") in expiries:
            skip(f"its body {expiries[body['blob']].sentence}")
        else:
            revision, why = _revision(call, called, given, contracts, version)
            effect = _effect(called, contracts, effect_class, version, name)
            if revision is None:
                refuse(why)
            elif effect.startswith("effect_class:"):
                refuse(effect)
            else:
                chosen.append((seq, body, call, revision, effect))
    if tool and not selected:
        raise ReviewRefused(f"run {run.run_id} holds no result of tool {tool!r}")
    if len(chosen) > MAX_RUN_RESULTS:
        raise ReviewRefused(
            f"run {run.run_id} has {len(chosen)} results to stage, more than {MAX_RUN_RESULTS} at once: stage them "
            "by tool (--tool), by event (--event) or by subtree (--subtree)"
        )
    media = dict(RunBlob.objects.filter(run=run).values_list("blob__digest", "media_type")[:10_000]) if chosen else {}
    key = capture_digest_key()
    actor = user if getattr(user, "is_authenticated", False) else None
    staged: list[tuple[dict[str, Any], StageResult]] = []
    for seq, body, call, revision, effect in chosen:
        called = str(call["tool"])
        outcome = body["outcome"]
        headers = {"Content-Type": media[body["blob"]]} if body.get("blob") in media else {}
        entry = {"event": body["id"], "tool": called}
        try:
            recorded_body = _recorded_body(run, body.get("blob"))
        except ReviewRefused as exc:
            refused.append({**entry, "reason": str(exc)})
            continue
        capture = intake.tool_call_capture(
            scenario=name,
            tool=called,
            contract_revision=revision,
            connection=connection,
            captured_at=_recorded_instant(body, run),
            source_revision=None,
            effect_class=effect,
            args=call["request"],
            status=_OUTCOME_STATUS[outcome],
            body=recorded_body,
            response_headers=headers,
            world_revision=_world_revision_before(run, seq),
        )
        try:
            red = intake.intake(capture, digest_key=key)
            admitted = connections.capture_admit(red.capture, door="run-result", actor=user, token=token)
        except connections.CaptureRefused as exc:
            refused.append({**entry, "reason": str(exc), "observation": exc.observation.public_id})
            continue
        except intake.CaptureError as exc:
            refused.append({**entry, "reason": f"intake: {exc}"})
            continue
        item = dict(
            red=red,
            admitted=admitted,
            origin=StagedRecording.Origin.RUN_RESULT,
            outcome=outcome,
            fidelity_note=(
                f"staged from the result run {run.run_id} recorded in {body['id']} (origin {body.get('origin')}, "
                f"outcome {outcome}); observed then, never reviewed before"
            ),
            copied_from={
                "run": run.run_id,
                "event": body["id"],
                "call": call.get("id"),
                "scenario": version.ref if version is not None else name,
                "request_digest": call.get("request_digest"),
                "result_origin": body.get("origin"),
                "absent": body.get("absent") or {},
                "contract_revision": revision,
            },
            source=(run.run_id, body["id"]),
        )
        try:
            (recording,) = _stage_all([item], actor=actor, token=token)
        except IntegrityError:
            # Another request staged this result at the same moment: the constraint on (source_run, source_event).
            raced = StagedRecording.objects.filter(source_run=run.run_id, source_event=body["id"]).first()
            if raced is None:
                refused.append({**entry, "reason": "the database refused it (a concurrent change): stage it again"})
            else:
                already.append({"event": body["id"], "recording": raced.public_id, "state": raced.state})
            continue
        except intake.CaptureError as exc:  # the contract the capture names disagrees with its effect class
            refused.append({**entry, "reason": str(exc)})
            continue
        staged.append((body, StageResult(recording, promotion_blockers(recording))))
    log.info(
        "staged %d recordings from the results of run %s (%d refused, %d skipped)",
        len(staged),
        run.run_id,
        len(refused),
        len(skipped),
    )
    return RunRecordingsResult(
        run=run.run_id, scenario=name, staged=staged, skipped=skipped, already=already, refused=refused
    )


def _revision(
    call: Mapping[str, Any], tool: str, given: ContractRevisions, contracts: Any, version: Any
) -> tuple[int | None, str]:
    """The contract revision a result is staged under, or None and why it is refused."""
    recorded, said = _positive(call.get("contract_revision")), given.given(tool)
    if recorded is not None:
        if said is not None and said != recorded:
            return None, (
                f"contract revision: its call records revision {recorded} of {tool}, {said} was given: a recorded "
                "revision is kept (stage it without that revision, or by another selection)"
            )
        return recorded, ""
    if said is not None:
        return said, ""
    if contracts is not None and tool in contracts:
        return int(contracts.get(tool).revision), ""
    where = f"{version.ref} pins no contract for it" if version is not None else "the scenario has no version held"
    return None, (
        f"contract revision: its call records none for {tool} and {where}: give it (--contract-revision N or "
        f"{tool}=N, or the contract_revision field)"
    )


def _effect(tool: str, contracts: Any, effect_class: str | None, version: Any, name: str) -> str:
    """The effect class of `tool`'s results, or a line starting `effect_class:` saying why it is unknown."""
    if contracts is not None and tool in contracts:
        return str(contracts.get(tool).effect_class)
    if effect_class:
        return effect_class
    where = f"{version.ref} pins no contract for it" if version is not None else f"no version of {name} is held"
    return (
        f"effect_class: unknown for {tool} ({where}): say whether it reads or mutates (--effect-class, or the "
        "effect_class field)"
    )


def _under(run: Any, subtree: str, rows: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """The results under `subtree`: an event id (a tool.result: itself; a tool.call: its results and, in an
    imported trace, the results under its span; another event of an imported trace: the results under its span) or
    a span id of an imported trace (OTLP or Inspect). ReviewRefused when the run holds neither, or when the event
    names no span and is no tool event."""
    from runs.models import Event

    event = Event.objects.filter(run=run, event_id=subtree).values_list("kind", "body").first()
    span: str | None = None
    calls: set[str] = set()
    if event is not None:
        kind, body = event
        if kind == "tool.result":
            return [(seq, b) for seq, b in rows if b.get("id") == subtree]
        if kind == "tool.call":
            calls.add(subtree)
        ref = body.get("otlp")
        # Inspect's spans enclose the tool events written in them, not one call: a call stands for itself there.
        span = ref["span"] if isinstance(ref, dict) and isinstance(ref.get("span"), str) else None
        if span is None and not calls:
            ref = body.get("inspect")
            span = ref["span"] if isinstance(ref, dict) and isinstance(ref.get("span"), str) else None
        if span is None and not calls:
            raise ReviewRefused(
                f"subtree: event {subtree} of run {run.run_id} ({kind}) names no span of an imported trace and is no "
                "tool.call or tool.result"
            )
    else:
        span = subtree
    picked = []
    for seq, body in rows:
        own, above = _spans_of(body)
        if body.get("call_id") in calls or (span is not None and (own == span or span in above)):
            picked.append((seq, body))
    if event is None and not picked:
        holds = (
            Event.objects.filter(run=run, body__otlp__span=subtree).exists()
            or Event.objects.filter(run=run, body__inspect__span=subtree).exists()
        )
        if not holds:
            raise ReviewRefused(f"subtree: run {run.run_id} holds no event or span {subtree[:200]!r}")
    if not picked:
        raise ReviewRefused(f"subtree: run {run.run_id} holds no tool result under {subtree[:200]!r}")
    return picked


def _recorded_instant(body: Mapping[str, Any], run: Any) -> str:
    """When the result was recorded: its wall time when it is an instant with a zone, else the run's creation."""
    wall = (body.get("at") or {}).get("wall")
    if isinstance(wall, str):
        try:
            moment = datetime.fromisoformat(wall.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return wall
    return run.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _world_revision_before(run: Any, seq: int) -> int:
    """The world revision the run had reached before event `seq`: its last checkpoint, observation or transition
    (0, the starting world, when none came before)."""
    from runs.models import Event

    last = (
        Event.objects.filter(run=run, kind__in=_WORLD_KINDS, seq__lt=seq)
        .order_by("-seq")
        .values_list("kind", "body")
        .first()
    )
    if last is None:
        return 0
    kind, body = last
    value = body.get("revision_after") if kind == "world.transition" else body.get("world_revision")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else 0
