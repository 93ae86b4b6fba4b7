"""Retention and sensitivity classes: when a blob's bytes may go, removing them, and saying so (docs/retention.md).

Seed 001, "Retention preserved the failure, not every byte forever": material gets a class when it is recorded; once
the class's period has run out the bytes leave the blob store, the digest stays wherever history names it, and an
append-only `BlobDeletion` says which digest went, under which class, when and why. Pages and replays read
`blob_expiries` and disclose the gap instead of failing on a missing file or pretending the bytes are there.

Decisions:
- **The period counts from when the material was recorded** (a run's `created_at`, a capture's `captured_at`), not
  from when this console stored it: retention is about the material's age.
- **Retention is per holder** (issue 33). Each run holds each of its blobs under a hold of its own (`RunBlobHold`:
  its class, its clock, the deletion record that ended it); a recording holds its bodies under its own class. The
  `Blob` row keeps the longest live hold for the sweep. A removal ends every hold live at that moment, and stays
  true for each of them: a later holder recording the same bytes stores them again as a new hold with its own class
  and clock (`blobs_bytes_back`), and the earlier holders still answer "removed". A run's hold that runs out while a
  longer hold keeps the bytes is ended by the sweep too, with a deletion record of its own (`bytes_removed` false:
  `holds_end`), so the run answers "removed" from then on exactly as if the bytes had gone; every reader of a run's
  bytes asks the run's own hold (runs.blob_access.run_blob_open), never whether the store has the file. Reading
  bytes (a download, a replay package, a reconstruction importing what it read) never starts a clock: a run a replay
  made holds what it read from the run it replays under that run's hold.
- **Shared bytes are kept for the longest holder.** A blob is content-addressed and shared (two runs, a run and a
  capture); removing it when the first holder's period runs out would break another holder's promise. A holder
  whose class keeps forever, or names a class that is not declared, pins the bytes: removal cannot be undone, so an
  unknown class fails closed by keeping. The sweep removes the bytes when the last live hold runs out.
- **Claim, remove, record in one transaction.** The sweep claims a due blob with a conditional UPDATE (still holding
  bytes, still due: exactly one row), deletes the bytes, and writes the record before it commits. If the commit
  fails after the delete, the next sweep claims the same blob again, the delete finds nothing (a no-op) and the
  record is written then; so no removal is ever left unrecorded, and a second sweep finds nothing to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.audit import audit_record

from .models import Blob, BlobDeletion, Run, RunBlob, RunBlobHold, blob_storage_name

log = logging.getLogger(__name__)

HOLDERS_KEPT = 20  # holders named in a deletion record; the rest are counted
SWEEP_BATCH = 500


@dataclass(frozen=True)
class RetentionClass:
    name: str
    period: timedelta | None  # None: kept indefinitely
    sensitivity: str
    declared: bool = True

    @property
    def period_text(self) -> str:
        if self.period is None:
            return "kept indefinitely" if self.declared else "not declared: kept"
        days, rest = divmod(int(self.period.total_seconds()), 86400)
        return f"{days} days" if not rest else f"{int(self.period.total_seconds()) // 3600} hours"


def retention_class(name: str) -> RetentionClass:
    """The declared class `name` (settings.N17Q_RETENTION_CLASSES); an undeclared name is kept, never removed."""
    declared = settings.N17Q_RETENTION_CLASSES.get(name)
    if declared is None:
        return RetentionClass(name, None, "", declared=False)
    seconds, sensitivity = declared
    return RetentionClass(name, None if seconds is None else timedelta(seconds=seconds), sensitivity)


def _longest(current: tuple[str, datetime | None] | None, candidate: tuple[str, datetime | None]) -> tuple:
    """Of two (class, expires_at) holds, the one keeping the bytes longer (None: forever). `blobs_hold` applies it
    set-wise, as an UPDATE's condition; tests/runs/test_retention.py holds the two equal."""
    if current is None:
        return candidate
    if current[1] is None:
        return current
    if candidate[1] is None or candidate[1] > current[1]:
        return candidate
    return current


# Digests named by one UPDATE of `blobs_hold` (its IN list), well under every database's limit on parameters.
HOLD_BATCH = 500


def blobs_bytes_back(digests: Collection[str]) -> list[str]:
    """Of `digests`, those whose bytes the sweep had removed and which a holder now stores again: each such blob
    starts a new life with no hold (the caller's hold, `blobs_hold`, is its first), while the holds the removal ended
    stay ended. Called inside the holder's transaction, before its hold; the rows are locked until it commits, so the
    caller then makes sure their files are in the store (a sweep that removed them just before is over by now, and
    none can claim them again before the commit)."""
    back: list[str] = []
    wanted = sorted(set(digests))
    for start in range(0, len(wanted), HOLD_BATCH):
        chunk = wanted[start : start + HOLD_BATCH]
        rows = Blob.objects.select_for_update().filter(digest__in=chunk, bytes_removed_at__isnull=False)
        found = list(rows.values_list("digest", flat=True))
        if found:
            Blob.objects.filter(digest__in=found).update(
                bytes_removed_at=None, retention_class="", sensitivity="", expires_at=None
            )
            back.extend(found)
    return back


def blobs_hold(holds: Mapping[str, str], *, recorded_at: datetime) -> None:
    """Record that something recorded at `recorded_at` holds each digest of `holds` ({digest: class name}).

    Each blob keeps the longest of its holds (see the module's decisions). A blob whose bytes are gone stays gone:
    a later holder names the digest, it does not bring the bytes back. Called inside the holder's transaction.

    Set-wise: one conditional UPDATE per (class, expiry) the holds name, not a row loaded, compared and written back
    per blob (a converted OTLP trace names a hundred and more blobs, most of them new to this import with no class
    yet: a second of each file's import went here). The condition is `_longest`'s, in SQL: the new hold replaces a
    blob's current one when the blob has none, or when the new hold keeps the bytes longer (forever beats any expiry;
    an equal expiry keeps the current class). Each UPDATE locks the rows it changes and, on PostgreSQL, re-reads its
    condition on a row another transaction changed meanwhile, so two holders racing still leave the longer hold.
    """
    blobs_hold_until({digest: (name, hold_expiry(name, recorded_at)) for digest, name in holds.items()})


def hold_expiry(name: str, recorded_at: datetime) -> datetime | None:
    """When a hold under class `name` of material recorded at `recorded_at` runs out (None: kept)."""
    cls = retention_class(name)
    return None if cls.period is None else recorded_at + cls.period


def blobs_hold_until(holds: Mapping[str, tuple[str, datetime | None]]) -> None:
    """`blobs_hold` with each hold's class and expiry given: {digest: (class name, expires_at or None)}."""
    if not holds:
        return
    groups: dict[tuple[str, datetime | None], list[str]] = {}
    for digest, (name, expires) in holds.items():
        groups.setdefault((name, expires), []).append(digest)
    for (name, expires), digests in groups.items():
        # `_longest(current, (name, expires))` is the new hold exactly when this condition holds.
        shorter = Q(expires_at__isnull=False) if expires is None else Q(expires_at__lt=expires)
        for start in range(0, len(digests), HOLD_BATCH):
            Blob.objects.filter(
                Q(retention_class="") | shorter,
                digest__in=digests[start : start + HOLD_BATCH],
                bytes_removed_at__isnull=True,
            ).update(retention_class=name, expires_at=expires, sensitivity=retention_class(name).sensitivity)


@dataclass(frozen=True)
class Expiry:
    """What a page or a replay says in place of bytes the sweep removed."""

    digest: str
    retention_class: str
    sensitivity: str
    expired_at: datetime
    removed_at: datetime
    removed_by: str
    record_id: int
    bytes_removed: bool = True  # False: the holder's hold ended, the bytes stay for other holders (`holds_end`)

    @property
    def sentence(self) -> str:
        sensitivity = f", sensitivity {self.sensitivity}" if self.sensitivity else ""
        # The same answer either way: for this holder the bytes are gone. Which of the two it was is said, not hidden.
        gone = "the bytes were removed" if self.bytes_removed else "the bytes were removed for this holder"
        return (
            f"expired under retention class {self.retention_class!r}{sensitivity}: {gone} on "
            f"{self.removed_at:%Y-%m-%d %H:%M} UTC (deletion record {self.record_id}); the digest stays"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "class": self.retention_class,
            "sensitivity": self.sensitivity,
            "expired_at": self.expired_at.isoformat(),
            "removed_at": self.removed_at.isoformat(),
            "record": self.record_id,
        }


def expiry_of(record: BlobDeletion) -> Expiry:
    return Expiry(
        digest=record.digest,
        retention_class=record.retention_class,
        sensitivity=record.sensitivity,
        expired_at=record.expired_at,
        removed_at=record.removed_at,
        removed_by=record.removed_by,
        record_id=record.pk,
        bytes_removed=record.bytes_removed,
    )


def blob_expiries(digests: Iterable[str]) -> dict[str, Expiry]:
    """{digest: Expiry} for those of `digests` whose bytes the sweep removed and nobody stored again (one query; the
    latest record each). Not a holder's answer: what a run or a recording holds is answered per holder
    (`run_blob_expiries`, fixtures_review.retention.recording_expiries)."""
    wanted = sorted({d for d in digests if d})
    if not wanted:
        return {}
    found: dict[str, Expiry] = {}
    removals = BlobDeletion.objects.filter(digest__in=wanted, bytes_removed=True, blob__bytes_removed_at__isnull=False)
    for record in removals.order_by("id"):
        found[record.digest] = expiry_of(record)
    return found


def run_blob_expiries(run: Run, digests: Iterable[str] | None = None) -> dict[str, Expiry]:
    """{digest: Expiry} for those of `digests` (None: every blob of the run, for the run page's summary and trace rows)
    whose bytes the sweep removed for `run`: the record that ended the run's own hold. One query (a second only for
    rows written before holds were per holder, which answer as their blob does). A later run storing the same bytes
    again changes nothing here."""
    rows = RunBlob.objects.filter(run=run).filter(Q(hold__removed_by__isnull=False) | Q(hold__isnull=True))
    if digests is not None:
        wanted = sorted({d[:71] for d in digests if d})
        if not wanted:
            return {}
        rows = rows.filter(blob__digest__in=wanted)
    found: dict[str, Expiry] = {}
    legacy: list[str] = []
    for run_blob in rows.select_related("blob", "hold__removed_by").order_by():
        hold = getattr(run_blob, "hold", None)  # a reverse one-to-one: absent raises an AttributeError
        if hold is None:
            legacy.append(run_blob.blob.digest)
        elif hold.removed_by is not None:
            found[hold.removed_by.digest] = expiry_of(hold.removed_by)
    if legacy:
        found.update(blob_expiries(legacy))
    return found


@dataclass(frozen=True)
class RunHolds:
    """What `run_blobs_hold` recorded: the digests whose bytes come back to the store with this run (the caller makes
    sure their files are there), and those the run carried but holds no bytes of (read from a run whose hold on them
    had ended: the caller removes a file it wrote for them)."""

    back: list[str]
    not_held: list[str]


def run_blobs_hold(*, run: Run, carried: Collection[str], read_from: Run | None) -> RunHolds:
    """Record `run`'s hold on each of its blobs (its RunBlob rows, written just before, in the import's transaction).

    - A blob listed without bytes (not in `carried`; the importer admits that only for a digest with a deletion
      record, `blobs.<digest>.expired`) is held by nothing: its hold is ended from the start by the digest's latest
      deletion record.
    - A blob `read_from` holds (the run a replay replays, when the replay's worker imports its child run) is a read:
      the hold is that run's (class, expiry, removal), whatever the child's bundle says. A reconstruction of a
      sensitive run keeps the source's clock, and a package built just before a removal brings nothing back. A blob
      the replayed run does not hold but another app's holder does (a fixture body held by digest, READ_HOLD_HOOKS)
      is a read of that holder's in the same way.
    - Anything else is recorded by this run: the class its bundle names, counted from the run's `created_at`.
    """
    run_blobs = list(RunBlob.objects.filter(run=run).select_related("blob"))
    if not run_blobs:
        return RunHolds([], [])
    digests = [rb.blob.digest for rb in run_blobs]
    source: dict[str, Any] = {}
    if read_from is not None:
        source = {
            h.blob.digest: h
            for h in RunBlobHold.objects.filter(run_blob__run=read_from, blob__digest__in=digests).select_related(
                "blob"
            )
        }
        # What else a replay read: a fixture body held by digest (seed 001) is held by the fixture, under its hold;
        # the run the replay made holds it under that hold too, never under a class of its own (READ_HOLD_HOOKS).
        others = [d for d in digests if d not in source]
        for hook in READ_HOLD_HOOKS if others else ():
            for digest, read in hook(others).items():
                source.setdefault(digest, read)
    latest_removal: dict[str, int] = {}
    listed_without_bytes = [d for d in digests if d not in carried]
    if listed_without_bytes:
        for pk, digest in (
            BlobDeletion.objects.filter(digest__in=listed_without_bytes).order_by("id").values_list("id", "digest")
        ):
            latest_removal[digest] = pk
    holds: list[RunBlobHold] = []
    own: dict[str, tuple[str, datetime | None]] = {}
    not_held: list[str] = []
    for rb in run_blobs:
        digest = rb.blob.digest
        read = source.get(digest)
        ended: int | None
        if digest not in carried:
            ended = latest_removal.get(digest)
            if ended is None:  # the importer refused such a listing before anything was written
                raise AssertionError(f"{digest} listed without bytes and without a deletion record")
            name, expires = (read.retention_class, read.expires_at) if read else (rb.retention, None)
            if read is not None and read.removed_by_id is not None:
                ended = read.removed_by_id  # the record that ended the source's hold: the same gap, the same record
        elif read is not None:
            name, expires, ended = read.retention_class, read.expires_at, read.removed_by_id
            if ended is not None:
                not_held.append(digest)
        else:
            name, expires, ended = rb.retention, hold_expiry(rb.retention, run.created_at), None
            own[digest] = (name, expires)
        holds.append(
            RunBlobHold(run_blob=rb, blob_id=rb.blob_id, retention_class=name, expires_at=expires, removed_by_id=ended)
        )
    RunBlobHold.objects.bulk_create(holds, batch_size=1000)
    # The bytes this run stores: back for a blob whose earlier holds all ended, then held under this run's classes.
    # A read adds no hold to the blob (the source's is already there, at least as long).
    back = blobs_bytes_back([d for d in carried if d not in not_held])
    blobs_hold_until(own)
    return RunHolds(back=back, not_held=not_held)


def _holders(blob: Blob) -> list[str]:
    # The live holds only: a run whose hold an earlier removal ended held nothing of these bytes.
    names = [
        f"run {run_id}"
        for run_id in RunBlobHold.objects.filter(blob=blob, removed_by__isnull=True)
        .order_by("run_blob__run_id")
        .values_list("run_blob__run__run_id", flat=True)[: HOLDERS_KEPT + 1]
    ]
    # Other apps' holders (a capture's body, a fixture's body) name themselves through this hook, so the run graph
    # does not import the review workflow (the layers contract).
    for hook in HOLDER_HOOKS:
        names.extend(hook(blob.digest))
    if len(names) > HOLDERS_KEPT:
        return [*names[:HOLDERS_KEPT], f"and {len(names) - HOLDERS_KEPT} more"]
    return names


HOLDER_HOOKS: list[Any] = []  # callables digest -> [holder names]; fixtures_review registers one in its AppConfig
# Callables (digest, record) run inside the removal's transaction: a holder that keeps its own copy of the same
# material (a capture's inline body) drops it there, so no copy outlives the bytes' removal.
EXPIRY_HOOKS: list[Any] = []
# Callables (now=, by=, batch=) -> (digests, more were due) the sweep runs after its own work: the holders of other
# apps end their holds that ran out on bytes a longer hold keeps (a staged recording's, fixtures_review.retention).
SWEEP_HOOKS: list[Any] = []
# Callables (digests) -> {digest: ReadHold} the import of a run a replay made asks about the blobs the run it replays
# does not hold: material a replay read from another app's holder (a fixture body, fixtures_review.retention), which
# the made run holds under that holder's hold (reading never starts a clock).
READ_HOLD_HOOKS: list[Any] = []


@dataclass(frozen=True)
class ReadHold:
    """The hold a run a replay made takes on bytes it read from another holder: that holder's class, expiry, and the
    deletion record that ended it (None: live)."""

    retention_class: str
    expires_at: datetime | None
    removed_by_id: int | None


def holds_end(*, blob_pk: int, now: datetime, by: str) -> list[BlobDeletion]:
    """End the runs' holds on one blob that ran out while a longer hold keeps its bytes (`kept_bytes_holds_end`)."""

    def staying(live: int) -> str:
        return f" ({live} run hold{'s' if live != 1 else ''} or a recording)"

    return kept_bytes_holds_end(
        RunBlobHold, "run_blob__run__run_id", "run", blob_pk=blob_pk, now=now, by=by, staying=staying
    )


def kept_bytes_holds_end(
    holds_model: type[Any],
    holder: str,
    noun: str,
    *,
    blob_pk: int,
    now: datetime,
    by: str,
    staying: Callable[[int], str] | None = None,
) -> list[BlobDeletion]:
    """End the holds (rows of `holds_model`: a run's `RunBlobHold`, a fixture's `FixtureBodyHold`) on one blob that
    ran out while a longer hold keeps its bytes: one deletion record per (class, expiry) of the holds ended
    (`bytes_removed` false), each naming its holders (`noun` and the `holder` value of each row). The bytes stay for
    the holds still live; the blob's own removal (`blob_expire`) is the last hold's. `staying(live)` adds to the
    reason what still holds them (`live`: this model's holds left).

    Locks the blob row first, as `blob_expire`'s claim does, so a removal and this never interleave on one blob; the
    holds are ended by a conditional UPDATE (still live), and a sweep that finds them ended already writes nothing."""
    records: list[BlobDeletion] = []
    with transaction.atomic():
        blob = Blob.objects.select_for_update().filter(pk=blob_pk, bytes_removed_at__isnull=True).first()
        if blob is None:
            return records  # removed meanwhile: the removal ended every hold live then
        due = list(
            holds_model.objects.filter(blob=blob, removed_by__isnull=True, expires_at__lte=now)
            .order_by("expires_at", "pk")
            .values_list("pk", "retention_class", "expires_at", holder)
        )
        groups: dict[tuple[str, datetime], list[tuple[int, str]]] = {}
        for pk, name, expires, held_by in due:
            assert expires is not None  # the query's condition
            groups.setdefault((name, expires), []).append((pk, held_by))
        live = holds_model.objects.filter(blob=blob, removed_by__isnull=True).count() - len(due)
        for (name, expires), holds in groups.items():
            cls = retention_class(name)
            names = list(dict.fromkeys(f"{noun} {held_by}" for _, held_by in holds))
            record = BlobDeletion.objects.create(
                blob=blob,
                digest=blob.digest,
                size=blob.size,
                retention_class=name,
                sensitivity=cls.sensitivity,
                expired_at=expires,
                removed_at=now,
                removed_by=f"retention sweep ({by})",
                reason=f"the retention period of class {cls.name!r} ({cls.period_text}) ran out on "
                f"{expires:%Y-%m-%d %H:%M} UTC for these {noun}s; the bytes stay for the holders still keeping them"
                + (staying(live) if staying else ""),
                holders=names[:HOLDERS_KEPT]
                + ([f"and {len(names) - HOLDERS_KEPT} more"] if len(names) > HOLDERS_KEPT else []),
                bytes_removed=False,
            )
            ended = holds_model.objects.filter(pk__in=[pk for pk, _ in holds], removed_by__isnull=True)
            if ended.update(removed_by=record) != len(holds):
                # Another sweep ended some of them first (the lock makes this a SQLite-without-locks case): undo.
                transaction.set_rollback(True)
                return []
            audit_record(
                actor=None,
                action="blob.hold_expired",
                target=blob.digest,
                detail={"class": name, "record": record.pk, "holders": record.holders},
            )
            records.append(record)
    for record in records:
        log.info("retention: ended %s's hold on %s (class %s)", record.holders, record.digest, record.retention_class)
    return records


def blob_expire(*, blob_pk: int, now: datetime, by: str) -> BlobDeletion | None:
    """Remove one due blob's bytes and record it; None when another sweep got there first or it is not due."""
    store = storages["blobs"]
    with transaction.atomic():
        claimed = Blob.objects.filter(pk=blob_pk, bytes_removed_at__isnull=True, expires_at__lte=now).update(
            bytes_removed_at=now
        )
        if claimed != 1:
            return None
        blob = Blob.objects.get(pk=blob_pk)
        cls = retention_class(blob.retention_class)
        assert blob.expires_at is not None  # the claim's condition
        record = BlobDeletion.objects.create(
            blob=blob,
            digest=blob.digest,
            size=blob.size,
            retention_class=blob.retention_class,
            sensitivity=blob.sensitivity,
            expired_at=blob.expires_at,
            removed_at=now,
            removed_by=f"retention sweep ({by})",
            reason=f"the retention period of class {cls.name!r} ({cls.period_text}) ran out on "
            f"{blob.expires_at:%Y-%m-%d %H:%M} UTC",
            holders=_holders(blob),
        )
        # Every hold live now ends with this removal, for good: bytes stored again later are a new hold.
        RunBlobHold.objects.filter(blob=blob, removed_by__isnull=True).update(removed_by=record)
        for hook in EXPIRY_HOOKS:
            hook(blob.digest, record)
        # Inside the transaction, after the claim: a failed delete rolls the claim back for the next sweep; a delete
        # followed by a failed commit is claimed again and recorded then (deleting nothing is a no-op).
        store.delete(blob_storage_name(blob.digest))
        audit_record(
            actor=None,
            action="blob.expired",
            target=blob.digest,
            detail={"class": blob.retention_class, "record": record.pk, "holders": record.holders},
        )
    log.info("retention: removed the bytes of %s (class %s)", blob.digest, blob.retention_class)
    return record


@dataclass(frozen=True)
class SweepResult:
    removed: list[str]
    due_left: bool  # more were due than one pass takes
    # Digests some of whose holds (a run's, `holds_end`; a recording's, SWEEP_HOOKS) ran out and were ended while a
    # longer hold keeps the bytes.
    holds_ended: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        # `holds_ended` is an added key (DESIGN §8: keys are added, never renamed).
        return {"removed": self.removed, "due_left": self.due_left, "holds_ended": self.holds_ended}


def retention_sweep(*, now: datetime | None = None, by: str = "worker", batch: int = SWEEP_BATCH) -> SweepResult:
    """Remove every blob whose retention ran out (at most `batch` per pass). Takes no state: run twice, the second
    pass finds nothing due and changes nothing."""
    now = now or timezone.now()
    due = list(
        Blob.objects.filter(bytes_removed_at__isnull=True, expires_at__lte=now)
        .order_by("expires_at", "pk")
        .values_list("pk", flat=True)[: batch + 1]
    )
    removed = []
    for pk in due[:batch]:
        record = blob_expire(blob_pk=pk, now=now, by=by)
        if record is not None:
            removed.append(record.digest)
    # Then the holds that ran out on bytes a longer hold keeps (after the removals: a blob removed above has no live
    # hold left, so no hold is ended twice over).
    held_on = list(
        RunBlobHold.objects.filter(removed_by__isnull=True, expires_at__lte=now, blob__bytes_removed_at__isnull=True)
        .order_by("blob_id")
        .values_list("blob_id", flat=True)
        .distinct()[: batch + 1]
    )
    ended: list[str] = []
    for pk in held_on[:batch]:
        for record in holds_end(blob_pk=pk, now=now, by=by):
            if record.digest not in ended:
                ended.append(record.digest)
    more = len(due) > batch or len(held_on) > batch
    for hook in SWEEP_HOOKS:
        digests, hook_more = hook(now=now, by=by, batch=batch)
        ended.extend(d for d in digests if d not in ended)
        more = more or hook_more
    return SweepResult(removed=removed, due_left=more, holds_ended=ended)
