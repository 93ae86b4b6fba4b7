"""Retention of captured material (docs/retention.md): a capture's class, its bodies held in the blob store under
that class, and what happens to a staged recording when the sweep removes one of its bodies.

The sweep itself is runs.retention's (blobs are the run graph's); this module tells it which recordings hold a
digest (for the deletion record) and drops a recording's inline copy of a body whose bytes were removed, in the
same transaction, so the redacted copy on the recording page does not outlive the bytes.

A recording's hold is its own (issue 33, as a run's `RunBlobHold`): it runs out at `hold_expires_at` (its class's
period from `captured_at`), and the sweep then ends it (`recording_holds_end`) with a deletion record of its own
(`bytes_removed` false) even while a run or another recording keeps the same bytes in the store. From then on the
recording answers as if its body were gone: what it answers is decided by `fixtures_review.body_access`, from the
recording's own record (`expired_bodies`), never from whether the store has the file.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.db.models import Q

from accounts.audit import audit_record
from runs.models import Blob, BlobDeletion, blob_storage_name
from runs.retention import (
    EXPIRY_HOOKS,
    HOLDER_HOOKS,
    SWEEP_HOOKS,
    Expiry,
    blobs_bytes_back,
    blobs_hold,
    expiry_of,
    hold_expiry,
    retention_class,
)

from . import intake
from .models import StagedRecording

log = logging.getLogger(__name__)

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
    # The recording's own hold: when it runs out the sweep ends it, whoever else keeps the same bytes.
    held = _live_bodies(recording)
    recording.hold_expires_at = hold_expiry(recording.retention_class, recording.captured_at) if held else None
    StagedRecording.objects.filter(pk=recording.pk).update(hold_expires_at=recording.hold_expires_at)


def _live_bodies(recording: StagedRecording) -> dict[str, str]:
    """{where: digest} of the bodies `recording` still holds: those no deletion record ended for it."""
    ended = recording.expired_bodies or {}
    return {where: digest for where, digest in recording.body_blobs.items() if where not in ended}


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
        _end_bodies(recording, dict.fromkeys(wheres, record.pk))
        if not _live_bodies(recording):
            recording.hold_expires_at = None  # nothing of it is held any more: the sweep has nothing left to end
        recording.save(update_fields=["request", "response", "expired_bodies", "hold_expires_at"])


def _end_bodies(recording: StagedRecording, ended: dict[str, int]) -> None:
    """Drop the inline copies of the bodies `ended` ({where: deletion record id}) and record what ended each."""
    for where, pk in ended.items():
        part = where.split(".")[0]
        content = dict(getattr(recording, part))
        content["body"] = EXPIRED_BODY
        setattr(recording, part, content)
        recording.expired_bodies = {**(recording.expired_bodies or {}), where: pk}


def recording_hold_end(*, recording_pk: int, now: datetime, by: str) -> list[str]:
    """End one recording's hold on its bodies when it ran out (`hold_expires_at` <= now), while the bytes stay for
    the holders still keeping them: a deletion record of its own per body digest (`bytes_removed` false, naming the
    recording), its inline copies dropped, `expired_bodies` naming the records. The digests whose hold it ended.

    Locks the blob rows first, as the removal's claim does before it asks for the recordings (one lock order), then
    the recording, re-checked: a sweep that finds the hold ended already (or removed with its bytes) writes nothing."""
    with transaction.atomic():
        seen = StagedRecording.objects.filter(pk=recording_pk).values_list("body_blobs", flat=True).first()
        if seen is None:
            return []
        blobs = {
            blob.digest: blob
            for blob in Blob.objects.select_for_update().filter(digest__in=sorted(set(seen.values()))).order_by("pk")
        }
        due = StagedRecording.objects.select_for_update().filter(pk=recording_pk, hold_expires_at__lte=now)
        recording = due.first()
        if recording is None:
            return []
        expires = recording.hold_expires_at
        assert expires is not None  # the query's condition
        cls = retention_class(recording.retention_class)
        records: dict[str, BlobDeletion] = {}
        ended: dict[str, int] = {}
        for where, digest in sorted(_live_bodies(recording).items()):
            blob = blobs.get(digest)
            if blob is None:  # a body staged before its blob had a row: the hold ends all the same
                blob, _ = Blob.objects.get_or_create(digest=digest, defaults={"size": 0})
            if digest not in records:
                records[digest] = BlobDeletion.objects.create(
                    blob=blob,
                    digest=digest,
                    size=blob.size,
                    retention_class=recording.retention_class,
                    sensitivity=cls.sensitivity,
                    expired_at=expires,
                    removed_at=now,
                    removed_by=f"retention sweep ({by})",
                    reason=f"the retention period of class {cls.name!r} ({cls.period_text}) ran out on "
                    f"{expires:%Y-%m-%d %H:%M} UTC for this recording; the bytes stay for the holders still "
                    "keeping them",
                    holders=[f"recording {recording.public_id}"],
                    bytes_removed=False,
                )
            ended[where] = records[digest].pk
        _end_bodies(recording, ended)
        recording.hold_expires_at = None
        recording.save(update_fields=["request", "response", "expired_bodies", "hold_expires_at"])
        for digest, record in records.items():
            audit_record(
                actor=None,
                action="blob.hold_expired",
                target=digest,
                detail={"class": record.retention_class, "record": record.pk, "holders": record.holders},
            )
    for digest in records:
        log.info("retention: ended recording %s's hold on %s", recording.public_id, digest)
    return list(records)


def recording_holds_end(*, now: datetime, by: str, batch: int) -> tuple[list[str], bool]:
    """The sweep's part for recordings (runs.retention.SWEEP_HOOKS): end every recording hold that ran out (at most
    `batch` recordings a pass). After the removals, so a recording whose hold was the bytes' last is ended by their
    removal and not by a record of its own besides. The digests whose holds ended, and whether more were due."""
    due = list(
        StagedRecording.objects.filter(hold_expires_at__lte=now)
        .order_by("hold_expires_at", "pk")
        .values_list("pk", flat=True)[: batch + 1]
    )
    digests: list[str] = []
    for pk in due[:batch]:
        for digest in recording_hold_end(recording_pk=pk, now=now, by=by):
            if digest not in digests:
                digests.append(digest)
    return digests, len(due) > batch


def connect() -> None:
    """Called once from the app's ready()."""
    if _holders not in HOLDER_HOOKS:
        HOLDER_HOOKS.append(_holders)
    if _drop_inline_copies not in EXPIRY_HOOKS:
        EXPIRY_HOOKS.append(_drop_inline_copies)
    if recording_holds_end not in SWEEP_HOOKS:
        SWEEP_HOOKS.append(recording_holds_end)
