"""`POST /v1/traces` with the real OTLP/HTTP exporter against the running test server (issue 17, point 1).

The OpenTelemetry SDK records GenAI spans (invoke_agent > chat > execute_tool) and its `OTLPSpanExporter` sends
them, protobuf, plain and gzip-compressed, with the harness token in its headers. Then: the trace is listed as
receiving until its root span has ended and it has been quiet (or is flushed), becomes one run with its mapped
events through the importer, and spans that come after that are kept as the run's late addendum.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace.export import SpanExportResult

from otlp_receiver.models import ReceivedTrace, TraceChunk
from otlp_receiver.services import traces_due
from otlp_receiver.tasks import finalize_trace
from runs.models import Event, Run

from .conftest import agent_turn, export

pytestmark = pytest.mark.django_db(transaction=True)


def flush(*args: str) -> dict:
    from io import StringIO

    out = StringIO()
    call_command("otlp_flush", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def trace_hex(span) -> str:
    return format(span.context.trace_id, "032x")


@pytest.mark.parametrize("gzip", [False, True], ids=["plain", "gzip"])
def test_it_turns_an_exported_agent_trace_into_a_run(live_server, recorder, operator_key, gzip):
    root = agent_turn(recorder.tracer, tool_calls=2)
    spans = recorder.take()
    assert export(live_server.url, operator_key, spans, gzip=gzip) is SpanExportResult.SUCCESS

    trace = ReceivedTrace.objects.get()
    assert trace.trace_id == trace_hex(root)
    assert (trace.state, trace.span_count, trace.root_ended) == ("receiving", 5, True)
    assert (trace.service_name, trace.root_name) == ("support-agent", "invoke_agent support-agent")
    assert Run.objects.count() == 0  # buffered until quiet or flushed

    answer = flush(trace.trace_id)
    (done,) = answer["traces"]
    assert done["state"] == "finalized", done
    run = Run.objects.get(run_id=done["run"])
    assert answer["runs"] == [run.run_id]
    kinds = list(Event.objects.filter(run=run).order_by("seq").values_list("kind", flat=True))
    assert kinds.count("tool.call") == 2 and kinds.count("tool.result") == 2, kinds
    assert "model.proposal" in kinds and "budget.charged" in kinds, kinds
    calls = [e.body for e in Event.objects.filter(run=run, kind="tool.call").order_by("seq")]
    assert [c["tool"] for c in calls] == ["lookup_order", "lookup_order"]
    assert [c["request"].get("order_id") for c in calls] == ["A-0", "A-1"], calls
    # The spans as received are kept with the run: the original, as protobuf.
    assert run.blobs.filter(media_type="application/x-protobuf").exists()


def test_a_trace_is_listed_as_receiving_until_it_is_quiet_and_then_becomes_a_run(
    live_server, recorder, operator_key, client, role_user
):
    root = agent_turn(recorder.tracer, end_root=False)
    assert export(live_server.url, operator_key, recorder.take()) is SpanExportResult.SUCCESS
    trace = ReceivedTrace.objects.get()
    assert (trace.state, trace.span_count, trace.root_ended) == ("receiving", 2, False)

    client.force_login(role_user("viewer"))
    listed = client.get(reverse("otlp:trace-list")).content.decode()
    assert trace.trace_id in listed and "Receiving" in listed and "not ended yet" in listed
    page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "waiting for its root span to end" in page and "Import now" not in page  # a viewer cannot flush

    # Quiet for a long time, but the root span has not ended: not due.
    ReceivedTrace.objects.update(last_received_at=trace.last_received_at - timedelta(hours=1))
    assert traces_due() == [] and flush()["traces"] == []

    root.end()
    assert export(live_server.url, operator_key, recorder.take()) is SpanExportResult.SUCCESS
    trace.refresh_from_db()
    assert (trace.state, trace.span_count, trace.root_ended) == ("receiving", 3, True)
    assert traces_due() == []  # it has just heard from the trace: not quiet yet

    ReceivedTrace.objects.update(last_received_at=trace.last_received_at - timedelta(seconds=31))
    assert traces_due() == [trace.pk]
    # The worker's task, as a worker would run it; twice, as a redelivered message would: one run.
    assert finalize_trace(trace.pk) == "finalized"
    assert finalize_trace(trace.pk) == "finalized"
    trace.refresh_from_db()
    assert Run.objects.count() == 1 and trace.run == Run.objects.get()
    listed = client.get(reverse("otlp:trace-list")).content.decode()
    assert "Finalized" in listed and trace.run.run_id in listed


def test_late_spans_are_kept_as_an_addendum_never_merged(live_server, recorder, operator_key, client, role_user):
    root = agent_turn(recorder.tracer)
    assert export(live_server.url, operator_key, recorder.take(), gzip=True) is SpanExportResult.SUCCESS
    trace_id = trace_hex(root)
    run = Run.objects.get(run_id=flush(trace_id)["runs"][0])
    events_before = run.event_count

    # A tool span the agent's process ends after the trace was imported.
    late_context = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(root.get_span_context()))
    with recorder.tracer.start_as_current_span("execute_tool send_email", context=late_context):
        pass
    assert export(live_server.url, operator_key, recorder.take()) is SpanExportResult.SUCCESS

    trace = ReceivedTrace.objects.get()
    assert (trace.state, trace.span_count, trace.late_span_count) == ("finalized", 3, 1)
    assert TraceChunk.objects.filter(trace=trace, late=True).count() == 1
    run.refresh_from_db()
    assert run.event_count == events_before == Event.objects.filter(run=run).count()
    assert flush(trace_id)["traces"][0]["late_spans"] == 1  # flushing again changes nothing

    client.force_login(role_user("viewer"))
    page = client.get(reverse("otlp:trace-detail", args=[trace_id])).content.decode()
    assert "1 late span received after the run was imported" in page and "execute_tool send_email" in page


def test_the_exporter_without_a_token_or_with_the_wrong_one_is_refused(live_server, recorder, role_user):
    from accounts.models import HarnessToken
    from tests.runs.test_api import token_for

    agent_turn(recorder.tracer)
    spans = recorder.take()
    assert export(live_server.url, None, spans) is SpanExportResult.FAILURE
    assert export(live_server.url, "n17q_not-a-key", spans) is SpanExportResult.FAILURE
    capture_only = token_for(role_user("operator", "capturer"), HarnessToken.Scope.CAPTURE)
    assert export(live_server.url, capture_only, spans) is SpanExportResult.FAILURE
    viewer = token_for(role_user("viewer", "reader"), HarnessToken.Scope.IMPORT_RUNS)
    assert export(live_server.url, viewer, spans) is SpanExportResult.FAILURE
    assert ReceivedTrace.objects.count() == 0 and TraceChunk.objects.count() == 0
