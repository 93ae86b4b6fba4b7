"""Reads for the pages of received traces: a fixed number of queries whatever the number of traces or spans.

Span names and status messages are shown through the secret scanner's text masking (n17q_secrets.scanning.mask_text,
what the run import applies to a run's text), never as received: an exporter's span name can hold a token. A buffered
request was masked as it arrived, byte for byte with `*` (so it still parses): such a run of stars reads as
`[masked]`, as the scan's own mark does, not as forty asterisks.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Case, IntegerField, QuerySet, Value, When

from n17q_engine.formats import ConversionError
from n17q_engine.formats.otlp import flatten_protobuf
from n17q_secrets import scanning

from .models import ReceivedTrace, TraceChunk

# The late spans a trace page lists; the count above the list is of all of them.
LATE_SPANS_SHOWN = 100
# The spans of a trace not yet a run that its page lists, in arrival order; the rest are counted.
SPANS_SHOWN = 500


def trace_list() -> QuerySet[ReceivedTrace]:
    """Traces still receiving (or being finalised) first, each group latest first."""
    return (
        ReceivedTrace.objects.select_related("run", "opened_by", "opened_by_token")
        .defer("run__manifest_run")
        .annotate(
            open=Case(
                When(state__in=[ReceivedTrace.State.RECEIVING, ReceivedTrace.State.FINALIZING], then=Value(0)),
                default=Value(1),
                output_field=IntegerField(),
            )
        )
        .order_by("open", "-last_received_at", "-id")
    )


def trace_get(trace_id: str) -> ReceivedTrace | None:
    return (
        ReceivedTrace.objects.select_related("run", "opened_by", "opened_by_token")
        .filter(trace_id=trace_id.strip().lower())
        .first()
    )


@dataclass(frozen=True)
class LateSpan:
    name: str
    span_id: str
    parent_span_id: str
    ended_at: datetime | None
    received_at: datetime


def late_spans(trace: ReceivedTrace) -> list[LateSpan]:
    """The first LATE_SPANS_SHOWN spans of the trace's late addendum, in arrival order (a chunk that cannot be read
    ends the list)."""
    shown: list[LateSpan] = []
    masks = _Masks()
    with contextlib.suppress(ConversionError, zlib.error):
        for received_at, span in _stored_spans(trace, late=True):
            shown.append(
                LateSpan(
                    name=masks.text(span["name"]),
                    span_id=span["span_id"],
                    parent_span_id=span["parent_span_id"] or "",
                    ended_at=_at(span["end_ns"]),
                    received_at=received_at,
                )
            )
            if len(shown) >= LATE_SPANS_SHOWN:
                break
    return shown


def _stored_spans(trace: ReceivedTrace, *, late: bool) -> Iterator[tuple[datetime, dict[str, Any]]]:
    """(received_at, flat span) of the trace's stored chunks (its late addendum, or the spans before it was claimed),
    in arrival order, read with the decoding its finalisation uses (n17q_engine.formats.otlp.flatten_protobuf). One
    query; raises ConversionError or zlib.error on a chunk that cannot be read."""
    chunks = TraceChunk.objects.filter(trace=trace, late=late).order_by("id").values_list("received_at", "data")
    for received_at, data in chunks.iterator(chunk_size=20):
        for span in flatten_protobuf(zlib.decompress(bytes(data))):
            yield received_at, span


class _Masks:
    """mask_text once per distinct text: a trace's spans share a handful of names."""

    def __init__(self) -> None:
        self._done: dict[str, str] = {}

    def text(self, text: str) -> str:
        if not text:
            return text
        masked = self._done.get(text)
        if masked is None:
            masked = self._done[text] = _STARS.sub("[masked]", scanning.mask_text(text, "span", []))
        return masked


# What the storage gate leaves of a secret in a buffered request (n17q_secrets.scanning.mask_binary): its bytes, each
# `*`. Eight or more in a row are its mark; fewer stay as they are (a `**bold**` name, a `*` wildcard).
_STARS = re.compile(r"\*{8,}")


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    kind: str
    span_id: str
    parent_span_id: str
    started_at: datetime | None
    ended_at: datetime | None
    duration_ms: float | None
    status: str  # unset | ok | error
    status_message: str


@dataclass(frozen=True)
class ReceivedSpans:
    spans: list[ReceivedSpan]
    not_shown: int  # received, not listed (past SPANS_SHOWN)
    error: str = ""  # why the stored spans could not be read


def _at(ns: int) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns else None


def received_spans(trace: ReceivedTrace) -> ReceivedSpans:
    """The first SPANS_SHOWN spans of a trace that is not a run (yet), read from its chunks with the decoding its
    finalisation uses (n17q_engine.formats.otlp), in arrival order. One query."""
    shown: list[ReceivedSpan] = []
    masks = _Masks()
    try:
        for _received_at, span in _stored_spans(trace, late=False):
            start, end = span["start_ns"], span["end_ns"]
            shown.append(
                ReceivedSpan(
                    name=masks.text(span["name"]),
                    kind=span["kind"],
                    span_id=span["span_id"],
                    parent_span_id=span["parent_span_id"] or "",
                    started_at=_at(start),
                    ended_at=_at(end),
                    duration_ms=(end - start) / 1e6 if start and end >= start else None,
                    status=span["status"]["code"],
                    status_message=masks.text(span["status"]["message"]),
                )
            )
            if len(shown) >= SPANS_SHOWN:
                return ReceivedSpans(shown, max(0, trace.span_count - len(shown)))
    except (ConversionError, zlib.error) as exc:
        message = " ".join(str(exc).splitlines())[:300]
        error = f"the stored spans could not be read: {message}"
        return ReceivedSpans(shown, max(0, trace.span_count - len(shown)), error)
    return ReceivedSpans(shown, max(0, trace.span_count - len(shown)))
