"""The trace as the recording: an imported run's tool results staged as recordings (`run_recordings_stage`),
each with its provenance (run, result event, call), through the same intake, record policy and four-eyes review as a
capture. Only answers that came from the world are staged; a result staged before is reported, never staged twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError

from n17q_engine.package import PackageError, load_scenario

from . import connections, intake
from .approval import promotion_blockers
from .copying import _recorded_body
from .models import ScenarioVersion, StagedRecording
from .review_rules import _OUTCOME_STATUS, CAPTURE_PERM, ReviewRefused
from .scenarios import ScenarioRefused, scenario_package
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
    skipped: list[dict[str, Any]]  # {event, tool, reason}
    already: list[dict[str, Any]]  # {event, recording, state}: staged from this result before

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
        }


def run_recordings_stage(
    *,
    run: Any,
    user: Any = None,
    token: Any = None,
    scenario: str | None = None,
    effect_class: str | None = None,
    tool: str | None = None,
    events: Iterable[str] | None = None,
    connection: str | None = None,
) -> RunRecordingsResult:
    """Stage the tool results of an imported run as recordings, each with its provenance (run, result event,
    call), through the same intake and four-eyes review as a capture.

    Staged: each `tool.result` whose answer came from the world (origin historical or live) with an outcome a
    fixture can hold (ok, empty, not_found, denied, deleted, error, timeout: the failures are real answers a replay
    must be able to give). Skipped with the reason: results answered by a fixture, `unknown` outcomes, results
    without their call or with a body the run does not hold. A result staged before is reported in `already`,
    never staged twice. The scenario is the run's; a run without one needs `scenario`. The effect class is the
    scenario's contract's for the tool, else `effect_class`. All or nothing. `ReviewRefused` if refused.

    `connection` names the reviewed connection the run's tool calls went through: the results are captures of it,
    judged by the record policy like any other (a mutation result of a live connection is refused, with its trace
    kept: `connections.CaptureRefused`)."""
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
    version = None
    if run.scenario_name == name and run.scenario_version is not None:
        version = ScenarioVersion.objects.filter(name=name, version=run.scenario_version).first()
    if version is None:
        version = ScenarioVersion.objects.filter(name=name).order_by("-version").first()
    contracts = None
    if version is not None:
        try:
            contracts = load_scenario(scenario_package(version)).contracts
        except (ScenarioRefused, PackageError):
            contracts = None
    wanted = set(events) if events is not None else None
    results = Event.objects.filter(run=run, kind="tool.result")
    if wanted is not None:
        results = results.filter(event_id__in=wanted)
    result_rows = list(results.order_by("seq").values_list("seq", "body")[: MAX_RUN_RESULTS * 10 + 1])
    if len(result_rows) > MAX_RUN_RESULTS * 10:
        raise ReviewRefused(
            f"run {run.run_id} holds more than {MAX_RUN_RESULTS * 10} tool results: stage them by tool or by event"
        )
    if wanted is not None:
        unknown = sorted(wanted - {body.get("id") for _, body in result_rows})
        if unknown:
            raise ReviewRefused(f"run {run.run_id} holds no tool.result {unknown[0]!r}")
    if not result_rows:
        raise ReviewRefused(f"run {run.run_id} holds no tool result to stage")
    call_ids = {body.get("call_id") for _, body in result_rows if isinstance(body.get("call_id"), str)}
    calls = {
        body.get("id"): body
        for body in Event.objects.filter(run=run, kind="tool.call", event_id__in=call_ids).values_list(
            "body", flat=True
        )
    }
    held = {
        r.source_event: r
        for r in StagedRecording.objects.filter(
            source_run=run.run_id, source_event__in=[body.get("id") for _, body in result_rows]
        )
    }
    skipped: list[dict[str, Any]] = []
    already: list[dict[str, Any]] = []
    chosen: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    # A body whose bytes the retention sweep removed cannot become a recording: skipped, saying so (docs/retention.md).
    expiries = run_blob_expiries(run, (body["blob"] for _, body in result_rows if isinstance(body.get("blob"), str)))
    for seq, body in result_rows:
        call = calls.get(body.get("call_id"))
        called = str((call or {}).get("tool") or "")
        if tool and called != tool:
            continue

        def skip(reason: str, body: dict[str, Any] = body, called: str = called) -> None:
            skipped.append({"event": body.get("id"), "tool": called or None, "reason": reason})

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
        elif not isinstance(call.get("contract_revision"), int) or isinstance(call.get("contract_revision"), bool):
            skip("its call names no contract revision")
        elif body.get("blob") in expiries:
            skip(f"its body {expiries[body['blob']].sentence}")
        else:
            chosen.append((seq, body, call))
    if tool and not (chosen or skipped or already):
        raise ReviewRefused(f"run {run.run_id} holds no result of tool {tool!r}")
    if len(chosen) > MAX_RUN_RESULTS:
        raise ReviewRefused(
            f"run {run.run_id} has {len(chosen)} results to stage, more than {MAX_RUN_RESULTS} at once: stage them "
            "by tool (--tool) or by event (--event)"
        )
    if not chosen:
        if already:
            return RunRecordingsResult(run.run_id, name, [], skipped, already)
        first = "; ".join(f"{s['event']}: {s['reason']}" for s in skipped[:3])
        raise ReviewRefused(f"run {run.run_id} has no tool result to stage ({first})")
    media = dict(RunBlob.objects.filter(run=run).values_list("blob__digest", "media_type")[:10_000])
    key = capture_digest_key()
    items = []
    for seq, body, call in chosen:
        called = str(call["tool"])
        if contracts is not None and called in contracts:
            effect = contracts.get(called).effect_class
        elif effect_class:
            effect = effect_class
        else:
            where = f"{version.ref} pins no contract for it" if version is not None else f"no version of {name} is held"
            raise ReviewRefused(
                f"effect_class: unknown for {called} ({where}): say whether it reads or mutates (--effect-class, "
                "or the effect_class field)"
            )
        outcome = body["outcome"]
        headers = {"Content-Type": media[body["blob"]]} if body.get("blob") in media else {}
        capture = intake.tool_call_capture(
            scenario=name,
            tool=called,
            contract_revision=call["contract_revision"],
            connection=connection,
            captured_at=_recorded_instant(body, run),
            source_revision=None,
            effect_class=effect,
            args=call["request"],
            status=_OUTCOME_STATUS[outcome],
            body=_recorded_body(run, body.get("blob")),
            response_headers=headers,
            world_revision=_world_revision_before(run, seq),
        )
        try:
            red = intake.intake(capture, digest_key=key)
            admitted = connections.capture_admit(red.capture, door="run-result", actor=user, token=token)
        except connections.CaptureRefused as exc:
            raise connections.CaptureRefused(f"{body['id']}: {exc}", exc.observation) from None
        except intake.CaptureError as exc:
            raise ReviewRefused(f"{body['id']} cannot be staged: {exc}") from None
        items.append(
            dict(
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
                },
                source=(run.run_id, body["id"]),
            )
        )
    actor = user if getattr(user, "is_authenticated", False) else None
    try:
        staged = _stage_all(items, actor=actor, token=token)
    except IntegrityError:
        raise ReviewRefused(
            f"results of run {run.run_id} were being staged by another request at the same moment: run it again to "
            "see them as already staged"
        ) from None
    log.info("staged %d recordings from the results of run %s", len(staged), run.run_id)
    return RunRecordingsResult(
        run=run.run_id,
        scenario=name,
        staged=[(body, StageResult(r, promotion_blockers(r))) for (_, body, _), r in zip(chosen, staged, strict=True)],
        skipped=skipped,
        already=already,
    )


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
