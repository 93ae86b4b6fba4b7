"""Receiving spans, and turning a finished trace into a run (issue 17, point 1).

- `spans_receive` stores one request's spans: a fixed number of queries per trace it touches (create the trace row
  if new, lock it, one chunk row, one counter update), never one per span. A trace is its opener's (issue 33): the
  spans of a trace another sender opened are refused and audited, and every chunk names who sent it.
- A trace is due when its root span has ended and nothing has arrived for N17Q_OTLP_QUIET_SECONDS. `traces_due`
  finds them; `traces_enqueue_due` sends a finalisation task for each (called by the receiver after a request, at
  most once per half quiet period, and by a loop in each Celery worker: otlp_receiver.tasks), and `otlp_flush`
  finalises on demand.
- `trace_finalize` claims the trace with a conditional UPDATE (only one caller wins; a claim older than
  N17Q_OTLP_FINALIZE_LEASE_S can be taken over, for a worker that died), joins its chunks, converts them with
  n17q_engine.formats.otlp and imports the run through the same all-or-nothing path as a file
  (runs.import_formats.import_converted); in that transaction the chunks the run was made from are removed and the
  trace is marked finalized. Run twice, it does the work once. A run already under the trace's run id was not made
  by this receiver (it records each run it makes in that transaction): the trace is refused, never adopting it.
- Only a trace's opener (the user behind the token that opened it) or an admin finalises it on demand
  (`trace_may_finalize`, `trace_flush`: "Import now", `otlp_flush --user`); anyone else is refused in one line and
  audited, like spans sent for another's trace. The due finalisation (the worker's sweep) is nobody's act.
- Spans arriving for a trace that is no longer receiving are kept as its late addendum (`TraceChunk.late`),
  counted on the trace, never merged into the run's history.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import connections, transaction
from django.db.models import F, Q, QuerySet
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from accounts.audit import audit_record
from accounts.roles import ADMIN, user_roles
from n17q_engine.bundle import BundleError
from n17q_engine.formats import ConversionError
from n17q_engine.formats.otlp import convert_trace, flatten_protobuf
from n17q_engine.identifiers import OTLP_MAKER
from n17q_secrets import gate, scanning
from runs.import_formats import import_converted
from runs.models import Run

from . import wire
from .models import CHUNK_MEDIA_TYPE, ReceivedTrace, TraceChunk

log = logging.getLogger(__name__)

FINALIZE_TASK = "otlp_receiver.finalize_trace"  # one trace: kept for messages sent before issue 31
FINALIZE_BATCH_TASK = "otlp_receiver.finalize_traces"
# How many traces one finalisation task carries.
FINALIZE_BATCH = 50
# The shortest wait between two sweeps of a worker (sweep_delay).
SWEEP_MIN_DELAY_S = 0.2
_SWEEP_KEY = "otlp:due-sweep"
# How many due traces one sweep sends at most; the next sweep takes the rest.
SWEEP_LIMIT = 200


@dataclass(frozen=True)
class Sender:
    """Who sends a request's spans: the harness token (None for a signed-in session) and its user. A trace is its
    opener's; the same user's other token is another sender (a token is what an exporter holds and loses)."""

    token_id: int | None
    user_id: int | None
    user: Any = None  # the user, for the audit log
    token_prefix: str = ""

    @property
    def key(self) -> tuple[int | None, int | None]:
        return (self.token_id, self.user_id)


@dataclass(frozen=True)
class Received:
    traces: int
    accepted: int
    # Traces of this request that another sender opened: trace id -> spans refused.
    refused: dict[str, int] = field(default_factory=dict)

    @property
    def refused_spans(self) -> int:
        return sum(self.refused.values())

    def refusal(self) -> str:
        """One line: whose traces the refused spans were meant for."""
        if not self.refused:
            return ""
        ids = sorted(self.refused)
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        return (
            f"{self.refused_spans} span{'s' if self.refused_spans != 1 else ''} of trace{'s' if len(ids) > 1 else ''} "
            f"{shown} refused: another token opened {'them' if len(ids) > 1 else 'it'}, and only the token that "
            "opened a trace adds spans to it"
        )


@dataclass(frozen=True)
class MaskedBatch:
    """A trace's part of one request as it may be stored (issue 32): its chunk through the storage gate (the request
    masked byte for byte with `*`, so it still parses and its spans keep their byte ranges) and the root span's and
    the service's names, stored and shown on their own, masked as text."""

    batch: wire.TraceBatch
    chunk: gate.GatedBytes
    root_name: str
    service_name: str
    found: list[dict[str, str]]


def batch_mask(batch: wire.TraceBatch) -> MaskedBatch:
    """Masked on arrival, before the request's transaction (the gate's scan does not hold SQLite's write lock), so a
    buffered request never holds a secret, whether its trace becomes a run, is refused, or is a late addendum."""
    found: list[dict[str, str]] = []
    chunk = gate.gate_bytes(zlib.compress(batch.payload, 1), media_type=CHUNK_MEDIA_TYPE, where="spans", findings=found)
    root_name = scanning.mask_text(batch.root_name, "root span name", found) if batch.root_name else ""
    service_name = scanning.mask_text(batch.service_name, "service.name", found) if batch.service_name else ""
    return MaskedBatch(batch, chunk, root_name[:200], service_name[:200], found)


def spans_receive(
    batches: dict[str, wire.TraceBatch], *, sender: Sender | None = None, now: datetime | None = None
) -> Received:
    """Store one request's spans, trace by trace, in one transaction, masked (`batch_mask`) before any is stored.

    A trace is its opener's: the sender whose spans created its row (one INSERT ... ON CONFLICT DO NOTHING; of two
    senders racing for a new trace id, the row's writer wins and the other is refused). Spans for a trace another
    sender opened are refused, counted in the answer and audited; a trace received before owners were recorded (no
    owner) is taken by its next sender. `sender` None: a caller that is no sender (tests, the demo), whose traces
    have no owner."""
    if not batches:
        return Received(0, 0)
    masked = {t: batch_mask(b) for t, b in batches.items()}
    now = now or timezone.now()
    ids = sorted(batches)
    token_id, user_id = sender.key if sender is not None else (None, None)
    with transaction.atomic():
        ReceivedTrace.objects.bulk_create(
            [
                ReceivedTrace(
                    trace_id=t,
                    first_received_at=now,
                    last_received_at=now,
                    service_name=masked[t].service_name,
                    opened_by_token_id=token_id,
                    opened_by_id=user_id,
                )
                for t in ids
            ],
            ignore_conflicts=True,
        )
        # Locked (PostgreSQL; SQLite's write transaction already serializes): a finalisation claiming one of these
        # traces waits for this request, so every chunk is either in the run or in its late addendum, never lost.
        # The owner is read under the same lock, so no other request changes it between the check and the chunk.
        traces = {
            t.trace_id: t
            for t in ReceivedTrace.objects.select_for_update()
            .filter(trace_id__in=ids)
            .only("id", "trace_id", "state", "opened_by_token_id", "opened_by_id")
        }
        refused: dict[str, int] = {}
        ownerless: list[int] = []
        for t in ids:
            owner = (traces[t].opened_by_token_id, traces[t].opened_by_id)
            if owner == (None, None):
                ownerless.append(traces[t].pk)
            elif owner != (token_id, user_id):
                refused[t] = masked[t].batch.span_count
        if ownerless and sender is not None:
            ReceivedTrace.objects.filter(pk__in=ownerless, opened_by_token__isnull=True, opened_by__isnull=True).update(
                opened_by_token_id=token_id, opened_by_id=user_id
            )
        taken = [t for t in ids if t not in refused]
        TraceChunk.objects.bulk_create(
            [
                TraceChunk(
                    trace_id=traces[t].pk,
                    received_at=now,
                    span_count=masked[t].batch.span_count,
                    late=traces[t].state != ReceivedTrace.State.RECEIVING,
                    data=masked[t].chunk,
                    masked=masked[t].found,
                    sent_by_token_id=token_id,
                    sent_by_id=user_id,
                )
                for t in taken
            ]
        )
        for t in taken:
            batch, trace = masked[t].batch, traces[t]
            changes: dict[str, Any] = {"last_received_at": now}
            if trace.state != ReceivedTrace.State.RECEIVING:
                changes["late_span_count"] = F("late_span_count") + batch.span_count
            else:
                changes["span_count"] = F("span_count") + batch.span_count
                if batch.root_ended:
                    changes.update(root_ended=True, root_name=masked[t].root_name)
            ReceivedTrace.objects.filter(pk=trace.pk).update(**changes)
        for t in sorted(refused):
            # Who tried to add what to whose trace: the owner is named here, never in the answer to the sender.
            audit_record(
                actor=sender.user if sender is not None else None,
                action="otlp.spans_refused",
                target=f"trace {t}",
                detail={
                    "spans": refused[t],
                    "token": sender.token_prefix if sender is not None else "",
                    "owner_token_id": traces[t].opened_by_token_id,
                    "owner_user_id": traces[t].opened_by_id,
                    "reason": "another sender opened this trace",
                },
            )
    return Received(len(taken), sum(masked[t].batch.span_count for t in taken), refused=refused)


class TraceRefused(Exception):
    """An act on a trace that is not the actor's (one line, safe to show the actor)."""


def _ownerless_q() -> Q:
    return Q(opened_by_token__isnull=True, opened_by__isnull=True)


def trace_may_finalize(trace: ReceivedTrace, user: Any) -> bool:
    """Whether `user` may finalise `trace` now (an explicit flush): its opener, the user behind the token (or the
    session) whose spans opened it, or an admin. A trace received before owners were recorded is nobody's: any
    importer may. A token without its user (never written so) is nobody's to finalise but an admin's (fail closed)."""
    if trace.opened_by_token_id is None and trace.opened_by_id is None:
        return True
    if not getattr(user, "is_authenticated", False):
        return False
    return (trace.opened_by_id is not None and trace.opened_by_id == user.pk) or ADMIN in user_roles(user)


def _finalizable_by_q(user: Any) -> Q:
    """`trace_may_finalize` as a queryset condition, for a flush of every trace the user may finalise."""
    if ADMIN in user_roles(user):
        return Q()
    return _ownerless_q() | Q(opened_by_id=user.pk)


def _finalize_refused(trace: ReceivedTrace, user: Any) -> TraceRefused:
    """Audit the refusal (the owner is named there, never in the answer) and say it in one line."""
    audit_record(
        actor=user,
        action="otlp.finalize_refused",
        target=f"trace {trace.trace_id}",
        detail={
            "owner_token_id": trace.opened_by_token_id,
            "owner_user_id": trace.opened_by_id,
            "reason": "another user opened this trace",
        },
    )
    return TraceRefused(
        f"trace {trace.trace_id} was opened by another user: only the user who opened trace {trace.trace_id}, "
        "or an admin, may import it now"
    )


def trace_flush(*, trace_pk: int, user: Any) -> ReceivedTrace:
    """`user`'s "Import now": the trace finalised without waiting for its root span or the quiet period, if
    `user` may (`trace_may_finalize`); else TraceRefused, audited. The run is its opener's whoever flushes it."""
    trace = ReceivedTrace.objects.get(pk=trace_pk)
    if not trace_may_finalize(trace, user):
        raise _finalize_refused(trace, user)
    return trace_finalize(trace_pk=trace_pk, force=True, user=user)


def _due_q(now: datetime) -> Q:
    """Due to be finalised: receiving, root ended and quiet; or claimed by a finalisation whose lease has lapsed."""
    quiet = now - timedelta(seconds=settings.N17Q_OTLP_QUIET_SECONDS)
    lapsed = now - timedelta(seconds=settings.N17Q_OTLP_FINALIZE_LEASE_S)
    return Q(state=ReceivedTrace.State.RECEIVING, root_ended=True, last_received_at__lte=quiet) | Q(
        state=ReceivedTrace.State.FINALIZING, claimed_at__lt=lapsed
    )


def _unsent_q(now: datetime) -> Q:
    """Due and not waiting in the broker (issue 31): never sent; or sent before spans that came after it (that
    task's claim failed, or will fail, the quiet check); or sent before the lapsed claim it must take over; or sent
    longer ago than the lease (the message was lost). A trace sent and still pending is not sent again."""
    lost = now - timedelta(seconds=settings.N17Q_OTLP_FINALIZE_LEASE_S)
    return (
        Q(enqueued_at__isnull=True)
        | Q(enqueued_at__lt=lost)
        | Q(state=ReceivedTrace.State.RECEIVING, enqueued_at__lt=F("last_received_at"))
        | Q(state=ReceivedTrace.State.FINALIZING, enqueued_at__lt=F("claimed_at"))
    )


def traces_due(*, now: datetime | None = None, limit: int = SWEEP_LIMIT) -> list[int]:
    """Receiving traces whose root span has ended and which have been quiet for N17Q_OTLP_QUIET_SECONDS, and
    traces whose finalisation claim has lapsed (its worker died), whether or not a task was sent for them."""
    now = now or timezone.now()
    return list(
        ReceivedTrace.objects.filter(_due_q(now)).order_by("last_received_at").values_list("pk", flat=True)[:limit]
    )


def traces_unsent(*, now: datetime | None = None, limit: int = SWEEP_LIMIT) -> list[int]:
    """The due traces a sweep sends: `traces_due` less those whose task is still pending (`_unsent_q`)."""
    now = now or timezone.now()
    return list(
        ReceivedTrace.objects.filter(_due_q(now), _unsent_q(now))
        .order_by("last_received_at")
        .values_list("pk", flat=True)[:limit]
    )


def _mark_sent(pks: list[int], now: datetime) -> list[int]:
    """Set `enqueued_at` on those of `pks` still due and unsent, and answer which: one conditional UPDATE ...
    RETURNING. The condition is evaluated again on each row as it is written (PostgreSQL re-checks a row another
    transaction changed meanwhile; SQLite has one writer at a time), so of two sweeps racing for one trace only the
    first marks it, and only the sweep that marked a trace sends it. The SQL is the ORM's own UPDATE with RETURNING
    added (both backends have it; Django's update() answers a count, not which rows)."""
    if not pks:
        return []
    marked = ReceivedTrace.objects.filter(_due_q(now), _unsent_q(now), pk__in=pks)
    query = cast(UpdateQuery, marked.query.chain(UpdateQuery))
    query.add_update_values({"enqueued_at": now})
    compiler = query.get_compiler(marked.db)
    compiler.pre_sql_setup()
    sql, params = compiler.as_sql()
    pk_column = connections[marked.db].ops.quote_name(str(ReceivedTrace._meta.pk.column))
    with connections[marked.db].cursor() as cursor:
        cursor.execute(f"{sql} RETURNING {pk_column}", params)
        return sorted(row[0] for row in cursor.fetchall())


def traces_send(pks: list[int], *, now: datetime) -> int:
    """Send the marked traces' finalisation in tasks of FINALIZE_BATCH traces; a batch the broker did not take is
    unmarked, so the next sweep sends it. Answers how many traces were sent."""
    sent = 0
    for i in range(0, len(pks), FINALIZE_BATCH):
        batch = pks[i : i + FINALIZE_BATCH]
        try:
            # By name: the task module calls back into this one.
            current_app.send_task(FINALIZE_BATCH_TASK, args=(batch,), queue=settings.N17Q_OTLP_QUEUE, retry=False)
        except Exception as exc:  # a broker that is away: the next sweep sends these again
            ReceivedTrace.objects.filter(pk__in=batch, enqueued_at=now).update(enqueued_at=None)
            log.warning("%s traces: the broker could not be reached (%s); the next sweep sends them", len(batch), exc)
            continue
        sent += len(batch)
    return sent


def traces_enqueue_due(*, throttled: bool = False, now: datetime | None = None) -> int:
    """Send the finalisation of every due trace not already sent, once (issue 31). `throttled`: at most once per
    half quiet period for all the web processes sharing the cache (the receiver calls this after each request).
    Answers how many traces were sent."""
    if throttled and not cache.add(_SWEEP_KEY, 1, timeout=max(1, settings.N17Q_OTLP_QUIET_SECONDS // 2)):
        return 0
    now = now or timezone.now()
    candidates = traces_unsent(now=now)
    if not candidates:
        return 0
    return traces_send(_mark_sent(candidates, now), now=now)


def sweep_delay(*, now: datetime | None = None) -> float:
    """Seconds until the worker's sweep should look again (issue 31): when the next unsent trace whose root has
    ended falls quiet, at most half the quiet period (a root ending, a lapsed claim or a lost task is noticed by
    then) and at least SWEEP_MIN_DELAY_S (a busy receiver is swept often, not in a spin)."""
    now = now or timezone.now()
    longest = max(1.0, settings.N17Q_OTLP_QUIET_SECONDS / 2)
    oldest = (
        ReceivedTrace.objects.filter(state=ReceivedTrace.State.RECEIVING, root_ended=True)
        .filter(Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=F("last_received_at")))
        .order_by("last_received_at")
        .values_list("last_received_at", flat=True)
        .first()
    )
    if oldest is None:
        return longest
    due_in = (oldest + timedelta(seconds=settings.N17Q_OTLP_QUIET_SECONDS) - now).total_seconds()
    return min(longest, max(SWEEP_MIN_DELAY_S, due_in))


def _claim(trace_pk: int, now: datetime, *, force: bool) -> bool:
    lapsed = now - timedelta(seconds=settings.N17Q_OTLP_FINALIZE_LEASE_S)
    claimable = Q(state=ReceivedTrace.State.FINALIZING, claimed_at__lt=lapsed)
    if force:
        claimable |= Q(state=ReceivedTrace.State.RECEIVING)
    else:
        quiet = now - timedelta(seconds=settings.N17Q_OTLP_QUIET_SECONDS)
        claimable |= Q(state=ReceivedTrace.State.RECEIVING, root_ended=True, last_received_at__lte=quiet)
    return (
        ReceivedTrace.objects.filter(claimable, pk=trace_pk).update(
            state=ReceivedTrace.State.FINALIZING, claimed_at=now
        )
        == 1
    )


def trace_payload(trace_pk: int, *, late: bool = False) -> bytes:
    """The trace's spans as one ExportTraceServiceRequest (its chunks joined in arrival order)."""
    return _joined_chunks(trace_pk, late=late).payload


@dataclass
class _Joined:
    payload: bytes
    last: int | None  # the pk of the last chunk read (None: there were none)
    masked: list[dict[str, str]]  # what was masked on arrival, each as a masked secret of the run (place `received`)
    senders: list[dict[str, Any]]  # who sent the chunks: [{"token_id", "user_id", "spans"}] in first-sent order


def _joined_chunks(trace_pk: int, *, late: bool) -> _Joined:
    """The trace's chunks joined, and what the run made from them must remember of them. One query."""
    chunks = TraceChunk.objects.filter(trace_id=trace_pk, late=late).order_by("id")
    parts: list[bytes] = []
    last: int | None = None
    found: list[dict[str, str]] = []
    senders: dict[tuple[int | None, int | None], int] = {}
    rows = chunks.values_list("id", "data", "masked", "sent_by_token_id", "sent_by_id", "span_count")
    for pk, data, masked, token_id, user_id, spans in rows.iterator(chunk_size=200):
        parts.append(zlib.decompress(bytes(data)))
        found.extend({"place": "received", **m} for m in masked or ())
        senders[(token_id, user_id)] = senders.get((token_id, user_id), 0) + spans
        last = pk
    kept = [{"token_id": t, "user_id": u, "spans": n} for (t, u), n in senders.items()]
    return _Joined(b"".join(parts), last, found, kept)


class _ClaimLost(Exception):
    """The trace's claim was taken over while this finalisation worked (its lease lapsed): it records nothing."""


def trace_finalize(*, trace_pk: int, force: bool = False, user: Any = None) -> ReceivedTrace:
    """Make the trace a run, once. `force` (an explicit flush): without waiting for its root span or the quiet
    period. A trace that is not claimable (already finalized, refused, or being finalized) is returned as it is.

    The run, the removal of the chunks it was made from and the trace's `finalized` state commit in one transaction
    (issue 31): a finalized trace's spans are its run's events and its kept original (the `source-otlp` blob, the
    same bytes), not a second, unmasked copy in its chunks (issue 32). A refusal keeps them, so the refused spans
    stay readable on the trace's page; spans that arrive after the claim are chunks of the late addendum, never
    removed here."""
    now = timezone.now()
    if not _claim(trace_pk, now, force=force):
        return ReceivedTrace.objects.get(pk=trace_pk)
    trace = ReceivedTrace.objects.select_related("opened_by").get(pk=trace_pk)
    claimed = ReceivedTrace.objects.filter(pk=trace_pk, state=ReceivedTrace.State.FINALIZING, claimed_at=now)
    try:
        joined = _joined_chunks(trace_pk, late=False)
        payload = joined.payload
        converted = convert_trace(flatten_protobuf(payload), original=payload, original_media_type=wire.PROTOBUF)
        run_id = converted.run["id"]
        existing = Run.objects.filter(run_id=run_id).select_related("imported_by").first()
        if existing is not None:
            # Every run this receiver makes is recorded on its trace in the run's own transaction (issue 31), so a
            # run already under this id is not this trace's: made from a file, another trace, or imported before
            # derived ids were reserved (issue 33). Never adopted: the trace says whose it is and keeps its spans.
            by = existing.imported_by.get_username() if existing.imported_by else "nobody signed in"
            raise BundleError(
                f"run {run_id} is already imported ({existing.imported_at:%Y-%m-%d %H:%M:%S} UTC, by {by}), not made "
                "from this trace's spans: a trace's run is made only from the spans its sender sent"
            )
        imported = import_converted(
            [converted],
            # The run is the trace's sender's (issue 33), whoever finalises it: the worker, or an operator's flush.
            user=user if trace.opened_by is None else trace.opened_by,
            label=f"trace {trace.trace_id}",
            made_by=OTLP_MAKER,
            masked_before=joined.masked,
            on_stored=lambda results: _record_run(claimed, results[0].run, trace_pk=trace_pk, joined=joined),
        )
        run = imported.first.run
    except (ConversionError, BundleError) as exc:
        message = " ".join(str(exc).splitlines())[:1000]
        claimed.update(state=ReceivedTrace.State.REFUSED, error=message, finalized_at=timezone.now())
        log.warning("trace %s was not imported: %s", trace.trace_id, message)
        return ReceivedTrace.objects.get(pk=trace_pk)
    except _ClaimLost:
        log.warning("trace %s: its claim was taken over while it was imported; that finalisation records it", trace_pk)
        return ReceivedTrace.objects.get(pk=trace_pk)
    log.info("trace %s imported as run %s", trace.trace_id, run.run_id)
    return ReceivedTrace.objects.get(pk=trace_pk)


def _record_run(claimed: QuerySet[ReceivedTrace], run: Run, *, trace_pk: int, joined: _Joined) -> None:
    """In the run's transaction: remove the chunks it was made from and mark the trace finalized as `run`, keeping
    who sent those chunks (`ReceivedTrace.senders`), or raise _ClaimLost (which undoes the run) when the claim is no
    longer this finalisation's. Every chunk that is not late was stored before the claim (spans_receive locks the
    trace and writes a chunk as late once the trace is no longer receiving), so the chunks up to `joined.last`, the
    last one read, are all of them; a late one is never touched."""
    if joined.last is not None:
        TraceChunk.objects.filter(trace_id=trace_pk, late=False, pk__lte=joined.last).delete()
    if not claimed.update(
        state=ReceivedTrace.State.FINALIZED, run=run, finalized_at=timezone.now(), error="", senders=joined.senders
    ):
        raise _ClaimLost


def traces_flush(
    trace_ids: Iterable[str] | None = None, *, everything: bool = False, user: Any = None
) -> list[ReceivedTrace]:
    """Finalise now, in this process: the named traces (whatever their state: a finished one is answered as it is),
    or every due trace, or with `everything` every trace still receiving.

    `user` (`otlp_flush --user`): the flush is that user's act, so a named trace they may not finalise is refused
    (TraceRefused, audited) and `everything` takes only theirs. None: the console's host (the command run without
    --user by whoever holds its database and secret key), or the due finalisation, which is nobody's act."""
    if trace_ids is not None:
        traces = list(ReceivedTrace.objects.filter(trace_id__in=list(trace_ids)).order_by("pk"))
        if user is not None:
            for trace in traces:
                if trace.state == ReceivedTrace.State.RECEIVING and not trace_may_finalize(trace, user):
                    raise _finalize_refused(trace, user)
        pks = [t.pk for t in traces]
        force = True
    elif everything:
        pks = list(
            ReceivedTrace.objects.filter(state=ReceivedTrace.State.RECEIVING)
            .filter(_finalizable_by_q(user) if user is not None else Q())
            .order_by("last_received_at")
            .values_list("pk", flat=True)
        )
        force = True
    else:
        pks, force = traces_due(limit=10_000), False
    return [trace_finalize(trace_pk=pk, force=force, user=user) for pk in pks]


def trace_senders(trace: ReceivedTrace) -> list[dict[str, Any]]:
    """Who sent the trace's spans: [{"token_id", "user_id", "spans"}], those its run was made from (kept on the trace
    when its chunks went) and those still held (not yet a run, refused, or late), in first-sent order. One query."""
    senders = {(s["token_id"], s["user_id"]): int(s["spans"]) for s in trace.senders or ()}
    rows = (
        TraceChunk.objects.filter(trace=trace)
        .order_by("id")
        .values_list("sent_by_token_id", "sent_by_id", "span_count")
    )
    for token_id, user_id, spans in rows:
        senders[(token_id, user_id)] = senders.get((token_id, user_id), 0) + spans
    return [{"token_id": t, "user_id": u, "spans": n} for (t, u), n in senders.items()]


def _names(token_ids: set[int], user_ids: set[int]) -> tuple[dict[int, str], dict[int, str]]:
    from django.contrib.auth import get_user_model

    from accounts.models import HarnessToken

    tokens = dict(HarnessToken.objects.filter(pk__in=token_ids).values_list("pk", "prefix")) if token_ids else {}
    model = get_user_model()
    users = dict(model.objects.filter(pk__in=user_ids).values_list("pk", model.USERNAME_FIELD)) if user_ids else {}
    return tokens, users


def _who(token_id: int | None, user_id: int | None, tokens: dict[int, str], users: dict[int, str]) -> dict[str, Any]:
    # A removed user or token reads as None, like a session's missing token: the id is not a name.
    return {
        "user": users.get(user_id) if user_id is not None else None,
        "token": tokens.get(token_id) if token_id is not None else None,
    }


def trace_json(trace: ReceivedTrace) -> dict[str, Any]:
    """The `otlp_flush --json` shape of one trace. Keys are added, never renamed (DESIGN §8): `opened_by` and
    `sent_by` came with issue 33's owners."""
    senders = trace_senders(trace)
    owned = trace.opened_by_token_id is not None or trace.opened_by_id is not None
    token_ids: set[int] = {s["token_id"] for s in senders if s["token_id"]}
    user_ids: set[int] = {s["user_id"] for s in senders if s["user_id"]}
    if trace.opened_by_token_id is not None:
        token_ids.add(trace.opened_by_token_id)
    if trace.opened_by_id is not None:
        user_ids.add(trace.opened_by_id)
    tokens, users = _names(token_ids, user_ids)
    return {
        "trace_id": trace.trace_id,
        "state": trace.state,
        "spans": trace.span_count,
        "late_spans": trace.late_span_count,
        "root_ended": trace.root_ended,
        "root": trace.root_name,
        "service": trace.service_name,
        "first_received_at": trace.first_received_at.isoformat(),
        "last_received_at": trace.last_received_at.isoformat(),
        "run": trace.run.run_id if trace.run_id and trace.run else None,
        "error": trace.error or None,
        # Who opened the trace (its owner: the only sender whose spans it takes), null for a trace received before
        # owners were recorded; and who sent the spans, each with how many (issue 33).
        "opened_by": _who(trace.opened_by_token_id, trace.opened_by_id, tokens, users) if owned else None,
        "sent_by": [{**_who(s["token_id"], s["user_id"], tokens, users), "spans": s["spans"]} for s in senders],
    }
