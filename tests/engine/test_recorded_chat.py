"""Recorded model calls read back as chat requests and completions (issue 37 point 2): `recorded_chat` on the
model.proposal events of a real Inspect eval's log and of OTLP spans emitted with the real OpenTelemetry SDK under
the GenAI and OpenInference attribute names; the request a real OpenAI client sends for the same conversation
digests the same under the `model.chat` contract."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openinference.semconv.trace import MessageAttributes, OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.trace import Tracer

from n17q_engine.agent.model import MODEL_CONTRACT
from n17q_engine.contracts import Contract
from n17q_engine.formats.inspect_log import convert_inspect_log
from n17q_engine.formats.otlp import convert_otlp
from n17q_engine.recorded_chat import blob_fields, recorded_chat

from .inspect_logs import produce
from .test_format_otlp import PB, _protobuf, _spans

CONTRACT = Contract.from_dict(MODEL_CONTRACT)
OpenAI: Any = openai.OpenAI  # its http_client is typed for its own httpx build
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ANSWER: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer about the weather."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _client_request(**kwargs: Any) -> dict[str, Any]:
    """The body the real OpenAI client sends for `kwargs` (its transport answers ANSWER)."""
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=ANSWER)

    client = OpenAI(
        api_key="sk-test",
        base_url="http://model.invalid/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    client.chat.completions.create(**kwargs)
    return sent[0]


def _proposals(run: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for event in run.events:
        if event["kind"] == "model.proposal":
            out.append((event, {k: json.loads(run.blobs[d][0]) for k, d in blob_fields(event).items()}))
    return out


def _openinference_call(tracer: Tracer, kwargs: dict[str, Any]) -> None:
    """An LLM span as openinference-instrumentation-openai writes one for `kwargs` and ANSWER."""
    SA, MA = SpanAttributes, MessageAttributes
    attributes: dict[str, Any] = {
        SA.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.LLM.value,
        SA.LLM_MODEL_NAME: ANSWER["model"],
        SA.LLM_TOKEN_COUNT_PROMPT: 30,
        SA.LLM_TOKEN_COUNT_COMPLETION: 9,
        SA.LLM_TOKEN_COUNT_TOTAL: 39,
        SA.LLM_INVOCATION_PARAMETERS: json.dumps({k: v for k, v in kwargs.items() if k not in ("messages", "tools")}),
        f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_ROLE}": "assistant",
        f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}.0.tool_call.id": "call_1",
        f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}.0.tool_call.function.name": "weather",
        f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}.0.tool_call.function.arguments": '{"city":"Paris"}',
    }
    for i, message in enumerate(kwargs["messages"]):
        attributes[f"{SA.LLM_INPUT_MESSAGES}.{i}.{MA.MESSAGE_ROLE}"] = message["role"]
        attributes[f"{SA.LLM_INPUT_MESSAGES}.{i}.{MA.MESSAGE_CONTENT}"] = message["content"]
    for i, tool in enumerate(kwargs.get("tools") or []):
        attributes[f"{SA.LLM_TOOLS}.{i}.tool.json_schema"] = json.dumps(tool)
    with tracer.start_as_current_span("ChatCompletion", attributes=attributes):
        pass


def test_an_openinference_call_is_the_request_the_openai_client_sent() -> None:
    kwargs = {"model": "gpt-4o-mini", "messages": CONVERSATION, "tools": TOOLS, "temperature": 0, "max_tokens": 200}
    sent = _client_request(**kwargs)
    [run] = convert_otlp(_protobuf(_spans(lambda t: _openinference_call(t, kwargs))), content_type=PB)
    [(body, resolved)] = _proposals(run)
    request, completion, missing = recorded_chat(body, resolved=resolved)
    assert missing == [] and request is not None and completion is not None
    assert CONTRACT.digest(request)[1] == CONTRACT.digest(sent)[1]
    message = completion["choices"][0]["message"]
    assert message["tool_calls"] == ANSWER["choices"][0]["message"]["tool_calls"]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


def test_a_recorded_0_0_and_a_sent_0_digest_apart_and_the_type_recorded_is_kept() -> None:
    """DESIGN §3's digest is canonical JSON text: 0 and 0.0 differ; the trace keeps the type the client sent."""
    assert (
        CONTRACT.digest({"model": "m", "messages": [], "temperature": 0.0})[1]
        != CONTRACT.digest({"model": "m", "messages": [], "temperature": 0})[1]
    )
    for value in (0, 0.0):
        kwargs: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "messages": CONVERSATION,
            "tools": TOOLS,
            "temperature": value,
        }
        [run] = convert_otlp(_protobuf(_spans(functools.partial(_openinference_call, kwargs=kwargs))), content_type=PB)
        [(body, resolved)] = _proposals(run)
        request, _, _ = recorded_chat(body, resolved=resolved)
        assert request is not None and type(request["temperature"]) is type(value)
        assert CONTRACT.digest(request)[1] == CONTRACT.digest(_client_request(**kwargs))[1]


def _genai_call(tracer: Tracer) -> None:
    """A chat span as opentelemetry-instrumentation-openai-v2 writes one with content capture on: no tool
    definitions."""
    with tracer.start_as_current_span(
        "chat gpt-4o-mini",
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.request.temperature": 0.2,
            "gen_ai.response.id": "chatcmpl-1",
            "gen_ai.response.finish_reasons": ("tool_calls",),
            "gen_ai.input.messages": json.dumps(
                [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in CONVERSATION]
            ),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "tool_call", "id": "call_1", "name": "weather", "arguments": {"city": "Paris"}}
                        ],
                        "finish_reason": "tool_call",
                    }
                ]
            ),
        },
    ):
        pass


def test_a_genai_call_without_tool_definitions_asks_for_them_and_takes_them_given() -> None:
    [run] = convert_otlp(_protobuf(_spans(_genai_call)), content_type=PB)
    [(body, resolved)] = _proposals(run)
    assert recorded_chat(body, resolved=resolved) == (None, None, ["tools"])
    request, completion, missing = recorded_chat(body, resolved=resolved, tools=TOOLS)
    assert missing == [] and request is not None and completion is not None
    sent = _client_request(model="gpt-4o-mini", messages=CONVERSATION, tools=TOOLS, temperature=0.2)
    assert CONTRACT.digest(request)[1] == CONTRACT.digest(sent)[1]
    assert completion["id"] == "chatcmpl-1" and completion["choices"][0]["finish_reason"] == "tool_calls"


def test_a_call_without_content_capture_says_its_messages_and_answer_are_missing() -> None:
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span(
            "chat gpt-4o-mini", attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"}
        ):
            pass

    [run] = convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    [(body, resolved)] = _proposals(run)
    assert recorded_chat(body, resolved=resolved) == (None, None, ["messages", "answer"])


@pytest.fixture(scope="module")
def inspect_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    logs = produce(tmp_path_factory.mktemp("inspect-logs"), tmp_path_factory.mktemp("inspect-home"))
    return convert_inspect_log(Path(logs["eval"]).read_bytes())[0]


def test_an_inspect_eval_s_model_calls_are_a_conversation_the_next_request_echoes(inspect_run: Any) -> None:
    calls = _proposals(inspect_run)
    assert len(calls) == 5
    previous = None
    for body, resolved in calls:
        request, completion, missing = recorded_chat(body, resolved=resolved)
        assert missing == [] and request is not None and completion is not None
        assert request["model"] == "model"  # mockllm/model as the provider is asked
        assert [t["function"]["name"] for t in request["tools"]] == ["add", "shell"]
        CONTRACT.digest(request)  # fits the model.chat contract
        if previous is not None:
            # What the replayed agent is answered (the fixture's completion) is what its next request sends back.
            before, answered = previous
            assert request["messages"][: len(before["messages"])] == before["messages"]
            assert request["messages"][len(before["messages"])] == answered["choices"][0]["message"]
        previous = (request, completion)
    assert previous is not None and previous[1]["choices"][0]["message"]["content"] == "3"
    assert previous[1]["usage"]["total_tokens"] > 0


def test_an_inspect_conversation_is_the_request_the_openai_client_sends(inspect_run: Any) -> None:
    """The request rebuilt from the second call equals what the OpenAI client sends for the same conversation."""
    body, resolved = _proposals(inspect_run)[1]
    request, _, _ = recorded_chat(body, resolved=resolved)
    assert request is not None
    sent = _client_request(model=request["model"], messages=request["messages"], tools=request["tools"])
    assert CONTRACT.digest(request)[1] == CONTRACT.digest(sent)[1]


# --- the real instrumentations of the openai client -----------------------------------------------------------------

FINAL: dict[str, Any] = {
    **ANSWER,
    "id": "chatcmpl-2",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "It rains in Paris."}}
    ],
}


def _instrumented_agent(instrumentor: Any) -> tuple[list[dict[str, Any]], bytes]:
    """A two-turn OpenAI-client agent (ask, call the tool, answer) under `instrumentor`: the requests the client
    sent and the spans the instrumentation recorded, as an OTLP protobuf request."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=ANSWER if len(sent) == 1 else FINAL)

    instrumentor.instrument(tracer_provider=provider)
    try:
        client = OpenAI(
            api_key="sk-test",
            base_url="http://model.invalid/v1",
            http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        )
        messages: list[dict[str, Any]] = list(CONVERSATION)
        kwargs: dict[str, Any] = {"model": "gpt-4o-mini", "tools": TOOLS, "temperature": 0, "max_tokens": 100}
        first = client.chat.completions.create(messages=messages, **kwargs).choices[0].message
        calls = [call.model_dump() for call in first.tool_calls or []]
        messages.append({"role": "assistant", "content": first.content, "tool_calls": calls})
        messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"sky":"rain"}'})
        client.chat.completions.create(messages=messages, **kwargs)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    return sent, encode_spans(exporter.get_finished_spans()).SerializeToString()


@pytest.mark.parametrize("instrumentation", ["openinference", "openai-v2"])
def test_the_real_instrumentations_record_the_requests_the_client_sent(instrumentation: str, monkeypatch) -> None:
    if instrumentation == "openinference":
        module = pytest.importorskip("openinference.instrumentation.openai")
        given = None  # OpenInference records the tools offered (llm.tools)
    else:
        module = pytest.importorskip("opentelemetry.instrumentation.openai_v2")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        given = TOOLS  # openai-v2 records no tool definitions: the caller gives them
    sent, data = _instrumented_agent(module.OpenAIInstrumentor())
    runs = convert_otlp(data, content_type=PB)
    calls = [call for run in runs for call in _proposals(run)]
    assert len(calls) == 2
    if given is not None:
        assert recorded_chat(*calls[0][:1], resolved=calls[0][1])[2] == ["tools"]
    for (body, resolved), request_sent, answer in zip(calls, sent, (ANSWER, FINAL), strict=True):
        request, completion, missing = recorded_chat(body, resolved=resolved, tools=given)
        assert missing == [] and request is not None and completion is not None
        assert CONTRACT.digest(request)[1] == CONTRACT.digest(request_sent)[1]
        assert completion["choices"][0]["message"]["content"] == answer["choices"][0]["message"]["content"]
        assert completion["choices"][0]["message"].get("tool_calls") == answer["choices"][0]["message"].get(
            "tool_calls"
        )
