"""What the receiver stores of a request is masked on arrival (issue 32): a token in a span name, an attribute, the
service's name or a status message is in no buffered chunk (`otlp_receiver_tracechunk`), not in the trace's
`root_name` or `service_name`, not on `/traces/` nor on the trace's page: while the trace is receiving, once it is
refused, and in a late addendum. Bodies are the real exporter's encoding of SDK spans, posted as protobuf and as OTLP
JSON (the same spans in the JSON mapping).
"""

from __future__ import annotations

import base64
import json
import secrets
import string
import zlib
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from google.protobuf import json_format
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otlp_receiver import services
from otlp_receiver.models import ReceivedTrace, TraceChunk
from runs.models import MaskedSecret
from tests.stored import places_holding

from .test_bad_input import post

pytestmark = pytest.mark.django_db


def github_token() -> str:
    return "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


def spans_with(token: str, *, run_id: str | None = None) -> bytes:
    """An agent turn whose root span's name, a tool span's attribute and status, and the service's name hold `token`."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent {token}"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests", "1")
    root = tracer.start_span(f"invoke_agent deploy {token}", attributes={"n17q.run.id": run_id} if run_id else {})
    context = otel_trace.set_span_in_context(root)
    with tracer.start_as_current_span(
        "execute_tool deploy",
        context=context,
        attributes={"gen_ai.tool.call.arguments": json.dumps({"token": token}), "deploy.auth": f"token {token}"},
    ) as span:
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, f"refused {token}"))
    root.end()
    data = encode_spans(memory.get_finished_spans()).SerializeToString()
    provider.shutdown()
    return data


def as_otlp_json(data: bytes) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    value = json_format.MessageToDict(ExportTraceServiceRequest.FromString(data))
    for rs in value["resourceSpans"]:  # OTLP JSON writes ids as hex
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(value).encode()


def assert_shown_nowhere(token: str, client, trace: ReceivedTrace) -> None:
    for url in (reverse("otlp:trace-list"), reverse("otlp:trace-detail", args=[trace.trace_id])):
        page = client.get(url).content.decode()
        assert token not in page and token[4:] not in page, url


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_token_in_a_posted_trace_is_stored_masked_and_shown_nowhere(
    client, operator_key, role_user, _blob_store, encoding
):
    token = github_token()
    data = spans_with(token)
    body, content_type = (
        (data, "application/x-protobuf") if encoding == "protobuf" else (as_otlp_json(data), "application/json")
    )
    assert post(client, body, operator_key, content_type=content_type).status_code == 200
    trace = ReceivedTrace.objects.get()
    assert trace.state == "receiving" and trace.span_count == 2
    assert "[masked:github-pat]" in trace.root_name and "[masked:github-pat]" in trace.service_name
    assert places_holding(token, _blob_store) == []
    client.force_login(role_user("viewer"))
    assert_shown_nowhere(token, client, trace)
    # The masked chunk still parses: the page lists both spans.
    page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "invoke_agent deploy" in page and "execute_tool deploy" in page


def test_a_refused_trace_and_a_late_addendum_hold_no_token(client, role_user, _blob_store):
    token = github_token()
    at = timezone.now() - timedelta(minutes=5)
    for _ in range(2):  # the second names the run the first becomes: its import is refused
        services.spans_receive(
            services.wire.split_by_trace(
                services.wire.parse_request(spans_with(token, run_id="deploy-1"), "protobuf")
            ).batches,
            now=at,
        )
    first, second = ReceivedTrace.objects.order_by("id")
    assert services.trace_finalize(trace_pk=first.pk).state == "finalized"
    refused = services.trace_finalize(trace_pk=second.pk)
    assert refused.state == "refused" and TraceChunk.objects.filter(trace=refused).exists()
    late = spans_with(token)  # a new trace id: received, then made late by hand as a finalized trace's would be
    ReceivedTrace.objects.filter(pk=refused.pk).update(state="finalized")
    batches = services.wire.split_by_trace(services.wire.parse_request(late, "protobuf")).batches
    services.spans_receive({refused.trace_id: next(iter(batches.values()))}, now=timezone.now())
    assert TraceChunk.objects.filter(trace=refused, late=True).exists()
    assert places_holding(token, _blob_store) == []
    client.force_login(role_user("viewer"))
    assert_shown_nowhere(token, client, refused)


def test_the_run_made_from_a_masked_trace_records_what_was_masked_on_arrival(client, role_user, _blob_store):
    # Masked on arrival, the spans the import scans hold no secret: without the receiver's findings the run said "the
    # secret scan found nothing on import", which was false.
    token = github_token()
    batches = services.wire.split_by_trace(services.wire.parse_request(spans_with(token), "protobuf")).batches
    services.spans_receive(batches, now=timezone.now() - timedelta(minutes=5))
    trace = services.trace_finalize(trace_pk=ReceivedTrace.objects.get().pk)
    assert trace.state == "finalized"
    run = trace.run
    received = list(MaskedSecret.objects.filter(run=run, place="received").values_list("rule", "path"))
    assert run.masked_secret_count == MaskedSecret.objects.filter(run=run).count() >= len(received) >= 3, received
    assert {rule for rule, _ in received} >= {"github-pat"}
    assert not run.bundle_digest.startswith("hmac:")  # the bundle's own bytes held no secret
    client.force_login(role_user("viewer"))
    page = client.get(reverse("runs:run-detail", args=[run.run_id])).content.decode()
    assert "masked on import" in page and "the secret scan found nothing" not in page and token not in page


def test_a_request_without_secrets_is_stored_as_it_came():
    # No value under a secret-named key either (`{"token": ...}` is masked whatever it holds: issue 32).
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("n17q-tests", "1").start_as_current_span(
        "execute_tool search", attributes={"gen_ai.tool.call.arguments": json.dumps({"query": "nothing secret here"})}
    ):
        pass
    data = encode_spans(memory.get_finished_spans()).SerializeToString()
    provider.shutdown()
    batches = services.wire.split_by_trace(services.wire.parse_request(data, "protobuf")).batches
    batch = next(iter(batches.values()))
    masked = services.batch_mask(batch)
    assert zlib.decompress(masked.chunk) == batch.payload
    assert (masked.root_name, masked.service_name) == (batch.root_name[:200], batch.service_name[:200])


MIGRATED_BEFORE = [("otlp_receiver", "0004_remove_finalized_traces_chunks")]


@pytest.mark.django_db(transaction=True)
def test_chunks_and_names_buffered_before_are_masked_by_the_migration(_blob_store):
    import zlib

    from tests.migrations_at import apps_at, migrate_to

    token = github_token()
    request = spans_with(token)
    migrate_to(MIGRATED_BEFORE)
    try:
        apps = apps_at(MIGRATED_BEFORE)
        trace_model = apps.get_model("otlp_receiver", "ReceivedTrace")
        chunk_model = apps.get_model("otlp_receiver", "TraceChunk")
        now = timezone.now()
        trace = trace_model.objects.create(
            trace_id="ab" * 16,
            first_received_at=now,
            last_received_at=now,
            root_name=f"invoke_agent deploy {token}",
            service_name=f"agent {token}",
        )
        for late in (False, True):
            chunk_model.objects.create(
                trace=trace, received_at=now, span_count=2, late=late, data=zlib.compress(request, 1)
            )
        chunk_model.objects.create(trace=trace, received_at=now, span_count=1, data=b"x")  # not the receiver's
        assert places_holding(token, _blob_store) != []
    finally:
        migrate_to()
    assert places_holding(token, _blob_store) == []
    stored = ReceivedTrace.objects.get()
    assert stored.root_name == "invoke_agent deploy [masked:github-pat]"
    chunks = list(TraceChunk.objects.order_by("id").values_list("data", flat=True))
    assert bytes(chunks[-1]) == b"x" and len(zlib.decompress(bytes(chunks[0]))) == len(request)  # still the request
