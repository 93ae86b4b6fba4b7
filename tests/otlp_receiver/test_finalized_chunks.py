"""A trace's buffered spans do not outlive the run made from them (issue 31, point 2; issue 32).

Once a trace is a run, the chunks it was made from are removed in the transaction that records the run: its spans
are the run's events and its kept original (the `source-otlp` blob holds the same protobuf), not a second, unmasked
copy. A refused trace keeps its chunks (the investigator reads its spans on its page), spans arriving after the
claim stay readable as the late addendum, and a finalisation that cannot record its run keeps everything as it was.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SpanExportResult

from otlp_receiver import services, wire
from otlp_receiver.models import ReceivedTrace, TraceChunk
from runs.models import Event, Run, RunBlob
from runs.source_span import source_span_of
from tests.migrations_at import apps_at, migrate_to

from .conftest import agent_turn, export
from .test_sweep import more_spans, receive

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(minutes=5)


def _chunks(trace: ReceivedTrace, *, late: bool) -> int:
    return TraceChunk.objects.filter(trace=trace, late=late).count()


def test_it_removes_a_finalized_traces_chunks_and_its_page_links_to_the_run(recorder, client, role_user):
    at = timezone.now() - LONG_AGO
    trace = receive(recorder, at=at, tool_calls=2)
    more_spans(recorder, trace, at=at)  # a second request: a second chunk
    assert _chunks(trace, late=False) == 2

    done = services.trace_finalize(trace_pk=trace.pk)
    assert done.state == "finalized" and done.run is not None
    assert TraceChunk.objects.filter(trace=trace).count() == 0
    assert (done.span_count, done.late_span_count) == (6, 0)  # the counts stay on the trace

    client.force_login(role_user("viewer"))
    run_url = reverse("runs:run-detail", args=[done.run.run_id])
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert not [q["sql"] for q in queries if "tracechunk" in q["sql"].lower()]  # nothing reads chunks
    assert "Finalized" in page and "Spans received" not in page
    assert "6 spans became the events of run" in page and f'href="{run_url}"' in page
    listed = client.get(reverse("otlp:trace-list")).content.decode()
    assert f'href="{run_url}"' in listed and trace.trace_id in listed


def _named_run(recorder, run_id: str, *, at) -> ReceivedTrace:
    """An agent turn whose root span names the run it should become (`n17q.run.id`)."""
    root = recorder.tracer.start_span("invoke_agent support-agent", attributes={"n17q.run.id": run_id})
    context = otel_trace.set_span_in_context(root)
    with recorder.tracer.start_as_current_span("execute_tool lookup_order", context=context):
        pass
    root.end()
    data = encode_spans(recorder.take()).SerializeToString()
    services.spans_receive(wire.split_by_trace(wire.parse_request(data, "protobuf")).batches, now=at)
    return ReceivedTrace.objects.get(trace_id=format(root.get_span_context().trace_id, "032x"))


def test_a_refused_trace_keeps_its_chunks_and_its_page_still_lists_its_spans(recorder, client, role_user):
    at = timezone.now() - LONG_AGO
    first = _named_run(recorder, "support-run-7", at=at)
    second = _named_run(recorder, "support-run-7", at=at)  # names a run the first one becomes: the import refuses
    assert services.trace_finalize(trace_pk=first.pk).state == "finalized"

    refused = services.trace_finalize(trace_pk=second.pk)
    assert refused.state == "refused" and "already imported" in refused.error and refused.run is None
    assert _chunks(second, late=False) == 1 and _chunks(first, late=False) == 0
    assert Run.objects.count() == 1

    client.force_login(role_user("viewer"))
    page = client.get(reverse("otlp:trace-detail", args=[second.trace_id])).content.decode()
    assert "Not imported:" in page and "Spans received" in page
    assert "execute_tool lookup_order" in page and "invoke_agent support-agent" in page
    assert "became the events of run" not in page


def test_late_spans_stay_readable_as_the_addendum_after_the_chunks_are_removed(recorder, client, role_user):
    trace = receive(recorder, at=timezone.now() - LONG_AGO)
    assert services.trace_finalize(trace_pk=trace.pk).state == "finalized"
    more_spans(recorder, trace, at=timezone.now(), name="execute_tool send_email")
    assert (_chunks(trace, late=False), _chunks(trace, late=True)) == (0, 1)

    # Finalising again (a redelivered task, a flush) changes nothing: the addendum is kept.
    assert services.trace_finalize(trace_pk=trace.pk, force=True).state == "finalized"
    assert (_chunks(trace, late=False), _chunks(trace, late=True)) == (0, 1)
    client.force_login(role_user("viewer"))
    page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "1 late span received after the run was imported" in page and "execute_tool send_email" in page


def test_a_finalisation_whose_claim_was_taken_over_stores_no_run_and_keeps_the_chunks(
    recorder, monkeypatch, _blob_store
):
    """The lease lapsed while the trace was imported and another worker claimed it: this finalisation's run, its
    blob files and the removal of the chunks are undone together; the other one makes the run."""
    trace = receive(recorder, at=timezone.now() - LONG_AGO)
    real = services.import_converted
    takeover = timezone.now() + timedelta(seconds=1)

    def taken_over(converted, **options):
        ReceivedTrace.objects.filter(pk=trace.pk).update(claimed_at=takeover)  # another worker's claim
        return real(converted, **options)

    monkeypatch.setattr(services, "import_converted", taken_over)
    left = services.trace_finalize(trace_pk=trace.pk)
    assert (left.state, left.run, left.claimed_at) == ("finalizing", None, takeover)
    assert Run.objects.count() == 0 and RunBlob.objects.count() == 0
    assert _chunks(trace, late=False) == 1
    assert not [p for p in _blob_store.rglob("*") if p.is_file()]  # the blob files written were removed


def _flat_attributes(span) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in span.attributes.items()}


@pytest.mark.django_db(transaction=True)  # the live server reads what the test wrote
def test_every_span_posted_is_still_shown_by_its_run_once_the_chunks_are_gone(
    live_server, recorder, operator_key, client, role_user
):
    root = agent_turn(recorder.tracer, tool_calls=3)
    posted = recorder.take()
    # Two requests, as a batching exporter would send them: two chunks.
    assert export(live_server.url, operator_key, posted[:4]) is SpanExportResult.SUCCESS
    assert export(live_server.url, operator_key, posted[4:]) is SpanExportResult.SUCCESS
    trace = ReceivedTrace.objects.get(trace_id=format(root.get_span_context().trace_id, "032x"))
    assert _chunks(trace, late=False) == 2

    (done,) = services.traces_flush([trace.trace_id])
    assert done.state == "finalized" and TraceChunk.objects.count() == 0
    run = done.run
    assert run is not None
    events = list(Event.objects.filter(run=run).order_by("seq"))
    by_span: dict[str, list[Event]] = {}
    for event in events:
        by_span.setdefault(event.body["otlp"]["span"], []).append(event)
    assert set(by_span) == {format(s.context.span_id, "016x") for s in posted}

    # Each event's span, read back from what the run holds, is the span that was posted: nothing of it was only
    # in the chunks.
    for span in posted:
        span_id = format(span.context.span_id, "016x")
        for event in by_span[span_id]:
            shown = source_span_of(run, event.body)
            assert shown is not None and shown.problem == "" and shown.value is not None, event.event_id
            read = shown.value["span"]
            assert (read["span_id"], read["name"]) == (span_id, span.name)
            assert read["parent_span_id"] == (format(span.parent.span_id, "016x") if span.parent else None)
            assert (read["start_ns"], read["end_ns"]) == (span.start_time, span.end_time)
            assert read["attributes"] == _flat_attributes(span)
            assert shown.value["resource"] == dict(span.resource.attributes)

    client.force_login(role_user("viewer"))
    page = client.get(reverse("runs:run-detail", args=[run.run_id])).content.decode()
    assert page.count("lookup_order") >= 3
    result = next(e for e in events if e.kind == "tool.result")
    detail = client.get(reverse("runs:run-detail", args=[run.run_id]), {"event": result.event_id}).content.decode()
    assert "Source span" in detail and "shipped" in detail and "execute_tool lookup_order" in detail


MIGRATED_BEFORE = [("otlp_receiver", "0003_chunk_trace_index_once")]


@pytest.mark.django_db(transaction=True)
def test_the_chunks_of_traces_finalized_before_are_removed_by_the_migration_and_no_others():
    migrate_to(MIGRATED_BEFORE)
    try:
        apps = apps_at(MIGRATED_BEFORE)
        trace_model = apps.get_model("otlp_receiver", "ReceivedTrace")
        chunk_model = apps.get_model("otlp_receiver", "TraceChunk")
        # The runs app is not migrated back: its tables are today's.
        run = Run.objects.create(
            run_id="otlp-then",
            task_id="t",
            task_revision="r1",
            environment="live",
            mode="recorded",
            model_name="m",
            model_version="1",
            policy_revision="p",
            created_at=timezone.now(),
            bundle_digest="sha256:" + "0" * 64,
            manifest_run={"id": "otlp-then"},
        )
        now = timezone.now()
        states = {"finalized": run.pk, "refused": None, "receiving": None, "finalized-run-gone": None}
        for n, (name, its_run) in enumerate(states.items()):
            trace = trace_model.objects.create(
                trace_id=f"{n:032x}",
                state=name.split("-")[0],
                first_received_at=now,
                last_received_at=now,
                run_id=its_run,
            )
            for late in (False, True):
                chunk_model.objects.create(trace=trace, received_at=now, span_count=1, late=late, data=b"x")
    finally:
        migrate_to()
    left = set(TraceChunk.objects.values_list("trace__trace_id", "late"))
    gone = (f"{0:032x}", False)  # the finalized trace's chunk the run was made from
    assert len(left) == 7 and gone not in left
