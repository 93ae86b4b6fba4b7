"""Retention of captured material (docs/retention.md): a capture's class, its bodies held in the blob store under
that class, and what happens to a staged recording when the sweep removes one of its bodies.

The sweep itself is runs.retention's (blobs are the run graph's); this module tells it which recordings hold a
digest (for the deletion record) and drops a recording's inline copy of a body whose bytes were removed, in the
same transaction, so the redacted copy on the recording page does not outlive the bytes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db.models import Q

from runs.models import Blob, BlobDeletion, blob_storage_name
from runs.retention import EXPIRY_HOOKS, HOLDER_HOOKS, Expiry, blobs_bytes_back, blobs_hold, expiry_of

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
    """The recording's body blobs as Blob rows held under its class from `captured_at` (inside its transaction).
    Bytes the sweep had removed come back as a new hold of the recording's own (runs.retention.blobs_bytes_back):
    the holders that removal ended stay ended."""
    if not recording.body_blobs:
        return
    for digest in recording.body_blobs.values():
        Blob.objects.get_or_create(digest=digest, defaults={"size": sizes.get(digest, 0)})
    store = storages["blobs"]
    for digest in blobs_bytes_back(recording.body_blobs.values()):
        # The body was written just before; a sweep that removed it meanwhile is over now (the row is locked).
        if not store.exists(blob_storage_name(digest)):
            raise RuntimeError(f"the blob store lost {digest} while it was staged; stage the capture again")
    blobs_hold(
        {digest: recording.retention_class for digest in recording.body_blobs.values()},
        recorded_at=recording.captured_at,
    )


def recording_expiries(recording: StagedRecording) -> dict[str, Expiry]:
    """{"response.body": Expiry} for the bodies of `recording` whose bytes the sweep removed: the recording's own
    record of it (`expired_bodies`), per holder: bytes another holder stored again later are not this recording's."""
    ended = {where: pk for where, pk in (recording.expired_bodies or {}).items() if where in recording.body_blobs}
    if not ended:
        return {}
    records = BlobDeletion.objects.in_bulk(list(ended.values()))
    return {where: expiry_of(records[pk]) for where, pk in ended.items() if pk in records}


def _holding(digest: str) -> Any:
    # JSON containment is not portable to SQLite; a text match on the digest narrows, the dict check decides.
    return StagedRecording.objects.filter(Q(body_blobs__icontains=digest))


def _holders(digest: str) -> list[str]:
    # The live holds only: a recording whose body an earlier removal ended held nothing of these bytes since.
    return [
        f"recording {r.public_id}"
        for r in _holding(digest).only("public_id", "body_blobs", "expired_bodies")
        if any(d == digest and where not in (r.expired_bodies or {}) for where, d in r.body_blobs.items())
    ]


def _drop_inline_copies(digest: str, record: BlobDeletion) -> None:
    for recording in _holding(digest).select_for_update():
        # A body an earlier removal ended keeps that record: the recording held nothing of these bytes since.
        ended = recording.expired_bodies or {}
        wheres = [where for where, d in recording.body_blobs.items() if d == digest and where not in ended]
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
