"""Actions of the missing-fixture page that close the loop (issue 16): copy the recorded answer into review.

Kept beside `views.py` rather than in it: each action parses its input, calls one service, and redirects to the
staged candidate, where review (four eyes) decides. It never acts inside the replay.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from accounts.audit import audit_record
from console.htmx import HtmxHttpRequest
from fixtures_review.services import ReviewRefused, recording_copy_recorded

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
