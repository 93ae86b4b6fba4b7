"""A small "production" agent on the official `openai` client, traced by a real instrumentation, and replayable by
N17Q unchanged (issue 37: the producer of the trace files in tests/data/producers/).

It offers its model three tools of its own, as static OpenAI function definitions (`TOOLS`): `get_forecast(city)`
and `list_alerts(region)` read, `send_alert(region, text)` is a mutation. Its loop: chat.completions.create(model,
messages, tools, temperature=0) -> the tool calls -> each result appended as a tool message -> until the model answers
without a tool call.

Two modes, one conversation:

- **production** (the default): the tools are the local functions below (deterministic: a fixed table); the model is
  at OPENAI_BASE_URL. `--instrumentation genai` traces it with opentelemetry-instrumentation-openai-v2 (GenAI
  semantic conventions, message content as span attributes) plus one `execute_tool {name}` span per tool call and an
  `invoke_agent` root span; `--instrumentation openinference` with openinference-instrumentation-openai plus one
  OpenInference TOOL span per tool call and an AGENT root span. The spans go to a FILE (`--otlp-json`,
  `--otlp-protobuf`: the OTLP exporter's own encoding of the finished spans), never to the network.
- **N17Q replay** (`N17Q_MCP=stdio`, which N17Q's sandbox sets: docs/agents.md "What your agent receives"): it imports
  no OpenTelemetry, offers its model the SAME static tool definitions, and runs each tool call through MCP
  (`session.call_tool(name, args)` on the server on its stdin/stdout); the answer's structured content is
  `{"outcome", "body", ...}` (n17q_engine/agent/bridge.py) and the tool message holds the body.

Given the same tool answers, both modes send byte-identical chat request bodies: messages are appended in one
canonical form (assistant `{"role", "content", "tool_calls": [{"id", "type", "function": {"name", "arguments"}}]}`;
tool `{"role": "tool", "tool_call_id", "content": json.dumps(result, sort_keys=True)}`), a failed tool is told to the
model as `{"error": "<tool> failed"}` in both modes (a replay's failed call carries no body, so the exception's text
goes to the trace only), and the task is the same fixed text: a replay uses `DEFAULT_TASK`, not N17Q's `n17q-task`
prompt, because the replay's requests must equal the recorded ones.

Run:  python agent.py [--instrumentation genai|openinference|none] [--otlp-json F] [--otlp-protobuf F] ["task"]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

MODEL = "gpt-4o-mini"
AGENT_NAME = "weather-agent"
SYSTEM = (
    "You are a weather operations agent. Use the tools to look up forecasts and alerts. Send an alert only when a "
    "forecast shows a storm and no alert for that region is active. Answer with a short summary when done."
)
DEFAULT_TASK = "Check tomorrow's forecast for Oslo and Atlantis and the active alerts for the north region."
MAX_TURNS = 8

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Tomorrow's forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city's name"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_alerts",
            "description": "The active weather alerts of a region.",
            "parameters": {
                "type": "object",
                "properties": {"region": {"type": "string", "enum": ["north", "south"]}},
                "required": ["region"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_alert",
            "description": "Send a weather alert to everyone in a region (it cannot be taken back).",
            "parameters": {
                "type": "object",
                "properties": {"region": {"type": "string", "enum": ["north", "south"]}, "text": {"type": "string"}},
                "required": ["region", "text"],
                "additionalProperties": False,
            },
        },
    },
]

# The production tools: deterministic functions over a fixed table.
FORECASTS = {"oslo": {"city": "Oslo", "summary": "storm", "high_c": 4, "low_c": -2, "wind_kmh": 70}}
ALERTS = {"north": [{"id": "alert-17", "text": "Ice on the coastal road", "level": "yellow"}], "south": []}


class UnknownCity(LookupError):
    pass


def get_forecast(city: str) -> dict[str, Any]:
    try:
        return FORECASTS[city.lower()]
    except KeyError:
        raise UnknownCity(f"no forecast for {city!r}") from None


def list_alerts(region: str) -> dict[str, Any]:
    return {"region": region, "alerts": ALERTS.get(region, [])}


def send_alert(region: str, text: str) -> dict[str, Any]:
    return {"region": region, "sent": True, "alert_id": f"alert-{len(ALERTS.get(region, [])) + 18}", "text": text}


LOCAL: dict[str, Callable[..., dict[str, Any]]] = {
    "get_forecast": get_forecast,
    "list_alerts": list_alerts,
    "send_alert": send_alert,
}


def failed(name: str) -> str:
    """What the model is told of a failed tool call, the same in both modes."""
    return json.dumps({"error": f"{name} failed"}, sort_keys=True)


def assistant_entry(message: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ]
    return entry


def converse(client: Any, task: str, run_tool: Callable[[str, str, str], str]) -> str | None:
    """The loop both modes share; `run_tool(name, arguments, call_id)` answers the tool message's content."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _turn in range(MAX_TURNS):
        response = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=0)
        message = response.choices[0].message
        messages.append(assistant_entry(message))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            content = run_tool(call.function.name, call.function.arguments or "{}", call.id)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return None


# ---- production ---------------------------------------------------------------------------------------------------


def production(task: str, instrumentation: str, json_out: str | None, pb_out: str | None) -> int:
    if instrumentation == "genai":
        # Before the instrumentation is imported: the latest GenAI conventions, message content on the spans.
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    from openai import OpenAI

    if instrumentation == "none":
        answer = converse(OpenAI(max_retries=0), task, _plain_tool)
        print(f"agent: done: {answer}", file=sys.stderr)
        return 0 if answer is not None else 2

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": AGENT_NAME}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracer = provider.get_tracer("examples.traced_agent", "1.0")
    if instrumentation == "genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        answer = _genai_run(OpenAI(max_retries=0), tracer, task)
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAIInstrumentor

        OIOpenAIInstrumentor().instrument(tracer_provider=provider)
        answer = _openinference_run(OpenAI(max_retries=0), tracer, task)
    provider.force_flush()
    write_otlp(exporter.get_finished_spans(), json_out, pb_out)
    print(f"agent: done: {answer}", file=sys.stderr)
    return 0 if answer is not None else 2


def _local(name: str, arguments: str) -> dict[str, Any]:
    if name not in LOCAL:
        raise LookupError(f"no tool {name!r}")
    return LOCAL[name](**json.loads(arguments))


def _plain_tool(name: str, arguments: str, _call_id: str) -> str:
    try:
        return json.dumps(_local(name, arguments), sort_keys=True)
    except Exception:
        return failed(name)


def _genai_run(client: Any, tracer: Any, task: str) -> str | None:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    def run_tool(name: str, arguments: str, call_id: str) -> str:
        with tracer.start_as_current_span(
            f"execute_tool {name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.call.arguments": arguments,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                content = json.dumps(_local(name, arguments), sort_keys=True)
            except Exception as exc:
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                return failed(name)
            span.set_attribute("gen_ai.tool.call.result", content)
            return content

    with tracer.start_as_current_span(
        f"invoke_agent {AGENT_NAME}",
        kind=SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
        },
    ):
        return converse(client, task, run_tool)


def _openinference_run(client: Any, tracer: Any, task: str) -> str | None:
    from openinference.instrumentation import OITracer, TraceConfig
    from opentelemetry.trace import Status, StatusCode

    oi = OITracer(tracer, config=TraceConfig())

    def run_tool(name: str, arguments: str, call_id: str) -> str:
        with oi.start_as_current_span(name, openinference_span_kind="tool") as span:
            spec = next(t["function"] for t in TOOLS if t["function"]["name"] == name)
            span.set_tool(name=name, description=spec["description"], parameters=spec["parameters"])
            span.set_attribute("tool_call.id", call_id)
            span.set_input(arguments, mime_type="application/json")
            try:
                content = json.dumps(_local(name, arguments), sort_keys=True)
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                return failed(name)
            span.set_output(content, mime_type="application/json")
            span.set_status(Status(StatusCode.OK))
            return content

    with oi.start_as_current_span(AGENT_NAME, openinference_span_kind="agent") as root:
        root.set_input(task)
        answer = converse(client, task, run_tool)
        root.set_output(answer or "")
        root.set_status(Status(StatusCode.OK))
        return answer


def write_otlp(spans: Any, json_out: str | None, pb_out: str | None) -> None:
    """The finished spans as the OTLP exporter encodes them: protobuf bytes, and OTLP/JSON (ids in hex)."""
    import base64

    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    message = encode_spans(spans)
    if pb_out:
        with open(pb_out, "wb") as fh:
            fh.write(message.SerializeToString())
    if json_out:
        doc = json_format.MessageToDict(message)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if span.get(key):
                            span[key] = base64.b64decode(span[key]).hex()
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.write("\n")


# ---- N17Q replay --------------------------------------------------------------------------------------------------


async def replay(session: Any, client: Any, task: str) -> str | None:
    """The same loop with the tools served by N17Q over MCP (no OpenTelemetry imported)."""
    import anyio.from_thread
    import anyio.to_thread

    await session.initialize()

    async def call(name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments)
        except ValueError:
            return failed(name)
        result = await session.call_tool(name, args)
        answer = result.structured_content or {}
        if result.is_error or answer.get("outcome") != "ok":
            return failed(name)
        return json.dumps(answer.get("body"), sort_keys=True)

    # `converse` is synchronous (the openai client's sync API, as in production); each tool call hops back here.
    def run_tool(name: str, arguments: str, call_id: str) -> str:
        return anyio.from_thread.run(call, name, arguments)

    return await anyio.to_thread.run_sync(converse, client, task, run_tool)


def replay_main() -> None:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.server.stdio import stdio_server
    from openai import OpenAI

    async def main() -> None:
        async with stdio_server() as (read, write), ClientSession(read, write) as session:
            answer = await replay(session, OpenAI(max_retries=0), DEFAULT_TASK)
            print(f"agent: done: {answer}", file=sys.stderr)
            sys.stderr.flush()
            # The stdio helper's stdin reader ends only at end of file (docs/agents.md, "known limit").
            os._exit(0 if answer is not None else 2)

    anyio.run(main)


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("N17Q_MCP") == "stdio":
        replay_main()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", nargs="?", default=DEFAULT_TASK)
    parser.add_argument("--instrumentation", choices=("genai", "openinference", "none"), default="none")
    parser.add_argument("--otlp-json", help="write the trace here as OTLP/JSON")
    parser.add_argument("--otlp-protobuf", help="write the trace here as OTLP protobuf (ExportTraceServiceRequest)")
    args = parser.parse_args(argv)
    if args.instrumentation != "none" and not (args.otlp_json or args.otlp_protobuf):
        parser.error("an instrumentation needs --otlp-json or --otlp-protobuf")
    return production(args.task, args.instrumentation, args.otlp_json, args.otlp_protobuf)


if __name__ == "__main__":
    sys.exit(main())
