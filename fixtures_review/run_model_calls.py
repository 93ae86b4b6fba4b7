"""Model calls as model fixtures (issue 37 point 2): each model call an imported run recorded (a `model.proposal`
of an OTLP GenAI or OpenInference chat span, or of an Inspect model event) staged as a `model.chat` recording, its
request the OpenAI chat request an agent sends for that conversation and its response the completion the model
gave (`n17q_engine.recorded_chat`). Observed, not synthetic: origin `run-result`, with the run and event it came
from. Through the same intake (redaction, secret scan, masking), record policy, storage gate and four-eyes review as
every capture; approving one mints the next scenario version holding the model fixture (and the built-in
`model.chat` contract where the version pinned none).

One by one: a call that cannot be staged (its messages or answer not recorded, its tools not recorded and not
given, a request the `model.chat` contract refuses, a refusal of intake or the record policy, a call the model
answered with an error) is listed in `skipped` with its reason and the others are staged; a call staged before is
listed in `already` (docs/formats/recordings.md "Model calls as model fixtures")."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError

from n17q_engine.agent.model import MODEL_TOOL, contract_for
from n17q_engine.contracts import ContractError, ContractSet
from n17q_engine.package import PackageError
from n17q_engine.recorded_chat import RecordedChatError, blob_fields, recorded_chat

from . import connections, intake
from .approval import promotion_blockers
from .copying import _recorded_body
from .models import ScenarioVersion, StagedRecording
from .review_rules import CAPTURE_PERM, ReviewRefused
from .run_results import MAX_RUN_RESULTS, RunRecordingsResult, _recorded_instant, _world_revision_before
from .scenarios import ScenarioRefused, loaded_scenario
from .staging import StageResult, _stage_all, capture_digest_key

log = logging.getLogger("fixtures_review.services")


def run_model_calls_stage(
    *,
    run: Any,
    user: Any = None,
    token: Any = None,
    scenario: str | None = None,
    events: Iterable[str] | None = None,
    connection: str,
    model_tools: list[Any] | None = None,
) -> RunRecordingsResult:
    """Stage each model call (`model.proposal`) of imported `run` as a `model.chat` recording, one by one (module
    docstring). `events` narrows it to those proposals; `connection` names the reviewed connection the model calls
    went through (the record policy judges each capture of it); `model_tools`: tool definitions for calls whose
    trace recorded none (GenAI's openai-v2 instrumentation records no tool definitions). The scenario is the run's;
    a run without one needs `scenario`. The contract revision is the one the scenario pins for `model.chat`, else
    the built-in contract's. ReviewRefused (one line) when nothing can be asked at all."""
    from runs.models import Event

    if user is not None and getattr(user, "is_authenticated", False) and not user.has_perm(CAPTURE_PERM):
        raise ReviewRefused("staging a run's model calls needs the operator or reviewer role")
    scenario = (scenario or "").strip() or None
    name = run.scenario_name or scenario
    if not name:
        raise ReviewRefused(
            f"scenario: run {run.run_id} names no scenario: say which scenario its model calls were recorded in"
        )
    if run.scenario_name and scenario and scenario != run.scenario_name:
        raise ReviewRefused(f"scenario: run {run.run_id} was recorded in {run.scenario_name}, not {scenario}")
    connection = (connection or "").strip()
    if not connection:
        raise ReviewRefused(
            f"connection: say which reviewed connection the model calls of run {run.run_id} went through: record "
            "mode stages only what came through an approved connection"
        )
    version = ScenarioVersion.objects.filter(name=name).order_by("-version").first()
    contracts = ContractSet([])
    if version is not None:
        try:
            contracts = loaded_scenario(version).contracts
        except (ScenarioRefused, PackageError) as exc:
            raise ReviewRefused(f"{version.ref} cannot be loaded: {exc}") from None
    contract = contract_for(contracts, MODEL_TOOL)
    wanted = set(events) if events is not None else None
    rows = Event.objects.filter(run=run, kind="model.proposal")
    if wanted is not None:
        rows = rows.filter(event_id__in=wanted)
    proposals = list(rows.order_by("seq").values_list("seq", "body")[: MAX_RUN_RESULTS + 1])
    if len(proposals) > MAX_RUN_RESULTS:
        raise ReviewRefused(f"run {run.run_id} holds more than {MAX_RUN_RESULTS} model calls: stage them by event")
    if wanted is not None:
        unknown = sorted(wanted - {body.get("id") for _, body in proposals})
        if unknown:
            raise ReviewRefused(f"run {run.run_id} holds no model.proposal {unknown[0]!r}")
    if not proposals:
        raise ReviewRefused(f"run {run.run_id} holds no model call to stage")
    held = {
        r.source_event: r
        for r in StagedRecording.objects.filter(
            source_run=run.run_id, source_event__in=[body.get("id") for _, body in proposals]
        )
    }
    # An OTLP model span's token counts are its own `budget.charged` event, `<span>.tokens` beside `<span>.proposal`.
    siblings = {
        str(body.get("id"))[: -len(".proposal")] + ".tokens": body.get("id")
        for _, body in proposals
        if str(body.get("id")).endswith(".proposal")
    }
    usage = {
        siblings[event_id]: counts
        for event_id, counts in Event.objects.filter(
            run=run, kind="budget.charged", event_id__in=list(siblings)
        ).values_list("event_id", "body")
    }
    key = capture_digest_key()
    actor = user if getattr(user, "is_authenticated", False) else None
    staged: list[tuple[dict[str, Any], StageResult]] = []
    skipped: list[dict[str, Any]] = []
    already: list[dict[str, Any]] = []
    for seq, body in proposals:
        event_id = body.get("id")

        def skip(reason: str, event_id: Any = event_id) -> None:
            skipped.append({"event": event_id, "tool": MODEL_TOOL, "reason": reason})

        if event_id in held:
            prior = held[event_id]
            already.append({"event": event_id, "recording": prior.public_id, "state": prior.state})
            continue
        if body.get("accepted") is False or body.get("error"):
            skip(f"the model call failed ({str(body.get('error') or 'not accepted')[:200]}): no answer to hold")
            continue
        try:
            resolved = {field: _recorded_body(run, digest) for field, digest in blob_fields(body).items()}
            request, completion, missing = recorded_chat(
                body, resolved=resolved, tools=model_tools, usage=usage.get(event_id)
            )
        except ReviewRefused as exc:
            skip(str(exc))
            continue
        except RecordedChatError as exc:
            skip(str(exc))
            continue
        if missing:
            skip(_missing_reason(missing))
            continue
        assert request is not None and completion is not None
        try:
            contract.digest(request)
        except ContractError as exc:
            skip(f"the request does not fit {MODEL_TOOL} revision {contract.revision}: {exc}")
            continue
        capture = intake.tool_call_capture(
            scenario=name,
            tool=MODEL_TOOL,
            contract_revision=contract.revision,
            connection=connection,
            captured_at=_recorded_instant(body, run),
            source_revision=None,
            effect_class=contract.effect_class,
            args=request,
            status=200,
            body=completion,
            world_revision=_world_revision_before(run, seq),
        )
        try:
            red = intake.intake(capture, digest_key=key)
            admitted = connections.capture_admit(red.capture, door="run-model-call", actor=user, token=token)
            [recording] = _stage_all(
                [
                    dict(
                        red=red,
                        admitted=admitted,
                        origin=StagedRecording.Origin.RUN_RESULT,
                        outcome="ok",
                        fidelity_note=(
                            f"staged from the model call run {run.run_id} recorded in {event_id} (model "
                            f"{body.get('model')}); observed then, never reviewed before"
                        ),
                        copied_from={
                            "run": run.run_id,
                            "event": event_id,
                            "kind": "model.proposal",
                            "scenario": version.ref if version is not None else name,
                            "model": body.get("model"),
                            "provider": body.get("provider"),
                        },
                        source=(run.run_id, event_id),
                    )
                ],
                actor=actor,
                token=token,
            )
        except connections.CaptureRefused as exc:
            skip(str(exc))
            continue
        except intake.CaptureError as exc:
            skip(f"it cannot be staged: {exc}")
            continue
        except IntegrityError:
            skip("it was being staged by another request at the same moment: run it again to see it as already staged")
            continue
        staged.append(
            ({"id": event_id, "call_id": None, "outcome": "ok"}, StageResult(recording, promotion_blockers(recording)))
        )
    log.info("staged %d model calls of run %s (%d skipped)", len(staged), run.run_id, len(skipped))
    return RunRecordingsResult(run=run.run_id, scenario=name, staged=staged, skipped=skipped, already=already)


def _missing_reason(missing: list[str]) -> str:
    said = {
        "messages": "its input messages were not recorded (message content capture was off)",
        "answer": "its answer was not recorded (message content capture was off)",
        "tools": "the tools it was offered were not recorded (the instrumentation records no tool definitions): "
        "give them (model_tools)",
    }
    return "; ".join(said.get(m, f"{m} was not recorded") for m in missing)
