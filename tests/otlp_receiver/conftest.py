"""The real OpenTelemetry SDK and its OTLP/HTTP protobuf exporter, sending GenAI spans to the receiver.

`agent_trace` records an agent's turn as the GenAI semantic conventions name its spans (invoke_agent > chat >
execute_tool) with the SDK's own tracer; the spans are kept in memory and then sent by `OTLPSpanExporter`, the
exporter teams use, so that a test can look at what the exporter was told (SUCCESS or FAILURE) besides what the
console stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pytest
from django.urls import reverse
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from accounts.models import HarnessToken
from tests.runs.test_api import token_for


@dataclass
class Recorder:
    provider: TracerProvider
    memory: InMemorySpanExporter

    @property
    def tracer(self) -> otel_trace.Tracer:
        return self.provider.get_tracer("n17q-tests", "1")

    def take(self) -> list[ReadableSpan]:
        spans = list(self.memory.get_finished_spans())
        self.memory.clear()
        return spans


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield Recorder(provider, memory)
    provider.shutdown()


def agent_turn(tracer: otel_trace.Tracer, *, end_root: bool = True, tool_calls: int = 1):
    """One agent turn in GenAI spans; returns the root span (still open when `end_root` is false)."""
    root = tracer.start_span(
        "invoke_agent support-agent",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support-agent",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
        },
    )
    context = otel_trace.set_span_in_context(root)
    for n in range(tool_calls):
        call_id = f"call_{n}"
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            context=context,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.usage.input_tokens": 120 + n,
                "gen_ai.usage.output_tokens": 14,
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": call_id,
                                    "name": "lookup_order",
                                    "arguments": {"order_id": f"A-{n}"},
                                }
                            ],
                        }
                    ]
                ),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool lookup_order",
            context=context,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup_order",
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.arguments": json.dumps({"order_id": f"A-{n}"}),
                "gen_ai.tool.call.result": json.dumps({"status": "shipped", "order_id": f"A-{n}"}),
            },
        ):
            pass
    if end_root:
        root.end()
    return root


def exporter_for(url: str, key: str | None, *, gzip: bool = False, **headers: str) -> OTLPSpanExporter:
    sent = dict(headers)
    if key is not None:
        sent["Authorization"] = f"Bearer {key}"
    return OTLPSpanExporter(
        endpoint=f"{url}/v1/traces",
        headers=sent,
        timeout=30,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )


@pytest.fixture
def operator_key(role_user) -> str:
    return token_for(role_user("operator", "exporter"), HarnessToken.Scope.IMPORT_RUNS)


def export(url: str, key: str | None, spans: Sequence[ReadableSpan], **options) -> object:
    exporter = exporter_for(url, key, **options)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


Export = Callable[..., object]


# ---- two operators, each with an exporter token (issue 33: a trace is the token's that opened it)


def post(client, spans, key: str):
    data = encode_spans(spans).SerializeToString()
    return client.post(
        reverse("otlp:export-traces"),
        data=data,
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


@pytest.fixture
def victim(role_user):
    user = role_user("operator", "victim")
    return user, token_for(user, HarnessToken.Scope.IMPORT_RUNS)


@pytest.fixture
def attacker(role_user):
    user = role_user("operator", "attacker")
    return user, token_for(user, HarnessToken.Scope.IMPORT_RUNS)


def opened_trace(client, recorder, key: str):
    """The victim's agent turn, sent while its root span is still open: (the open root, the trace's id)."""
    root = agent_turn(recorder.tracer, end_root=False)
    assert post(client, recorder.take(), key).status_code == 200
    return root, format(root.get_span_context().trace_id, "032x")
