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
from console.blob_store import BlobStoreRefused, blob_put
from n17q_engine import canonical
from n17q_secrets import gate
from runs.models import Blob, BlobDeletion, blob_storage_name
from runs.retention import (
    EXPIRY_HOOKS,
    HOLDER_HOOKS,
    READ_HOLD_HOOKS,
    SWEEP_HOOKS,
    Expiry,
    ReadHold,
    blobs_bytes_back,
    blobs_hold,
    blobs_hold_until,
    expiry_of,
    hold_expiry,
    kept_bytes_holds_end,
    retention_class,
)

from . import intake
from .models import FixtureBodyHold, FixtureVersion, StagedRecording

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


# --- fixture bodies held by digest (seed 001: "Promoted fixture bodies follow retention") ---------------------------

FIXTURE_BODY_MEDIA_TYPE = "application/json"  # a fixture body's stored bytes: its canonical JSON


class FixtureBodyRefused(ValueError):
    """A reviewed body the storage gate would store otherwise than the fixture pins it; one line saying what."""


def fixture_body_put(body: Any, *, where: str) -> tuple[str, int, str | None]:
    """Store a reviewed fixture body through the storage gate: its canonical JSON, under the sha256 the engine checks
    (`response.body_digest`). (digest, size). The body came through the intake's scan already; a gate that would
    still change its bytes (a value it masks, a container it cannot rebuild) means the stored bytes would not be the
    body the fixture pins, so it is refused, naming what, rather than stored as something else. The third item: the
    store name this call wrote (None when the store held the bytes already), for the caller to remove if its
    transaction fails."""
    data = canonical.canonical_json(body)
    findings: list[dict[str, str]] = []
    try:
        gated = gate.gate_bytes(data, media_type=FIXTURE_BODY_MEDIA_TYPE, where=where, findings=findings)
    except gate.NotStorable as exc:
        raise FixtureBodyRefused(f"{where}: the storage gate cannot store the reviewed body: {exc}") from None
    if bytes(gated) != data:
        found = ", ".join(sorted({f"{f.get('rule')} at {f.get('path')}" for f in findings})) or "a value"
        raise FixtureBodyRefused(
            f"{where}: the storage gate masks {found} in the reviewed body; redact it in review before approving"
        )
    digest = canonical.digest_bytes(data)
    try:
        put = blob_put(gated, digest=digest)
    except BlobStoreRefused as exc:
        raise RuntimeError(str(exc)) from exc
    return digest, len(data), put.name if put.written else None


def fixture_body_hold(
    *,
    digest: str,
    size: int,
    fixture_id: str,
    retention_class: str,
    recorded_at: datetime,
    expires_at: datetime | None,
    fixture_version: FixtureVersion | None = None,
    recording: StagedRecording | None = None,
) -> FixtureBodyHold:
    """A fixture's hold on its body's bytes (written just before by `fixture_body_put`), inside the caller's
    transaction: the Blob row, the bytes back as a new hold if the sweep had removed them (the holders that removal
    ended stay ended), the hold row, and the blob's longest hold for the sweep."""
    blob, _ = Blob.objects.get_or_create(digest=digest, defaults={"size": size})
    for back in blobs_bytes_back([digest]):
        # The body was written just before; a sweep that removed it meanwhile is over now (the row is locked).
        if not storages["blobs"].exists(blob_storage_name(back)):
            raise RuntimeError(f"the blob store lost {back} while it was promoted; approve it again")
    hold = FixtureBodyHold.objects.create(
        blob=blob,
        fixture_version=fixture_version,
        recording=recording,
        fixture_id=fixture_id,
        retention_class=retention_class,
        recorded_at=recorded_at,
        expires_at=expires_at,
    )
    blobs_hold_until({digest: (retention_class, expires_at)})
    return hold


def _fixture_holders(digest: str) -> list[str]:
    # The live fixture holds only, one name per fixture.
    ids = FixtureBodyHold.objects.filter(blob__digest=digest, removed_by__isnull=True).values_list(
        "fixture_id", flat=True
    )
    return [f"fixture {fid}" for fid in sorted(set(ids))]


def _end_fixture_holds(digest: str, record: BlobDeletion) -> None:
    # Inside the removal's transaction: every fixture hold live now ends with it, for good.
    FixtureBodyHold.objects.filter(blob__digest=digest, removed_by__isnull=True).update(removed_by=record)


def fixture_hold_end(*, blob_pk: int, now: datetime, by: str) -> list[BlobDeletion]:
    """End the fixture holds on one blob that ran out while a longer hold keeps its bytes, naming the fixtures: the
    run graph's own way (`runs.retention.kept_bytes_holds_end`)."""
    return kept_bytes_holds_end(FixtureBodyHold, "fixture_id", "fixture", blob_pk=blob_pk, now=now, by=by)


def fixture_holds_end(*, now: datetime, by: str, batch: int) -> tuple[list[str], bool]:
    """The sweep's part for fixture bodies (runs.retention.SWEEP_HOOKS): end every fixture hold that ran out on bytes
    a longer hold keeps (at most `batch` blobs a pass). After the removals, so a fixture hold that was the bytes' last
    is ended by their removal (`_end_fixture_holds`), not by a record of its own besides. A class that keeps forever
    (no `expires_at`) never ends. The digests whose holds ended, and whether more were due."""
    due = list(
        FixtureBodyHold.objects.filter(
            removed_by__isnull=True, expires_at__lte=now, blob__bytes_removed_at__isnull=True
        )
        .order_by("blob_id")
        .values_list("blob_id", flat=True)
        .distinct()[: batch + 1]
    )
    digests: list[str] = []
    for pk in due[:batch]:
        for record in fixture_hold_end(blob_pk=pk, now=now, by=by):
            if record.digest not in digests:
                digests.append(record.digest)
    return digests, len(due) > batch


def _fixture_read_holds(digests: list[str]) -> dict[str, ReadHold]:
    """For the import of a run a replay made (runs.retention.READ_HOLD_HOOKS): the fixture bodies among `digests`,
    each with the fixture hold the made run holds it under: the live one keeping it longest, or, when every fixture
    hold on it ended, the latest ended one (its record). One query."""
    out: dict[str, ReadHold] = {}
    holds = FixtureBodyHold.objects.filter(blob__digest__in=sorted(set(digests))).select_related("blob")
    for hold in holds.order_by("id"):
        digest = hold.blob.digest
        read = ReadHold(hold.retention_class, hold.expires_at, hold.removed_by_id)
        current = out.get(digest)
        if current is None or _keeps_longer(read, current):
            out[digest] = read
    return out


def _keeps_longer(a: ReadHold, b: ReadHold) -> bool:
    if (a.removed_by_id is None) != (b.removed_by_id is None):
        return a.removed_by_id is None  # a live hold over an ended one
    if a.removed_by_id is not None:
        return a.removed_by_id > (b.removed_by_id or 0)  # of ended ones, the latest record
    if a.expires_at is None or b.expires_at is None:
        return a.expires_at is None and b.expires_at is not None
    return a.expires_at > b.expires_at


def connect() -> None:
    """Called once from the app's ready()."""
    for hooks, hook in (
        (HOLDER_HOOKS, _holders),
        (HOLDER_HOOKS, _fixture_holders),
        (EXPIRY_HOOKS, _drop_inline_copies),
        (EXPIRY_HOOKS, _end_fixture_holds),
        (SWEEP_HOOKS, recording_holds_end),
        (SWEEP_HOOKS, fixture_holds_end),
        (READ_HOLD_HOOKS, _fixture_read_holds),
    ):
        if hook not in hooks:
            hooks.append(hook)


def fixture_body_live_hold(digest: str) -> FixtureBodyHold | None:
    """The live fixture hold on `digest` that keeps it longest (None: none is live). What a fixture derived from that
    body (a contract migration's rewrite of it) is held under: its class, its clock, never a longer one."""
    holds = list(FixtureBodyHold.objects.filter(blob__digest=digest, removed_by__isnull=True).order_by("id"))
    if not holds:
        return None
    forever = [h for h in holds if h.expires_at is None]
    if forever:
        return forever[0]
    return max(holds, key=lambda h: (h.expires_at, h.pk))
