"""Spans received over OTLP/HTTP, buffered per trace until the trace becomes a run.

A trace belongs to the sender of its first accepted spans (issue 33): the harness token, and its user, that opened
it. Only that sender adds spans to it (otlp_receiver.services.spans_receive), and every chunk names who sent it.

One `ReceivedTrace` row per trace id, one `TraceChunk` row per (request, trace): the spans a request brought for
that trace, as one zlib-compressed ExportTraceServiceRequest (otlp_receiver.wire). A request costs a fixed number
of queries per trace it touches, never one per span, and a span is stored once, compressed, not as rows of columns.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.gated_fields import GatedBinaryField, GatedCharField, GatedJSONField


class ReceivedTrace(models.Model):
    class State(models.TextChoices):
        RECEIVING = "receiving"  # spans are still coming in
        FINALIZING = "finalizing"  # claimed by a finalisation (otlp_receiver.services.trace_finalize)
        FINALIZED = "finalized"  # imported as `run`
        REFUSED = "refused"  # the conversion or the import refused it: `error` says why; its spans are kept

    trace_id = models.CharField(max_length=32, unique=True)  # 32 lowercase hex digits
    state = models.CharField(max_length=12, choices=State.choices, default=State.RECEIVING)
    first_received_at = models.DateTimeField()
    last_received_at = models.DateTimeField()
    root_ended = models.BooleanField(default=False)
    root_name = GatedCharField(max_length=200, blank=True, default="")
    service_name = GatedCharField(max_length=200, blank=True, default="")
    span_count = models.PositiveIntegerField(default=0)
    # Spans that arrived after the trace was claimed: a linked addendum, never merged into the run's history.
    late_span_count = models.PositiveIntegerField(default=0)
    # When a sweep last sent this trace's finalisation task (issue 31): a trace is sent once per due period, not on
    # every sweep; sent again only when spans arrived after the send, or the send is older than the lease (lost).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    error = GatedCharField(max_length=1000, blank=True, default="")
    # Who opened the trace (issue 33): the token (null when a signed-in session sent them) and its user. Kept as
    # they were, without a constraint, when the token or the user is deleted: the trace stays theirs (fail closed),
    # never ownerless and open to the next sender. Both null: a trace received before owners were recorded, taken
    # by its next sender.
    opened_by_token = models.ForeignKey(
        "accounts.HarnessToken",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    # Who sent the spans its run was made from, kept when finalisation removes those chunks (their `sent_by_*`):
    # [{"token_id", "user_id", "spans"}]. Spans still held as chunks (late ones, a trace not yet a run) are read from
    # the chunks themselves (services.trace_senders).
    senders = GatedJSONField(default=list, blank=True)

    class Meta:
        ordering = ["-last_received_at", "-id"]
        indexes = [
            # The finalisation sweep: receiving traces whose root ended, by how long they have been quiet.
            models.Index(fields=["state", "root_ended", "last_received_at"], name="otlp_trace_due"),
        ]

    def __str__(self) -> str:
        return f"trace {self.trace_id} ({self.state})"


# A buffered request: zlib(ExportTraceServiceRequest bytes), masked by the storage gate as what it holds.
CHUNK_MEDIA_TYPE = "application/x-protobuf+zlib"


class TraceChunk(models.Model):
    # No index of its own: otlp_chunk_trace (trace, late, id) leads with it and serves every read (a trace's chunks,
    # or its late ones, in arrival order) and the removal of a finalized trace's chunks. A second index on the same
    # column was one more entry written with every chunk, and kept.
    trace = models.ForeignKey(ReceivedTrace, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    received_at = models.DateTimeField()
    span_count = models.PositiveIntegerField()
    late = models.BooleanField(default=False)
    data = GatedBinaryField(media_type=CHUNK_MEDIA_TYPE)  # zlib(ExportTraceServiceRequest bytes)
    # What the gate masked in this request on arrival ({path, rule, preview}; never a value): the run made from the
    # trace records them as its own masked secrets, so its page does not say the scan found nothing (issue 32).
    masked = GatedJSONField(default=list, blank=True)
    # Who sent this request's spans (issue 33): always the trace's owner since owners are recorded; kept per chunk
    # so that what a run was made from is accounted for request by request. No index: read through the trace only.
    sent_by_token = models.ForeignKey(
        "accounts.HarnessToken",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )

    class Meta:
        indexes = [models.Index(fields=["trace", "late", "id"], name="otlp_chunk_trace")]

    def __str__(self) -> str:
        return f"{self.span_count} {'late ' if self.late else ''}spans of trace {self.trace_id}"
