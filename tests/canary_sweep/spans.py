"""The canaries in an agent's trace, recorded by the real OpenTelemetry SDK and encoded by its OTLP exporter's encoder:
the request a harness's exporter sends (`protobuf`) and the file a Collector's file exporter writes (`json`)."""

from __future__ import annotations

import json

from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.runs.test_import_formats import otlp_json

from . import exchanges
from .canaries import Canaries


def agent_trace(c: Canaries):
    """One agent turn (invoke_agent > chat > execute_tool) whose names, attributes and events hold every canary;
    returns the ExportTraceServiceRequest message."""
    provider = TracerProvider(resource=Resource.create({"service.name": "deploy-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-canary-sweep")
    # A span name taken from the user's task: the token ends up in the trace's (and the run's) title.
    root = tracer.start_span(
        f"invoke_agent rotate {c.github.value}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "deploy-agent"},
    )
    context = otel_trace.set_span_in_context(root)
    messages = [{"role": "user", "parts": [{"type": "text", "content": text}]} for _, text in c.in_context()]
    call = {"type": "tool_call", "id": "call_0", "name": "fetch_config", "arguments": {"url": c.database_url()}}
    with tracer.start_as_current_span(
        "chat gpt-4o-mini",
        context=context,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.input.messages": json.dumps(messages),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [call]}]),
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 14,
        },
    ):
        pass
    with tracer.start_as_current_span(
        "execute_tool fetch_config",
        context=context,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "fetch_config",
            "gen_ai.tool.call.id": "call_0",
            "gen_ai.tool.call.arguments": json.dumps({"url": c.database_url()}),
            "gen_ai.tool.call.result": json.dumps(c.document()),
            "url.full": exchanges.request_url(c),
            "http.request.header.authorization": [f"Bearer {c.jwt.value}"],
            "http.response.header.location": [c.callback_url()],
        },
    ) as span:
        span.add_event("exception", {"exception.message": c.prose(), "exception.stacktrace": c.environment_text()})
    root.end()
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def protobuf(c: Canaries) -> bytes:
    return agent_trace(c).SerializeToString()


def json_file(c: Canaries) -> bytes:
    return otlp_json(agent_trace(c))
