"""Actions of the missing-fixture page that close the loop (issue 16): copy the recorded answer into review; answer
the model request an agent's replay stopped on (issue 36).

Kept beside `views.py` rather than in it: each action parses its input, calls one service, and redirects to the
staged candidate, where review (four eyes) decides. It never acts inside the replay.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from accounts.audit import audit_record
from console.htmx import HtmxHttpRequest
from fixtures_review.model_answers import parse_answer
from fixtures_review.services import ReviewRefused, recording_copy_recorded

from .forms import ModelAnswerForm
from .model_answers import ModelAnswerForbidden, ModelAnswerNotFound, ModelAnswerRefused, replay_model_answer_stage
from .models import Replay


@permission_required("runs.launch_replay", raise_exception=True)
@require_POST
def missing_copy_recorded(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    """Copy the recorded answer: the source run's result for this request (outcome, status, body) staged for
    review through the same intake as a capture."""
    replay = get_object_or_404(Replay.objects.select_related("run", "run__parent"), pk=pk)
    if replay.run is None or not 0 <= index < len(replay.missing):
        raise Http404(f"replay {pk} has no missing fixture #{index}")
    record = replay.missing[index]
    try:
        staged = recording_copy_recorded(replay_run=replay.run, missing_event_id=record["id"], user=request.user)
    except ReviewRefused as exc:
        messages.error(request, f"Copy the recorded answer refused: {exc}")
        return redirect("replays:missing-fixture", pk=pk, index=index)
    audit_record(
        actor=request.user,
        action="fixture.copy_recorded",
        target=f"staged:{staged.public_id}",
        detail={"replay": pk, "missing": record["id"]},
        request=request,
    )
    messages.success(
        request,
        f"Staged {staged.public_id}: the recorded answer ({staged.outcome}, status {staged.response.get('status')}) "
        f"for {record['tool']}. It satisfies nothing until a reviewer other than you approves it.",
    )
    return redirect("fixtures:recording", public_id=staged.public_id)


@permission_required("fixtures_review.capture_recording", raise_exception=True)
@require_POST
def missing_model_answer(request: HtmxHttpRequest, pk: int, index: int) -> HttpResponse:
    """Answer this model request (issue 36): the exact request the replay stopped on, staged for review with the
    typed answer or the nearest recorded model answer (`replays.model_answers`); then the staged recording's page."""
    form = ModelAnswerForm(request.POST)
    form.is_valid()
    data = form.cleaned_data
    try:
        fields: dict[str, Any] = {"copy_similar": bool(data.get("copy_similar"))}
        if not fields["copy_similar"]:
            if (data.get("answer") or "").strip():
                fields["answer"] = parse_answer(data["answer"])
            if (data.get("content") or "").strip():
                fields["content"] = data["content"]
            if (data.get("tool_calls") or "").strip():
                fields["tool_calls"] = parse_answer(data["tool_calls"], "tool calls")
                if not isinstance(fields["tool_calls"], list):
                    raise ModelAnswerRefused("tool calls: a JSON list of tool calls")
        staged = replay_model_answer_stage(replay_id=pk, index=index, user=request.user, request=request, **fields)
    except ModelAnswerNotFound as exc:
        raise Http404(str(exc)) from None
    except ModelAnswerForbidden as exc:
        raise PermissionDenied(str(exc)) from None
    except ModelAnswerRefused as exc:
        messages.error(request, f"Answer refused: {exc}")
        return redirect("replays:missing-fixture", pk=pk, index=index)
    copied = staged.copied
    how = f"copied from {copied['fixture']} of {copied['scenario']}" if copied else "typed"
    messages.success(
        request,
        f"Staged {staged.recording.public_id}: the model answer ({how}) to the request replay {pk} stopped on. It "
        "satisfies nothing until a reviewer other than you approves it; approval mints the next scenario version.",
    )
    return redirect("fixtures:recording", public_id=staged.recording.public_id)
