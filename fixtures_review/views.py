"""Review pages. Each view parses its input, calls one selector or service, and renders.

Actions are plain forms that work without JavaScript (POST, then a redirect back with the outcome as a
message); with htmx they answer with the recording's region of the page, the outcome in it.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts.audit import audit_record
from console.htmx import HtmxHttpRequest

from . import selectors, services
from .body_access import recording_body
from .intake import CaptureError
from .models import ScenarioVersion, StagedRecording
from .run_staging import model_tools_parse, run_stage


def _require_staging_access(user: Any) -> None:
    if not (user.has_perm(services.REVIEW_PERM) or user.has_perm(services.CAPTURE_PERM)):
        raise PermissionDenied("staged recordings are unreviewed material: the reviewer or operator role reads them")


def recording_queue(request: HtmxHttpRequest) -> HttpResponse:
    _require_staging_access(request.user)
    state = request.GET.get("state", "staged")
    if state not in ("", *StagedRecording.State.values):
        state = "staged"
    scenario = request.GET.get("scenario", "")[:100]
    page = Paginator(selectors.recording_queue(state=state, scenario=scenario), 50).get_page(request.GET.get("page"))
    duplicates = selectors.duplicates_of(list(page))
    for rec in page:
        # Attributes for the template's rows, computed per page (the queue is paginated).
        rec.open_findings = selectors.open_findings_count(rec)  # type: ignore[attr-defined]
        rec.age = selectors.age(rec.captured_at)  # type: ignore[attr-defined]
        rec.duplicates = duplicates.get(rec.pk, [])  # type: ignore[attr-defined]
    template = "fixtures/queue.html#queue-table" if request.htmx else "fixtures/queue.html"
    return render(
        request,
        template,
        {"page": page, "state": state, "scenario": scenario, "states": StagedRecording.State.values},
    )


def record_policy(request: HtmxHttpRequest) -> HttpResponse:
    """Reviewed connections (what record mode may capture through) and the captures it refused or that failed."""
    _require_staging_access(request.user)
    return render(request, "fixtures/record_policy.html", {"p": selectors.record_policy_page()})


def recording_detail(request: HtmxHttpRequest, public_id: str) -> HttpResponse:
    _require_staging_access(request.user)
    recording = get_object_or_404(StagedRecording, public_id=public_id)
    return _render_recording(request, recording)


def _render_recording(request: HtmxHttpRequest, recording: StagedRecording, *, outcome: str = "", error: str = "",
                      status: int = 200) -> HttpResponse:  # fmt: skip
    page = selectors.recording_page(recording, request.user)
    template = "fixtures/recording.html#recording" if request.htmx else "fixtures/recording.html"
    return render(request, template, {"p": page, "outcome": outcome, "action_error": error}, status=status)


ACTIONS = ("redact", "synthesize", "no-change", "reject", "exclude", "approve")


@require_POST
def recording_action(request: HtmxHttpRequest, public_id: str, action: str) -> HttpResponse:
    _require_staging_access(request.user)
    if action not in ACTIONS:
        raise Http404("no such review action")
    recording = get_object_or_404(StagedRecording, public_id=public_id)
    post = request.POST
    revision = _int(post.get("revision"))
    try:
        if action == "redact":
            recording = services.recording_redact(
                recording=recording,
                path=post.get("path", ""),
                reason=post.get("reason", ""),
                user=request.user,
                revision=revision,
            )
            outcome = f"Redacted {post.get('path')}."
        elif action == "synthesize":
            recording = services.recording_synthesize(
                recording=recording,
                path=post.get("path", ""),
                value=_value(post.get("value", "")),
                fidelity_note=post.get("fidelity_note", ""),
                user=request.user,
                revision=revision,
            )
            outcome = f"Synthesized {post.get('path')}."
        elif action == "no-change":
            recording = services.recording_declare_no_change(
                recording=recording, reason=post.get("reason", ""), user=request.user, revision=revision
            )
            outcome = "Declared no change: its ambiguous answer changed nothing in the world."
        elif action == "reject":
            recording = services.recording_reject(
                recording=recording, reason=post.get("reason", ""), user=request.user, revision=revision
            )
            outcome = "Rejected."
        elif action == "exclude":
            recording = services.recording_exclude_tool(
                recording=recording, limitation=post.get("limitation", ""), user=request.user, revision=revision
            )
            assert recording.scenario_version is not None  # excluding mints a version or raises
            outcome = f"Excluded {recording.tool}: scenario version {recording.scenario_version.ref} records why."
        else:
            recording = services.recording_approve(
                recording=recording, user=request.user, revision=revision, note=post.get("note", "")
            )
            minted, scenario_version = recording.fixture_version, recording.scenario_version
            assert minted is not None and scenario_version is not None  # approval mints both or raises
            outcome = f"Approved: fixture version {minted.fixture_id} in new scenario version {scenario_version.ref}."
    except services.ReviewRefused as exc:
        recording.refresh_from_db()
        said = "No change" if action == "no-change" else action.capitalize()
        if request.htmx:
            return _render_recording(request, recording, error=f"{said} refused: {exc}")
        messages.error(request, f"{said} refused: {exc}")
        return redirect("fixtures:recording", public_id=public_id)
    if request.htmx:
        return _render_recording(request, recording, outcome=outcome)
    messages.success(request, outcome)
    return redirect("fixtures:recording", public_id=public_id)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _value(text: str) -> Any:
    """A replacement as the reviewer typed it: JSON when it parses as JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def body_download(request: HtmxHttpRequest, public_id: str, part: str) -> HttpResponse | FileResponse:
    """The stored (redacted, masked) bytes of a body, only ever as an attachment: never rendered here."""
    _require_staging_access(request.user)
    recording = get_object_or_404(StagedRecording, public_id=public_id)
    digest = recording.body_blobs.get(f"{part}.body")
    if part not in ("request", "response") or not digest:
        raise Http404("this recording has no such body")
    # The recording's own record decides (per holder): bytes a run or another recording still keeps, or stored
    # again after this body's removal, are not this recording's to serve once its hold ended.
    body = recording_body(recording, part)
    if body.ended:  # gone on purpose: say when, under which class, and which record says so
        said = body.expiry.sentence if body.expiry is not None else "expired: its retention hold ended"
        return HttpResponse(f"{digest}: {said}\n", status=410, content_type="text/plain; charset=utf-8")
    handle = body.open()
    if handle is None:
        raise Http404("the body's bytes are not in the blob store")
    # Reading captured bytes outside the page (masked, but still the world's data) is worth a line in the audit log.
    audit_record(
        actor=request.user,
        action="recording.download_body",
        target=recording.public_id,
        detail={"part": part, "digest": digest},
        request=request,
    )
    response = FileResponse(
        handle,
        as_attachment=True,
        filename=f"{recording.public_id}-{part}-body.bin",
        content_type="application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_http_methods(["GET"])
def scenario_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "fixtures/scenario_list.html", {"versions": selectors.scenario_versions()})


@require_http_methods(["GET"])
def scenario_detail(request: HtmxHttpRequest, name: str, version: int) -> HttpResponse:
    scenario = get_object_or_404(ScenarioVersion, name=name, version=version)
    return render(request, "fixtures/scenario_detail.html", {"s": selectors.scenario_page(scenario)})


# The run page's selections (the `selection` field): every result, one tool's, or one span subtree's.
RUN_STAGE_SELECTIONS = ("all", "tool", "subtree")
MAX_OUTCOME_MESSAGES = 20  # skipped and refused results told one by one on the next page; the rest counted


@require_POST
def run_results_stage(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """The run page's "Stage tool results for review" form: the selected recorded results become staged recordings
    (provenance: run and event), which review decides on; nothing becomes a fixture here. The next page tells each
    result's outcome: staged, already staged, skipped or refused, with the reason."""
    from runs.models import Run

    if not request.user.has_perm(services.CAPTURE_PERM):
        raise PermissionDenied("staging a run's results needs the operator or reviewer role")
    run = get_object_or_404(Run, run_id=run_id)
    post = request.POST
    selection = post.get("selection") or "all"
    try:
        if selection not in RUN_STAGE_SELECTIONS:
            raise services.ReviewRefused(f"selection: one of {', '.join(RUN_STAGE_SELECTIONS)}")
        if selection != "all" and not (post.get(selection) or "").strip():
            raise services.ReviewRefused(f"{selection}: say which (the {selection} field)")
        what = post.get("what") or "tool-results"
        if what != "tool-results" and selection != "all":
            raise services.ReviewRefused("a tool or a span's subtree chooses tool results: stage model calls with all")
        result = run_stage(
            run=run,
            what=what,
            model_tools=model_tools_parse(post.get("model_tools")),
            user=request.user,
            scenario=post.get("scenario") or None,
            effect_class=post.get("effect_class") or None,
            tool=post.get("tool") or None if selection == "tool" else None,
            subtree=post.get("subtree") or None if selection == "subtree" else None,
            contract_revisions=services.contract_revisions_parse(post.getlist("contract_revision")),
            connection=post.get("connection") or None,
        )
    except (services.ReviewRefused, CaptureError) as exc:
        messages.error(request, f"Staging the results refused: {exc}")
        return redirect("runs:run-detail", run_id=run.run_id)
    staged = [r.recording for _, r in result.staged]
    kinds = {"tool-results": "tool results", "model-calls": "model calls", "all": "tool results and model calls"}[what]
    parts = [f"Staged {len(staged)} recording{'s' if len(staged) != 1 else ''} from run {run.run_id}'s {kinds}"]
    if result.already:
        parts.append(f"{len(result.already)} already staged before")
    if result.refused:
        parts.append(f"{len(result.refused)} refused")
    if result.skipped:
        parts.append(f"{len(result.skipped)} skipped")
    tell = messages.success if staged else messages.warning
    tell(request, "; ".join(parts) + ". None satisfies a replay until another reviewer approves it.")
    outcomes = [("refused", r) for r in result.refused] + [("skipped", s) for s in result.skipped]
    for said, entry in outcomes[:MAX_OUTCOME_MESSAGES]:
        tool = f" ({entry['tool']})" if entry.get("tool") else ""
        messages.warning(request, f"{entry['event'] or 'the request'}{tool} {said}: {entry['reason']}")
    if len(outcomes) > MAX_OUTCOME_MESSAGES:
        messages.warning(request, f"and {len(outcomes) - MAX_OUTCOME_MESSAGES} more refused or skipped (the command "
                         "and the API list them all)")  # fmt: skip
    if not staged:
        return redirect("runs:run-detail", run_id=run.run_id)
    if len(staged) == 1:
        return redirect("fixtures:recording", public_id=staged[0].public_id)
    query = urlencode({"scenario": result.scenario, "state": "staged"})
    return redirect(f"{reverse('fixtures:queue')}?{query}")
