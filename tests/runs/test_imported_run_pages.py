"""What an investigator sees of a run that came from a real producer (issue 17): the run page lists the mapped
events, the detail panel shows their payloads, and the checks the run gave nothing to judge say "not evaluated".

The OTLP file is what the OpenTelemetry SDK's own encoder writes for GenAI spans (the receiver's tests send the
same spans through the real exporter); the Inspect log is written by a real eval (tests/engine/inspect_producer.py).
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runs.models import Event, Run
from tests.otlp_receiver.conftest import agent_turn
from tests.runs.test_import_formats import import_run, inspect_logs  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def _page(client, run_id: str, **query: str) -> str:
    return client.get(f"/runs/{run_id}/", query).content.decode()


def test_an_otlp_trace_shows_its_tool_calls_with_their_payloads_and_what_was_not_evaluated(tmp_path, viewer):
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agent_turn(provider.get_tracer("n17q-tests"), tool_calls=2)
    provider.shutdown()
    path = tmp_path / "trace.otlp"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())

    answer = import_run(path)
    run = Run.objects.get(run_id=answer["run"])
    kinds = set(Event.objects.filter(run=run).values_list("kind", flat=True))
    assert {"attempt.started", "model.proposal", "tool.call", "tool.result", "budget.charged"} <= kinds
    # A trace of model and tool spans holds no workspaces, admissions, approvals or effects: those checks had
    # nothing to judge, and both the answer and the page say so; tool results (LIN014) were judged.
    unevaluated = {u["code"] for u in answer["unevaluated"]}
    assert {"LIN001", "LIN004", "LIN009", "LIN012"} <= unevaluated and "LIN014" not in unevaluated
    assert unevaluated == {u["code"] for u in run.unevaluated}

    html = _page(viewer, run.run_id)
    assert "lookup_order" in html and "not evaluated" in html and 'class="headline partial"' in html
    call = Event.objects.filter(run=run, kind="tool.call").order_by("seq").first()
    assert call is not None and call.body["request"] == {"order_id": "A-0"}
    result = Event.objects.get(run=run, kind="tool.result", body__call_id=call.event_id)
    detail = _page(viewer, run.run_id, event=result.event_id)
    # The result's payload (a blob) is rendered in the detail panel, and only there.
    assert "shipped" in detail and "A-0" in detail and "shipped" not in html


def test_an_inspect_sample_shows_its_model_tool_and_sandbox_events(inspect_logs, viewer):  # noqa: F811
    answer = import_run(inspect_logs["eval"])
    assert len(answer["runs"]) >= 4  # samples x epochs
    run = Run.objects.get(run_id=answer["run"])
    kinds = set(Event.objects.filter(run=run).values_list("kind", flat=True))
    assert {"model.proposal", "tool.call", "tool.result", "command.receipt"} <= kinds
    unevaluated = {u["code"]: u["reason"] for u in run.unevaluated}
    # Inspect records no evidence admissions or effect intents: the authority checks were not evaluated.
    assert "LIN001" in unevaluated and "LIN013" in unevaluated and "LIN014" not in unevaluated

    html = _page(viewer, run.run_id)
    assert "not evaluated" in html
    receipt = Event.objects.filter(run=run, kind="command.receipt").order_by("seq").last()
    assert receipt is not None
    detail = _page(viewer, run.run_id, event=receipt.event_id)
    assert str(receipt.body.get("command")) in detail or "sh" in detail
    add = Event.objects.filter(run=run, kind="tool.call", body__tool="add").first()
    assert add is not None
    assert "add" in _page(viewer, run.run_id, event=add.event_id)
