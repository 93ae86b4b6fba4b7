"""Reads for the pages of received traces: a fixed number of queries whatever the number of traces or spans."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Case, IntegerField, QuerySet, Value, When
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .models import ReceivedTrace, TraceChunk

# The late spans a trace page lists; the count above the list is of all of them.
LATE_SPANS_SHOWN = 100


def trace_list() -> QuerySet[ReceivedTrace]:
    """Traces still receiving (or being finalised) first, each group latest first."""
    return (
        ReceivedTrace.objects.select_related("run")
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
    return ReceivedTrace.objects.select_related("run").filter(trace_id=trace_id.strip().lower()).first()


@dataclass(frozen=True)
class LateSpan:
    name: str
    span_id: str
    parent_span_id: str
    ended_at: datetime | None
    received_at: datetime


def late_spans(trace: ReceivedTrace) -> list[LateSpan]:
    """The first LATE_SPANS_SHOWN spans of the trace's late addendum, in arrival order."""
    shown: list[LateSpan] = []
    chunks = TraceChunk.objects.filter(trace=trace, late=True).order_by("id").values_list("received_at", "data")
    for received_at, data in chunks.iterator(chunk_size=20):
        request = ExportTraceServiceRequest.FromString(zlib.decompress(bytes(data)))
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    end = span.end_time_unix_nano
                    shown.append(
                        LateSpan(
                            name=span.name,
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            ended_at=datetime.fromtimestamp(end / 1e9, tz=UTC) if end else None,
                            received_at=received_at,
                        )
                    )
                    if len(shown) >= LATE_SPANS_SHOWN:
                        return shown
    return shown
