"""What an investigator sees of a run that came from a real producer (issue 17): the run page lists the mapped
events, the detail panel shows their payloads, and the checks the run gave nothing to judge say "not evaluated".

The OTLP file is what the OpenTelemetry SDK's own encoder writes for GenAI spans (the receiver's tests send the
same spans through the real exporter); the Inspect log is written by a real eval (tests/engine/inspect_producer.py).
"""

from __future__ import annotations

import secrets
import string

import pytest
from django.core.files.storage import storages
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runs.models import Event, MaskedSecret, Run, RunBlob, blob_storage_name
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


def _turn_with_extras(*, extra: dict[str, str]) -> list:
    """One SDK agent turn whose chat span also carries attributes no mapping reads."""
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent", "deployment.region": "eu-3"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests", "0.9")
    root = {"gen_ai.operation.name": "invoke_agent"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini", **extra}
    with tracer.start_as_current_span("invoke_agent support-agent", attributes=root):
        tracer.start_span("chat gpt-4o-mini", attributes=chat).end()
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.mark.parametrize("form", ["protobuf", "json"])
def test_the_detail_panel_shows_the_span_an_event_came_from_with_what_was_not_mapped(tmp_path, viewer, form):
    spans = _turn_with_extras(extra={"app.ticket": "T-4471", "server.address": "llm.internal.example"})
    request = encode_spans(spans)
    path = tmp_path / f"trace.{form}"
    path.write_bytes(request.SerializeToString() if form == "protobuf" else json_format.MessageToJson(request).encode())
    answer = import_run(path)
    assert answer["conversion"]["unmapped"]["span attribute app.ticket"] == 1
    run = Run.objects.get(run_id=answer["run"])
    roles = set(RunBlob.objects.filter(run=run).values_list("role", flat=True))
    # A protobuf original holds every span: the run keeps it once and names each span's bytes in it; a JSON
    # original cannot be cut by byte range, so its spans are kept as JSON beside it.
    assert roles == ({"source-otlp"} if form == "protobuf" else {"source-otlp", "source-trace"})
    proposal = Event.objects.get(run=run, kind="model.proposal")
    assert ("bytes" in proposal.body["otlp"]) == (form == "protobuf")
    detail = _page(viewer, run.run_id, event=proposal.event_id)
    assert "Source span" in detail and proposal.body["otlp"]["span"] in detail
    # The attributes no mapping read, the span's resource and its scope are all on screen, not only in a download.
    for shown in ("app.ticket", "T-4471", "llm.internal.example", "deployment.region", "eu-3", "n17q-tests", "0.9"):
        assert shown in detail, shown
    assert "Not shown" not in detail


def test_a_secret_in_an_unmapped_attribute_is_masked_in_the_kept_original_and_in_the_span_shown(tmp_path, viewer):
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    spans = _turn_with_extras(extra={"app.credential": token, "app.note": f"the harness used {token} for the fetch"})
    path = tmp_path / "trace.otlp"
    path.write_bytes(encode_spans(spans).SerializeToString())
    answer = import_run(path)
    run = Run.objects.get(run_id=answer["run"])
    assert MaskedSecret.objects.filter(run=run, place="blob", rule="github-pat").exists()
    store = storages["blobs"]
    for rb in RunBlob.objects.filter(run=run).select_related("blob"):
        with store.open(blob_storage_name(rb.blob.digest), "rb") as fh:
            assert token[4:12].encode() not in fh.read()
    proposal = Event.objects.get(run=run, kind="model.proposal")
    # The event names the masked original (stored under the digest of its masked bytes), and the span is still read
    # from it: masking overwrites byte for byte, so every range still holds its span.
    original = RunBlob.objects.get(run=run, role="source-otlp").blob.digest
    assert proposal.body["otlp"]["blob"] == original
    detail = _page(viewer, run.run_id, event=proposal.event_id)
    assert "Source span" in detail and "app.credential" in detail and "Not shown" not in detail
    assert token[4:12] not in detail
