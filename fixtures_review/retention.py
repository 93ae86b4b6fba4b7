"""Retention of captured material (docs/retention.md): a capture's class, its bodies held in the blob store under
that class, and what happens to a staged recording when the sweep removes one of its bodies.

The sweep itself is runs.retention's (blobs are the run graph's); this module tells it which recordings hold a
digest (for the deletion record) and drops a recording's inline copy of a body whose bytes were removed, in the
same transaction, so the redacted copy on the recording page does not outlive the bytes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Q

from runs.models import Blob, BlobDeletion
from runs.retention import EXPIRY_HOOKS, HOLDER_HOOKS, Expiry, blob_expiries, blobs_hold

from . import intake
from .models import StagedRecording

EXPIRED_BODY = None  # what an expired inline body becomes: nothing, with `expired_bodies` saying why


def capture_retention_class(capture: dict[str, Any]) -> str:
    """The class a capture is kept under: the one it names, else N17Q_CAPTURE_RETENTION_CLASS. A capture naming a
    class the console does not declare is refused (`intake.CaptureError`): at capture the class is decided, and an
    unknown one would keep sensitive material forever without anyone having chosen that."""
    name = capture.get("retention") or settings.N17Q_CAPTURE_RETENTION_CLASS
    if name not in settings.N17Q_RETENTION_CLASSES:
        declared = ", ".join(sorted(settings.N17Q_RETENTION_CLASSES))
        raise intake.CaptureError(f"retention: {name!r} is not a declared retention class (declared: {declared})")
    return str(name)


def recording_bodies_hold(recording: StagedRecording, sizes: dict[str, int]) -> None:
    """The recording's body blobs as Blob rows held under its class from `captured_at` (inside its transaction)."""
    if not recording.body_blobs:
        return
    for digest in recording.body_blobs.values():
        Blob.objects.get_or_create(digest=digest, defaults={"size": sizes.get(digest, 0)})
    blobs_hold(
        {digest: recording.retention_class for digest in recording.body_blobs.values()},
        recorded_at=recording.captured_at,
    )


def recording_expiries(recording: StagedRecording) -> dict[str, Expiry]:
    """{"response.body": Expiry} for the bodies of `recording` whose bytes the sweep removed."""
    found = blob_expiries(recording.body_blobs.values())
    return {where: found[d] for where, d in recording.body_blobs.items() if d in found}


def _holding(digest: str) -> Any:
    # JSON containment is not portable to SQLite; a text match on the digest narrows, the dict check decides.
    return StagedRecording.objects.filter(Q(body_blobs__icontains=digest))


def _holders(digest: str) -> list[str]:
    return [
        f"recording {r.public_id}"
        for r in _holding(digest).only("public_id", "body_blobs")
        if digest in r.body_blobs.values()
    ]


def _drop_inline_copies(digest: str, record: BlobDeletion) -> None:
    for recording in _holding(digest).select_for_update():
        wheres = [where for where, d in recording.body_blobs.items() if d == digest]
        if not wheres:
            continue
        for where in wheres:
            part = where.split(".")[0]
            content = dict(getattr(recording, part))
            content["body"] = EXPIRED_BODY
            setattr(recording, part, content)
            recording.expired_bodies = {**recording.expired_bodies, where: record.pk}
        recording.save(update_fields=["request", "response", "expired_bodies"])


def connect() -> None:
    """Called once from the app's ready()."""
    if _holders not in HOLDER_HOOKS:
        HOLDER_HOOKS.append(_holders)
    if _drop_inline_copies not in EXPIRY_HOOKS:
        EXPIRY_HOOKS.append(_drop_inline_copies)
