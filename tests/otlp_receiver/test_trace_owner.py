"""A trace is its sender's (issue 33): the token that opened it alone adds spans to it, and every stored chunk names
who sent it.

The attacks, as demonstrated before: another operator's `runs:import` token appended a `wire_money` tool call to a
victim's trace, or got the whole trace refused with one bad span; nothing recorded who sent which spans.
"""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from accounts.models import AuditEntry, HarnessToken
from otlp_receiver import services, wire
from otlp_receiver.models import ReceivedTrace, TraceChunk
from runs.models import Event
from tests.runs.test_api import token_for

from .conftest import agent_turn, opened_trace, post

pytestmark = pytest.mark.django_db


def wire_money(recorder, root) -> list:
    """A tool call in the victim's trace, as another exporter can make one: the trace and parent ids are public."""
    context = otel_trace.set_span_in_context(root)
    with recorder.tracer.start_as_current_span(
        "execute_tool wire_money",
        context=context,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "wire_money",
            "gen_ai.tool.call.id": "call_wire",
            "gen_ai.tool.call.arguments": json.dumps({"to": "attacker", "amount": 10_000}),
        },
    ):
        pass
    return recorder.take()


def partial_success(response) -> tuple[int, str]:
    answer = ExportTraceServiceResponse.FromString(response.content)
    return answer.partial_success.rejected_spans, answer.partial_success.error_message


# ---- a trace has an owner


def test_another_token_cannot_append_spans_to_a_trace_it_did_not_open(client, recorder, victim, attacker):
    root, trace_id = opened_trace(client, recorder, victim[1])
    spans_before = ReceivedTrace.objects.get(trace_id=trace_id).span_count

    response = post(client, wire_money(recorder, root), attacker[1])
    assert response.status_code == 403
    assert b"another token" in response.content
    trace = ReceivedTrace.objects.get(trace_id=trace_id)
    assert trace.span_count == spans_before and trace.chunks.count() == 1
    refusal = AuditEntry.objects.get(action="otlp.spans_refused")
    assert refusal.actor == "attacker" and trace_id in refusal.target

    # Mixed with a trace of its own: that one is taken, the victim's spans are refused as a partial success.
    extra = wire_money(recorder, root)
    agent_turn(recorder.tracer)
    own = recorder.take()
    response = post(client, extra + own, attacker[1])
    assert response.status_code == 200
    rejected, message = partial_success(response)
    assert rejected == 1 and trace_id in message and "another token" in message
    assert ReceivedTrace.objects.get(trace_id=trace_id).span_count == spans_before
    assert ReceivedTrace.objects.count() == 2
    assert AuditEntry.objects.filter(action="otlp.spans_refused").count() == 2

    # Its own spans still go to the victim's trace, which becomes a run without the attacker's tool call.
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    trace = services.trace_finalize(trace_pk=trace.pk, force=True)
    assert trace.state == "finalized"
    tools = set(Event.objects.filter(run=trace.run, kind="tool.call").values_list("body__tool", flat=True))
    assert tools == {"lookup_order"}


def test_the_run_of_a_trace_is_its_senders_whoever_finalises_it(client, recorder, victim, role_user):
    root, trace_id = opened_trace(client, recorder, victim[1])
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    flusher = role_user("operator", "flusher")
    trace = services.trace_finalize(trace_pk=ReceivedTrace.objects.get(trace_id=trace_id).pk, force=True, user=flusher)
    assert trace.state == "finalized" and trace.run.imported_by == victim[0]


def test_the_same_users_other_token_is_another_sender(client, recorder, victim):
    root, _trace_id = opened_trace(client, recorder, victim[1])
    second = token_for(victim[0], HarnessToken.Scope.IMPORT_RUNS)
    assert post(client, wire_money(recorder, root), second).status_code == 403


def test_every_chunk_records_who_sent_it_and_the_pages_say_so(client, recorder, victim, role_user):
    root, trace_id = opened_trace(client, recorder, victim[1])
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    token = HarnessToken.objects.get(user=victim[0])
    trace = ReceivedTrace.objects.get(trace_id=trace_id)
    assert (trace.opened_by_token_id, trace.opened_by_id) == (token.pk, victim[0].pk)
    chunks = list(TraceChunk.objects.filter(trace=trace).values_list("sent_by_token_id", "sent_by_id"))
    assert chunks == [(token.pk, victim[0].pk)] * 2

    client.force_login(role_user("viewer"))
    listed = client.get(reverse("otlp:trace-list")).content.decode()
    assert "victim" in listed and token.prefix in listed
    page = client.get(reverse("otlp:trace-detail", args=[trace_id])).content.decode()
    assert "victim" in page and token.prefix in page


def test_spans_of_a_trace_opened_before_owners_were_recorded_are_taken_from_the_next_sender(client, recorder, victim):
    root = agent_turn(recorder.tracer, end_root=False)
    data = encode_spans(recorder.take()).SerializeToString()
    services.spans_receive(wire.split_by_trace(wire.parse_request(data, "protobuf")).batches)  # no sender
    trace = ReceivedTrace.objects.get()
    assert trace.opened_by_token_id is None
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    trace.refresh_from_db()
    assert trace.opened_by_id == victim[0].pk


# ---- only its opener (or an admin) finalises a trace


def flush_json(*args: str) -> dict:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("otlp_flush", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_another_operator_cannot_import_now_a_trace_it_did_not_open(client, recorder, victim, attacker):
    _root, trace_id = opened_trace(client, recorder, victim[1])
    client.force_login(attacker[0])
    page = client.get(reverse("otlp:trace-detail", args=[trace_id])).content.decode()
    assert "Import now" not in page  # not offered...

    response = client.post(reverse("otlp:trace-flush", args=[trace_id]))  # ...and refused when pressed anyway
    assert response.status_code == 403
    body = response.content.decode()
    assert "only the user who opened trace" in body and "or an admin, may import it now" in body
    trace = ReceivedTrace.objects.get(trace_id=trace_id)
    assert trace.state == "receiving" and trace.run is None
    refusal = AuditEntry.objects.get(action="otlp.finalize_refused")
    assert refusal.actor == "attacker" and trace_id in refusal.target
    assert refusal.detail["owner_user_id"] == victim[0].pk

    # The positive control: the opener presses it, and the trace is imported.
    client.force_login(victim[0])
    assert "Import now" in client.get(reverse("otlp:trace-detail", args=[trace_id])).content.decode()
    assert client.post(reverse("otlp:trace-flush", args=[trace_id])).status_code == 302
    assert ReceivedTrace.objects.get(trace_id=trace_id).state == "finalized"


def test_an_admin_may_import_now_any_trace(client, recorder, victim, role_user):
    _root, trace_id = opened_trace(client, recorder, victim[1])
    client.force_login(role_user("admin", "the-admin"))
    assert client.post(reverse("otlp:trace-flush", args=[trace_id])).status_code == 302
    trace = ReceivedTrace.objects.get(trace_id=trace_id)
    assert trace.state == "finalized" and trace.run.imported_by == victim[0]
    assert not AuditEntry.objects.filter(action="otlp.finalize_refused").exists()


def test_otlp_flush_as_another_user_is_refused_in_one_line_and_audited(client, recorder, victim, attacker):
    from django.core.management import CommandError, call_command

    _root, trace_id = opened_trace(client, recorder, victim[1])
    with pytest.raises(CommandError) as refused:
        call_command("otlp_flush", trace_id, "--user", "attacker", "--json")
    message = str(refused.value)
    assert "\n" not in message and "only the user who opened trace" in message
    assert ReceivedTrace.objects.get(trace_id=trace_id).state == "receiving"
    assert AuditEntry.objects.filter(action="otlp.finalize_refused", target=f"trace {trace_id}").count() == 1

    # --all as that user leaves others' traces alone; as their opener it imports them.
    assert flush_json("--all", "--user", "attacker")["traces"] == []
    assert ReceivedTrace.objects.get(trace_id=trace_id).state == "receiving"
    (done,) = flush_json(trace_id, "--user", "victim")["traces"]
    assert done["state"] == "finalized"


def test_otlp_flush_json_names_who_opened_the_trace_and_who_sent_its_spans(client, recorder, victim):
    root, trace_id = opened_trace(client, recorder, victim[1])
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    token = HarnessToken.objects.get(user=victim[0])

    (done,) = flush_json(trace_id)["traces"]

    assert done["state"] == "finalized" and done["run"]  # the keys it had stay as they were
    assert done["opened_by"] == {"user": "victim", "token": token.prefix}
    # The chunks the run was made from are gone with finalisation; who sent them is kept on the trace.
    assert done["sent_by"] == [{"user": "victim", "token": token.prefix, "spans": done["spans"]}]
    assert not TraceChunk.objects.filter(trace__trace_id=trace_id).exists()
