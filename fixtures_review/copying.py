"""Staging a candidate for a replay's missing fixture (a `fixture.missing` event of the replay's run): "Copy
similar" (`recording_copy_similar`: keyed by the missing request, its response copied from a similar fixture or
empty, synthetic) and "Copy the recorded answer" (`recording_copy_recorded`: the answer the replayed run recorded for
the same request, observed though never reviewed). Both go through the same intake and four-eyes review as a
capture; the copier may not approve the copy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from django.utils import timezone

from . import intake
from .models import ScenarioVersion, StagedRecording
from .review_rules import _OUTCOME_STATUS, CAPTURE_PERM, REVIEW_PERM, ReviewRefused
from .scenarios import loaded_scenario, scenario_bodies, source_expired_sentence
from .staging import _stage, capture_digest_key

# The review services log under the one name they had before the split (a log line's `logger` is unchanged).
log = logging.getLogger("fixtures_review.services")


def recording_copy_similar(
    *, replay_run: Any, missing_event_id: str, like_fixture_id: str | None, user: Any
) -> StagedRecording:
    """'Copy similar' on a fixture.missing event of a replay's run: a staged candidate with its own identity,
    keyed by the missing call's normalized request (read from the run's tool.call that `call_id` names), whose
    response is copied from fixture `like_fixture_id` of the run's scenario version (or empty when None),
    marked synthetic. It never satisfies anything until a reviewer approves it (and it was not the same user)."""
    from runs.models import Event

    if not (getattr(user, "is_authenticated", False) and (user.has_perm(REVIEW_PERM) or user.has_perm(CAPTURE_PERM))):
        raise ReviewRefused("copying a fixture into staging needs the reviewer or operator role")
    missing = Event.objects.filter(run=replay_run, event_id=missing_event_id).first()
    if missing is None or missing.kind not in ("fixture.missing", "fixture.ambiguous"):
        raise ReviewRefused(f"{replay_run.run_id} has no fixture.missing event {missing_event_id!r}")
    body = missing.body
    call_id = body.get("call_id")
    call = Event.objects.filter(run=replay_run, event_id=call_id, kind="tool.call").first() if call_id else None
    if call is None:
        raise ReviewRefused(
            f"{missing_event_id} names no tool call (call_id), so there is no request to key a candidate by: "
            f"{body.get('reason', '')}".rstrip(": ")
        )
    scenario_ref = body.get("scenario") or {}
    scenario = ScenarioVersion.objects.filter(
        name=scenario_ref.get("name") or "", version=scenario_ref.get("version") or 0
    ).first()
    if scenario is None:
        raise ReviewRefused(f"the run's scenario version {scenario_ref!r} is not held")
    tool = call.body.get("tool")
    revision = call.body.get("contract_revision")
    contracts = loaded_scenario(scenario).contracts
    effect_class = contracts.get(tool).effect_class if tool in contracts else "read"
    response_body: Any = None
    outcome = "empty"
    transition = None
    note = (
        "synthetic: no response was recorded for this request; the response is empty "
        f"(copy similar in {replay_run.run_id})"
    )
    like = None
    if like_fixture_id:
        like = next((f for f in scenario.fixture_items if f.get("id") == like_fixture_id), None)
        if like is None:
            raise ReviewRefused(f"{scenario.ref} holds no fixture {like_fixture_id!r}")
        if like.get("tool") != tool:
            raise ReviewRefused(
                f"fixture {like_fixture_id} answers {like.get('tool')}, not {tool}: another tool's answer is never a "
                "candidate"
            )
        held = scenario_bodies(scenario).body(like)
        if held.expired:
            assert held.expiry is not None and held.digest is not None
            raise ReviewRefused(
                f"copy similar: {source_expired_sentence(like_fixture_id, held.digest, held.expiry)}: there is no "
                "body to copy (capture the response again, or copy another fixture)"
            )
        response_body = held.value
        outcome = like.get("response", {}).get("outcome", "ok")
        transition = like.get("transition")
        note = (
            f"synthetic: the response is copied from fixture {like_fixture_id} of {scenario.ref}, recorded for "
            f"another request; it was never observed for this one (copy similar in {replay_run.run_id})"
        )
    else:
        recorded = _recorded_answer(replay_run, body)
        if recorded is not None:
            raise ReviewRefused(
                f"the source run recorded an answer to this request ({recorded[1].get('outcome')}, "
                f"{recorded[1]['id']}): copy the recorded answer instead of an empty one"
            )
    capture = intake.tool_call_capture(
        scenario=scenario.name,
        tool=tool,
        contract_revision=revision,
        connection=(like or {}).get("provenance", {}).get("connection") or "copy-similar",
        captured_at=timezone.now().isoformat().replace("+00:00", "Z"),
        source_revision=None,
        effect_class=effect_class,
        args=call.body.get("request") or {},
        status=200,
        body=response_body,
        proposed_transition=transition if effect_class == "mutation" else None,
        world_revision=body.get("world_revision") or 0,
    )
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
    except intake.CaptureError as exc:
        raise ReviewRefused(f"the candidate cannot be staged: {exc}") from None
    recording = _stage_copy(
        red,
        origin=StagedRecording.Origin.COPY_SIMILAR,
        actor=user,
        token=None,
        outcome=outcome,
        synthetic=True,
        fidelity_note=note,
        copied_from={
            "run": replay_run.run_id,
            "event": missing_event_id,
            "call": call_id,
            "fixture": like_fixture_id,
            "scenario": scenario.ref,
            "request_digest": call.body.get("request_digest"),
        },
    )
    log.info("copy similar: staged %s from %s/%s", recording.public_id, replay_run.run_id, missing_event_id)
    return recording


# --- copy the recorded answer ------------------------------------------------------------------------------------


def _recorded_answer(replay_run: Any, missing: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the source run's tool.call, its tool.result) for the request a replay's `fixture.missing` names, or None
    when the run that was replayed never made that request (or recorded no result for it)."""
    from runs.models import Event

    source = getattr(replay_run, "parent", None)
    if source is None:
        return None
    call = None
    for body in (
        Event.objects.filter(run=source, kind="tool.call", body__tool=missing.get("tool"))
        .order_by("seq")
        .values_list("body", flat=True)[:500]
    ):
        if body.get("request_digest") == missing.get("request_digest") and body.get("contract_revision") == missing.get(
            "contract_revision"
        ):
            call = body
            break
    if call is None:
        return None
    result = (
        Event.objects.filter(run=source, kind="tool.result", body__call_id=call["id"])
        .values_list("body", flat=True)
        .first()
    )
    return (call, result) if result is not None else None


def _recorded_body(run: Any, digest: str | None) -> Any:
    """A recorded result's body: its blob read from the blob store, JSON when it parses, else text."""
    from runs.blob_access import run_blob_open, run_blob_row

    if not digest:
        return None
    held = run_blob_row(run, digest)
    if held is None:
        raise ReviewRefused(f"the recorded body {digest} is not held with run {run.run_id}")
    handle = run_blob_open(held)  # this run's own hold decides, whatever another run holds or stored since
    if handle is None:
        raise ReviewRefused(f"the recorded body {digest} of run {run.run_id} is no longer held")
    with handle:
        data = handle.read()
    try:
        return json.loads(data)
    except ValueError:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            return {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}


def _stage_copy(red: Any, **fields: Any) -> StagedRecording:
    """`_stage`, its refusals (a copy's effect class not its contract's, issue 33) told as a reviewer's refusal."""
    try:
        return _stage(red, **fields)
    except intake.CaptureError as exc:
        raise ReviewRefused(f"the copy cannot be staged: {exc}") from None


def recording_copy_recorded(*, replay_run: Any, missing_event_id: str, user: Any) -> StagedRecording:
    """'Copy the recorded answer' on a fixture.missing event of a replay's run: a staged candidate keyed by the
    missing request, whose outcome, status and body are those the source run recorded in its tool.result for the
    same request. It goes through the same intake (redaction, secret scan) and review as any capture; the copier
    may not approve it. Not synthetic: it was observed, though never reviewed."""
    from runs.models import Event

    if not (getattr(user, "is_authenticated", False) and (user.has_perm(REVIEW_PERM) or user.has_perm(CAPTURE_PERM))):
        raise ReviewRefused("copying a recorded answer into staging needs the reviewer or operator role")
    missing = Event.objects.filter(run=replay_run, event_id=missing_event_id).first()
    if missing is None or missing.kind not in ("fixture.missing", "fixture.ambiguous"):
        raise ReviewRefused(f"{replay_run.run_id} has no fixture.missing event {missing_event_id!r}")
    body = missing.body
    answer = _recorded_answer(replay_run, body)
    if answer is None:
        raise ReviewRefused("the run that was replayed never recorded an answer to this request: nothing to copy")
    call, result = answer
    outcome = result.get("outcome")
    if outcome not in _OUTCOME_STATUS:
        raise ReviewRefused(f"the recorded answer {result['id']} is {outcome}: not an observation a fixture can hold")
    scenario_ref = body.get("scenario") or {}
    scenario = ScenarioVersion.objects.filter(
        name=scenario_ref.get("name") or "", version=scenario_ref.get("version") or 0
    ).first()
    if scenario is None:
        raise ReviewRefused(f"the run's scenario version {scenario_ref!r} is not held")
    tool = str(call.get("tool") or "")
    contracts = loaded_scenario(scenario).contracts
    effect_class = contracts.get(tool).effect_class if tool in contracts else "read"
    source = replay_run.parent
    wall = ((result.get("at") or {}).get("wall")) or timezone.now().isoformat().replace("+00:00", "Z")
    capture = intake.tool_call_capture(
        scenario=scenario.name,
        tool=tool,
        contract_revision=call.get("contract_revision"),
        connection=f"recorded:{source.run_id}",
        captured_at=wall,
        source_revision=None,
        effect_class=effect_class,
        args=call.get("request"),
        status=_OUTCOME_STATUS[outcome],
        body=_recorded_body(source, result.get("blob")),
        world_revision=body.get("world_revision") or 0,
    )
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
    except intake.CaptureError as exc:
        raise ReviewRefused(f"the recorded answer cannot be staged: {exc}") from None
    recording = _stage_copy(
        red,
        origin=StagedRecording.Origin.COPY_RECORDED,
        actor=user,
        token=None,
        outcome=outcome,
        fidelity_note=(
            f"copied from the answer run {source.run_id} recorded in {result['id']} (origin "
            f"{result.get('origin')}, outcome {outcome}); observed then, never reviewed before"
        ),
        copied_from={
            "run": replay_run.run_id,
            "event": missing_event_id,
            "call": call["id"],
            "result": result["id"],
            "source_run": source.run_id,
            "fixture": None,
            "scenario": scenario.ref,
            "request_digest": call.get("request_digest"),
        },
    )
    log.info("copy recorded answer: staged %s from %s/%s", recording.public_id, source.run_id, result["id"])
    return recording
