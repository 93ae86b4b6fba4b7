"""The sweep sends each due trace once, in batches, and wakes when the next trace falls quiet (issue 31).

The broker is replaced by a recorder of what was sent (`Broker`), so a test counts finalisation tasks and the
traces in them; time is passed to the services (`now=`), never waited for.
"""

from __future__ import annotations

import zlib
from collections import Counter
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otlp_receiver import services, wire
from otlp_receiver.models import ReceivedTrace, TraceChunk
from otlp_receiver.tasks import finalize_trace, finalize_traces
from runs.models import Run

from .conftest import agent_turn

pytestmark = pytest.mark.django_db


class Broker:
    """Stands in for current_app: records each send_task, or refuses them all while `down`."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[int]]] = []
        self.down = False

    def send_task(self, name: str, args: tuple, **options: object) -> None:
        if self.down:
            raise ConnectionError("the broker is away")
        self.sent.append((name, list(args[0])))

    def traces(self) -> Counter[int]:
        return Counter(pk for _, pks in self.sent for pk in pks)


@pytest.fixture
def broker(monkeypatch) -> Broker:
    fake = Broker()
    monkeypatch.setattr(services, "current_app", fake)
    return fake


def receive(recorder, *, at: datetime, end_root: bool = True, tool_calls: int = 1) -> ReceivedTrace:
    """One agent turn's spans, stored as a request received `at` would store them."""
    root = agent_turn(recorder.tracer, end_root=end_root, tool_calls=tool_calls)
    data = encode_spans(recorder.take()).SerializeToString()
    services.spans_receive(wire.split_by_trace(wire.parse_request(data, "protobuf")).batches, now=at)
    return ReceivedTrace.objects.get(trace_id=format(root.context.trace_id, "032x"))


def more_spans(recorder, trace: ReceivedTrace, *, at: datetime, name: str = "execute_tool notify") -> None:
    """A span of `trace` arriving `at` (a tool the agent ran late)."""
    from opentelemetry import trace as otel_trace

    parent = otel_trace.NonRecordingSpan(
        otel_trace.SpanContext(int(trace.trace_id, 16), 0x1234, is_remote=True, trace_flags=otel_trace.TraceFlags(1))
    )
    with recorder.tracer.start_as_current_span(name, context=otel_trace.set_span_in_context(parent)):
        pass
    data = encode_spans(recorder.take()).SerializeToString()
    services.spans_receive(wire.split_by_trace(wire.parse_request(data, "protobuf")).batches, now=at)


QUIET = timedelta(seconds=settings.N17Q_OTLP_QUIET_SECONDS)


def test_two_sweeps_in_a_row_send_a_due_trace_once(recorder, broker):
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    assert services.traces_enqueue_due(now=now) == 1
    assert services.traces_enqueue_due(now=now + timedelta(seconds=1)) == 0
    assert services.traces_enqueue_due(now=now + timedelta(seconds=60)) == 0  # still pending: not sent again
    assert broker.sent == [(services.FINALIZE_BATCH_TASK, [trace.pk])]
    trace.refresh_from_db()
    assert trace.enqueued_at == now and trace.state == "receiving"


def test_of_two_sweeps_that_both_selected_a_trace_only_the_first_marks_it(recorder, broker):
    """The race between two processes: both read the trace as due, then each marks what it read. The conditional
    UPDATE re-checks due-ness on the row, so the second marks nothing and sends nothing."""
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    first, second = services.traces_unsent(now=now), services.traces_unsent(now=now + timedelta(milliseconds=5))
    assert first == second == [trace.pk]
    assert services._mark_sent(first, now) == [trace.pk]
    assert services._mark_sent(second, now + timedelta(milliseconds=5)) == []


def test_a_trace_not_yet_quiet_or_without_its_root_ended_is_not_sent(recorder, broker):
    now = timezone.now()
    receive(recorder, at=now - timedelta(seconds=5))
    receive(recorder, at=now - QUIET - timedelta(hours=1), end_root=False)
    assert services.traces_enqueue_due(now=now) == 0 and broker.sent == []
    assert ReceivedTrace.objects.filter(enqueued_at__isnull=False).count() == 0


def test_a_trace_whose_spans_arrive_after_it_was_sent_is_sent_again_once_quiet_again(recorder, broker):
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    assert services.traces_enqueue_due(now=now) == 1
    more_spans(recorder, trace, at=now + timedelta(seconds=1))
    # The task sent would fail its claim now (not quiet); the trace is not sent again before it is quiet.
    assert services.trace_finalize(trace_pk=trace.pk).state == "receiving"
    assert services.traces_enqueue_due(now=now + timedelta(seconds=2)) == 0
    again = now + timedelta(seconds=1) + QUIET + timedelta(seconds=1)
    assert services.traces_enqueue_due(now=again) == 1
    assert services.traces_enqueue_due(now=again + timedelta(seconds=1)) == 0
    assert broker.traces() == {trace.pk: 2}


def test_a_lost_task_is_sent_again_after_the_lease(recorder, broker):
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    lease = timedelta(seconds=settings.N17Q_OTLP_FINALIZE_LEASE_S)
    assert services.traces_enqueue_due(now=now) == 1
    assert services.traces_enqueue_due(now=now + lease - timedelta(seconds=1)) == 0
    assert services.traces_enqueue_due(now=now + lease + timedelta(seconds=1)) == 1
    assert services.traces_enqueue_due(now=now + lease + timedelta(seconds=2)) == 0
    assert broker.traces() == {trace.pk: 2}


def test_a_lapsed_claim_is_sent_again_once(recorder, broker):
    """A worker claimed the trace and died: once the claim's lease lapses, one task takes it over."""
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    assert services.traces_enqueue_due(now=now) == 1
    lease = timedelta(seconds=settings.N17Q_OTLP_FINALIZE_LEASE_S)
    ReceivedTrace.objects.filter(pk=trace.pk).update(state="finalizing", claimed_at=now + timedelta(seconds=1))
    assert services.traces_enqueue_due(now=now + timedelta(seconds=2)) == 0  # its claim holds
    later = now + lease + timedelta(seconds=2)
    assert services.traces_enqueue_due(now=later) == 1
    assert services.traces_enqueue_due(now=later + timedelta(seconds=1)) == 0
    assert broker.traces() == {trace.pk: 2}


def test_a_broker_failure_clears_the_mark_and_the_next_sweep_sends_it(recorder, broker):
    now = timezone.now()
    trace = receive(recorder, at=now - QUIET - timedelta(seconds=1))
    broker.down = True
    assert services.traces_enqueue_due(now=now) == 0
    trace.refresh_from_db()
    assert trace.enqueued_at is None
    broker.down = False
    assert services.traces_enqueue_due(now=now + timedelta(seconds=1)) == 1
    assert broker.traces() == {trace.pk: 1}


def test_due_traces_are_sent_in_tasks_of_a_batch_each_trace_in_one(recorder, broker, monkeypatch):
    monkeypatch.setattr(services, "FINALIZE_BATCH", 2)
    now = timezone.now()
    traces = [receive(recorder, at=now - QUIET - timedelta(seconds=10 - i)) for i in range(5)]
    assert services.traces_enqueue_due(now=now) == 5
    assert [len(pks) for _, pks in broker.sent] == [2, 2, 1]
    assert broker.traces() == {t.pk: 1 for t in traces}
    assert {name for name, _ in broker.sent} == {services.FINALIZE_BATCH_TASK}


@pytest.mark.django_db(transaction=True)  # the task closes its connections when done
def test_a_batch_task_finalizes_each_trace_once_and_a_bad_trace_refuses_only_itself(recorder):
    at = timezone.now() - QUIET - timedelta(seconds=1)
    good, bad, other = (receive(recorder, at=at) for _ in range(3))
    TraceChunk.objects.filter(trace=bad).update(data=zlib.compress(b"\xff\xfe not an OTLP request"))
    states = finalize_traces([good.pk, bad.pk, other.pk])
    assert states == {"finalized": [good.pk, other.pk], "refused": [bad.pk]}
    # Delivered again (a redelivered message, or the same trace in two batches): nothing changes.
    assert finalize_traces([good.pk, bad.pk, other.pk]) == states
    assert finalize_trace(good.pk) == "finalized"  # the single-trace task of older messages still runs
    assert Run.objects.count() == 2
    bad.refresh_from_db()
    assert bad.run is None and "protobuf" in bad.error


@pytest.mark.django_db(transaction=True)  # the task closes its connections when done
def test_a_batch_task_goes_on_past_a_trace_that_fails(recorder, monkeypatch):
    at = timezone.now() - QUIET - timedelta(seconds=1)
    first, second = receive(recorder, at=at), receive(recorder, at=at)
    real = services.trace_finalize

    def failing(*, trace_pk: int) -> ReceivedTrace:
        if trace_pk == first.pk:
            raise OSError("the blob store is full")
        return real(trace_pk=trace_pk)

    monkeypatch.setattr("otlp_receiver.tasks.trace_finalize", failing)
    assert finalize_traces([first.pk, second.pk]) == {"failed": [first.pk], "finalized": [second.pk]}


@pytest.mark.parametrize(
    ("received_ago", "end_root", "sent", "expected"),
    [
        (None, True, False, settings.N17Q_OTLP_QUIET_SECONDS / 2),  # nothing receiving: half the quiet period
        (0, True, False, settings.N17Q_OTLP_QUIET_SECONDS / 2),  # due in 30 s: capped at half of it
        (settings.N17Q_OTLP_QUIET_SECONDS - 4, True, False, 4.0),  # due in 4 s: wake then
        (settings.N17Q_OTLP_QUIET_SECONDS + 60, True, False, services.SWEEP_MIN_DELAY_S),  # overdue: soon, no spin
        (settings.N17Q_OTLP_QUIET_SECONDS + 60, True, True, settings.N17Q_OTLP_QUIET_SECONDS / 2),  # already sent
        (settings.N17Q_OTLP_QUIET_SECONDS - 4, False, False, settings.N17Q_OTLP_QUIET_SECONDS / 2),  # root open
    ],
    ids=["none", "capped", "next-due", "overdue", "already-sent", "root-open"],
)
def test_the_sweep_wakes_when_the_next_trace_falls_quiet(recorder, broker, received_ago, end_root, sent, expected):
    now = timezone.now()
    if received_ago is not None:
        receive(recorder, at=now - timedelta(seconds=received_ago), end_root=end_root)
        receive(recorder, at=now, end_root=end_root)  # a later trace does not hide the earlier one
    if sent:
        assert services.traces_enqueue_due(now=now) == 1
    assert services.sweep_delay(now=now) == pytest.approx(expected)
