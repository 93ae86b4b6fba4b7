"""On SQLite, an import writes its run in slices and publishes it last (issue 31, point 4).

SQLite has one write lock. An import in one transaction held it for the whole import (seconds at 100,000 events, far
longer on a busy machine), and every other write of the console waited behind it: a capture, a sign-in's session
row, a reviewer's action; past the busy timeout, a 503 (console/busy.py). PostgreSQL's writers do not queue behind
each other that way, so there an import stays one transaction (runs/importer.py), as it also does on SQLite inside a
caller's own transaction (runs.import_formats: the runs of one trace file, all or none).

Here:

- **A record first.** The import records itself (a `RunImport` row: its run id, unique, and the primary key reserved
  for its run) in a short transaction of its own. A second import of the same run id waits for the first one's
  outcome (as it would wait on PostgreSQL's unique index), then is told "already imported", or goes on if the
  first was refused.
- **Batches in transactions of their own.** The writer thread (runs.bulk.BackgroundInserts) writes each batch of
  rows in its own transaction, on a connection of its own whose foreign-key enforcement is off: the rows name their
  run's key before the run's row exists. Each of those transactions first checks that the import still holds its
  record, with its token, and beats its heartbeat: an import whose record was taken over (presumed crashed) writes
  nothing more. The references are checked set-wise before the run is published (runs.importer `_verify_edges`
  and the event count).
- **The lock shared.** Between batches the lock is free while the parser works, and the writer makes sure of it:
  at least LOCK_FREE_S of free lock in every LOCK_HELD_MAX_S (SQLite's busy handler polls at most every 100 ms,
  so a waiting writer gets in within about LOCK_HELD_MAX_S + LOCK_FREE_S of its first try).
- **Invisible until published.** Every read of a run's events, edges, objects, findings, masked secrets and blobs
  goes through its Run row (selected by run id, or a Run instance), and that row is written last, with its blobs'
  rows, its masked secrets, the audit record and the record's removal, in one short transaction. A reader sees the
  run complete or not at all. The admin's lists of events and findings, the only reads across runs, show rows of
  published runs only (runs/admin.py). Nothing else lists those tables without a run.
- **Cleaned up.** A refused import removes its rows in slices too, then the blob files it wrote that nothing else
  holds, then its record. A crashed one leaves its record: once its heartbeat is older than N17Q_IMPORT_STALE_S, or
  its process on this host is gone, the next import (or the periodic sweep, runs.tasks) takes the record over and
  removes the same.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from django.utils import timezone

from n17q_engine.bundle import BundleError

from .bulk import SQLITE_HAS_RETURNING, Appender, _sqlite_reserve
from .models import Blob, Edge, Event, Finding, MaskedSecret, Run, RunBlob, RunImport, RunObject

log = logging.getLogger(__name__)

# The write lock is left free this long at least once in every LOCK_HELD_MAX_S of an import's writing: longer than
# SQLite's busy handler sleeps between two tries (100 ms), so a writer waiting behind the import gets its turn.
LOCK_FREE_S = 0.12
LOCK_HELD_MAX_S = 0.5
# How often an import waiting for another import of the same run id looks again.
WAIT_POLL_S = 0.25
# Rows removed per transaction when an import's rows are removed.
DELETE_SLICE = 2000


class ImportTakenOver(Exception):
    """The import's record is no longer its own: it was presumed crashed and its rows are being removed."""


# A bundle of fewer lines is imported in one transaction even on SQLite: it holds the lock about as long as one of a
# large import's slices' stretches (5,000 events: about 0.2 s on a quiet machine), and the record, the publishing
# and the per-slice commits would cost it a fifth of its time (a 1,000-event import: 77 ms in one transaction, 92 ms
# in slices; what the OTLP receiver's and small harnesses' runs are).
SLICES_FROM_LINES = 5_000


def wanted(lines: int) -> bool:
    """Whether an import of `lines` lines commits in slices: on SQLite, unless turned off, for a bundle of at least
    SLICES_FROM_LINES lines, and not inside a caller's transaction (whose all-or-nothing is the caller's:
    runs.import_formats imports the runs of one file together)."""
    return (
        connection.vendor == "sqlite"
        and settings.N17Q_IMPORT_SLICES
        and SQLITE_HAS_RETURNING
        and lines >= SLICES_FROM_LINES
        and not connection.in_atomic_block
    )


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:300]


class LockShare:
    """Keeps the write lock free for LOCK_FREE_S at least once in every LOCK_HELD_MAX_S of one writer's slices."""

    def __init__(self) -> None:
        self._released_at: float | None = None
        self._last_free = time.monotonic()

    def before(self) -> None:
        now = time.monotonic()
        if self._released_at is None or now - self._released_at >= LOCK_FREE_S:
            self._last_free = now  # not held yet, or the parser's own pause was long enough
        elif now - self._last_free >= LOCK_HELD_MAX_S:
            time.sleep(self._released_at + LOCK_FREE_S - now)
            self._last_free = time.monotonic()

    def after(self) -> None:
        self._released_at = time.monotonic()


@dataclass
class ImportSlices:
    """One import's record and the writing it allows: batches (`write`, from the writer thread), the publishing
    transaction (`publishing`), and the removal of its rows (`abandon`)."""

    run_id: str
    run_pk: int
    record_pk: int
    token: str
    # SQLite's page cache for the writer's connection, in KiB (None: the connection's own setting).
    cache_kib: int | None = None
    _share: LockShare = field(default_factory=LockShare)
    _writer: Any = None

    # ---- the writer thread's connection (runs.bulk.Slices)

    def connect(self) -> Any:
        # A connection of the writer's own, made in its thread: foreign-key enforcement off for its rows only (the
        # run's row comes last), and Django's busy timeout, so a batch waits for other writers as they wait for it.
        self._writer = connections.create_connection(DEFAULT_DB_ALIAS)
        self._writer.ensure_connection()
        raw = self._writer.connection
        raw.execute("PRAGMA foreign_keys = OFF")
        if self.cache_kib is not None:
            raw.execute(f"PRAGMA cache_size = -{int(self.cache_kib)}")
        return raw

    def write(self, raw: Any, statements: list[tuple[str, Any]]) -> None:
        with self._slice(raw):
            Appender.execute(raw, statements)

    def disconnect(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    @contextmanager
    def _slice(self, raw: Any) -> Iterator[None]:
        """One short write transaction on `raw` that goes ahead only while the import holds its record."""
        self._share.before()
        raw.execute("BEGIN IMMEDIATE")
        try:
            beat = raw.execute(
                f'UPDATE "{RunImport._meta.db_table}" SET heartbeat_at = ? WHERE id = ? AND token = ?',
                [_db_now(), self.record_pk, self.token],
            )
            if beat.rowcount != 1:
                raise ImportTakenOver(
                    f"the import of {self.run_id} was taken for crashed and its rows are being removed"
                )
            yield
            raw.execute("COMMIT")
        except BaseException:
            if raw.in_transaction:
                raw.execute("ROLLBACK")
            raise
        finally:
            self._share.after()

    # ---- publishing

    @contextmanager
    def publishing(self) -> Iterator[None]:
        """The transaction that makes the run visible: the caller writes the run's row (with the key reserved for it)
        and what belongs to it inside; the record goes in the same transaction. Refused if the record was taken
        over meanwhile."""
        with transaction.atomic():
            if not RunImport.objects.filter(pk=self.record_pk, token=self.token).exists():
                raise ImportTakenOver(f"the import of {self.run_id} was taken for crashed before it was published")
            yield
            RunImport.objects.filter(pk=self.record_pk, token=self.token).delete()

    # ---- the blob files

    def will_write_blob_files(self, names: list[str]) -> None:
        """Record the blob files this import is about to write, so that they go with its rows should it crash."""
        if names:
            with self._held():
                record = RunImport.objects.get(pk=self.record_pk)
                record.blob_files = sorted(set(record.blob_files) | set(names))
                record.save(update_fields=["blob_files"])

    # ---- removing the rows

    def abandon(self) -> None:
        """Remove every row written under the run's key, in slices, then the blob files it wrote that nothing holds,
        then the record. Does nothing once the record is no longer this import's (published, or taken over by a
        sweep, which removes the rows itself)."""
        try:
            for sql in _DELETES:
                while True:
                    with self._held(), connection.cursor() as cursor:
                        cursor.execute(sql, [self.run_pk, DELETE_SLICE])
                        removed = cursor.rowcount
                    if removed < DELETE_SLICE:
                        break
            with self._held():
                record = RunImport.objects.get(pk=self.record_pk)
                remove_blob_files_nobody_holds(record.blob_files)
                record.delete()
        except ImportTakenOver:
            return

    @contextmanager
    def _held(self) -> Iterator[None]:
        """A short transaction on the caller's connection that goes ahead only while this import holds its record."""
        self._share.before()
        try:
            with transaction.atomic():
                beat = RunImport.objects.filter(pk=self.record_pk, token=self.token).update(heartbeat_at=timezone.now())
                if beat != 1:
                    raise ImportTakenOver(f"the import of {self.run_id} is no longer this one's")
                yield
        finally:
            self._share.after()


def _table(model: Any) -> str:
    return f'"{model._meta.db_table}"'


# What an unpublished import can have written, children before what they name (foreign keys are enforced here).
# Edges have no index of their own on the run: they are found through their source events.
_DELETES = tuple(
    f"DELETE FROM {_table(model)} WHERE id IN (SELECT id FROM {_table(model)} WHERE run_id = %s LIMIT %s)"
    if model is not Edge
    else (
        f"DELETE FROM {_table(Edge)} WHERE id IN (SELECT e.id FROM {_table(Event)} s "
        f"JOIN {_table(Edge)} e ON e.source_id = s.id WHERE s.run_id = %s LIMIT %s)"
    )
    for model in (Finding, MaskedSecret, RunBlob, Edge, RunObject, Event)
)


def remove_blob_files_nobody_holds(names: list[str]) -> None:
    """Remove the blob files an import wrote and no Blob row holding bytes names (a row whose bytes the sweep removed
    holds none: a file kept for it would be a copy no sweep ever removes). In slices, another import of the same
    bytes may have counted on such a file and published meanwhile (or a recording staged the same body): decided and
    done in one transaction, which on SQLite holds the write lock from its start, so that nothing publishes the
    digest between the question and the removal; an import that publishes later writes the file again
    (runs.importer._publish)."""
    if not names:
        return
    digests = {name: "sha256:" + name.removeprefix("sha256/") for name in names}
    store = storages["blobs"]
    with transaction.atomic():
        rows = Blob.objects.filter(digest__in=list(digests.values()), bytes_removed_at__isnull=True)
        held = set(rows.values_list("digest", flat=True))
        for name, digest in digests.items():
            if digest in held:
                continue
            try:
                store.delete(name)
            except OSError:
                log.warning("could not remove blob %s after a refused import", name)


def _db_now() -> str:
    # An aware datetime as Django writes it into SQLite (USE_TZ): naive UTC, ISO form.
    return timezone.now().astimezone(UTC).replace(tzinfo=None).isoformat(" ")


# ---- the record: taking it, waiting for another import's, sweeping crashed ones


def claim(run_id: str, *, cache_kib: int | None = None) -> ImportSlices:
    """Record this import of `run_id`, or wait until another import of it ends: refused ("already imported") if that
    one published the run, recorded if it was refused or is found crashed."""
    token = secrets.token_hex(16)
    while True:
        sweep_abandoned_imports()
        with transaction.atomic():
            if Run.objects.filter(run_id=run_id).exists():
                raise BundleError(f"run {run_id!r} is already imported; history is never replaced", field="run.id")
            if not RunImport.objects.filter(run_id=run_id).exists():
                with connection.cursor() as cursor:
                    (run_pk,) = _sqlite_reserve(cursor, Run._meta.db_table, 1)
                now = timezone.now()
                record = RunImport.objects.create(
                    run_id=run_id, run_key=run_pk, holder=_holder(), token=token, started_at=now, heartbeat_at=now
                )
                return ImportSlices(run_id=run_id, run_pk=run_pk, record_pk=record.pk, token=token, cache_kib=cache_kib)
        time.sleep(WAIT_POLL_S)


def _abandoned(record: RunImport, now: Any) -> bool:
    if record.heartbeat_at < now - timedelta(seconds=settings.N17Q_IMPORT_STALE_S):
        return True
    host, _, pid = record.holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True  # its process is gone
    except OSError:
        return False  # alive, someone else's
    return False


def sweep_abandoned_imports() -> list[str]:
    """Remove the rows of every import presumed crashed (its heartbeat stale, or its process on this host gone);
    returns their run ids. Each record is taken over first, with a conditional update that succeeds for one sweep
    only, and only if the import did not beat meanwhile; from then on that import's own writes are refused."""
    swept = []
    now = timezone.now()
    for record in RunImport.objects.all():
        if not _abandoned(record, now):
            continue
        token = secrets.token_hex(16)
        taken = RunImport.objects.filter(pk=record.pk, token=record.token, heartbeat_at=record.heartbeat_at).update(
            token=token, holder=_holder(), heartbeat_at=timezone.now()
        )
        if taken != 1:
            continue
        log.warning("removing the rows of an abandoned import of %s (by %s)", record.run_id, record.holder)
        try:
            ImportSlices(run_id=record.run_id, run_pk=record.run_key, record_pk=record.pk, token=token).abandon()
        except DatabaseError:
            # Not the caller's failure (an import of another run, say): the record is this process's now, and is
            # swept again once it is stale.
            log.warning("could not remove the rows of the import of %s yet", record.run_id, exc_info=True)
            continue
        swept.append(record.run_id)
    return swept
