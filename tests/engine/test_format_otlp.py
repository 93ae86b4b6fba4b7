"""OpenTelemetry traces -> runs (issue 17 points 2 and 3), tested on spans the real OpenTelemetry SDK makes.

Each test emits spans through the SDK's TracerProvider into an InMemorySpanExporter, encodes them with the OTLP
exporter's own encoder (`encode_spans(...).SerializeToString()`: the bytes an OTLP/HTTP exporter sends), and
converts those bytes; the OTLP/JSON form is made from the same message with `json_format`, as OTLP/JSON writes it
(ids in hex) and as MessageToJson writes it (ids in base64).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from openinference.semconv.trace import (
    MessageAttributes,
    OpenInferenceMimeTypeValues,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolCallAttributes,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from n17q_engine.bundle import iter_event_records, parse_manifest, verify_blobs
from n17q_engine.canonical import request_digest
from n17q_engine.formats import ConversionError, ConvertedRun, otlp, write_bundle
from n17q_engine.formats.otlp import (
    convert_otlp,
    convert_trace,
    decode_otlp,
    flatten_spans,
    looks_like_otlp,
    parse_byte_range,
    source_span_from_bytes,
    source_span_from_chunk,
    span_byte_ranges,
)
from n17q_engine.lineage import check_events
from tests.otlp_json import sdk_json

PB = "application/x-protobuf"
DIGEST0 = "sha256:" + "0" * 64
DIGEST1 = "sha256:" + "1" * 64
BIG_RESULT = "line of a long file\n" * 200  # 4 KB: a payload that must become a blob


def _spans(emit: Callable[[Tracer], None]) -> tuple[ReadableSpan, ...]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "fixer-agent", "host.name": "ci-7"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emit(provider.get_tracer("n17q.tests", "1.0"))
    provider.shutdown()
    return exporter.get_finished_spans()


def _protobuf(spans: tuple[ReadableSpan, ...]) -> bytes:
    return encode_spans(spans).SerializeToString()


def _genai(tracer: Tracer) -> None:
    with tracer.start_as_current_span(
        "invoke_agent fixer",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "fixer",
            "gen_ai.agent.version": "2.1",
            "gen_ai.provider.name": "openai",
            "n17q.task.id": "fix-issue-42",
        },
    ):
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.request.temperature": 0.2,
                "gen_ai.usage.input_tokens": 120,
                "gen_ai.usage.output_tokens": 30,
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Fix the failing test"}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": "call_1",
                                    "name": "read_file",
                                    "arguments": {"path": "a.py"},
                                }
                            ],
                            "finish_reason": "tool_call",
                        }
                    ]
                ),
                "server.address": "api.openai.example",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "execute_tool read_file",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "read_file",
                "gen_ai.tool.call.id": "call_1",
                "gen_ai.tool.call.arguments": json.dumps({"path": "a.py"}),
                "gen_ai.tool.call.result": BIG_RESULT,
                "n17q.workspace.id": "ws-1",
            },
        ) as span:
            span.add_event(
                "n17q.workspace.created",
                {
                    "workspace_id": "ws-1",
                    "base_digest": DIGEST0,
                    "overlay_digest": DIGEST1,
                    "environment_revision": "py3.11",
                },
            )
        with tracer.start_as_current_span(
            "execute_tool fetch_url",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch_url",
                "gen_ai.tool.call.id": "call_2",
                "gen_ai.tool.call.arguments": json.dumps({"url": "https://example.invalid/x"}),
                "error.type": "TimeoutError",
            },
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "no answer in 30 s"))
        with tracer.start_as_current_span(
            "run tests",
            attributes={
                "process.command_line": "pytest -q tests/test_a.py",
                "process.executable.name": "pytest",
                "process.exit.code": 0,
                "n17q.workspace.id": "ws-1",
                "n17q.command.suites": ["unit"],
                "n17q.command.results": json.dumps({"passed": 3, "failed": 0, "skipped": 0}),
            },
        ) as span:
            span.add_event(
                "n17q.event",
                {
                    "n17q.kind": "account.claim",
                    "n17q.id": "claim-1",
                    "text": "I ran the unit tests",
                    "claim_kind": "other",
                    "supports": [],
                },
            )


def _openinference(tracer: Tracer) -> None:
    SA, MA, TC = SpanAttributes, MessageAttributes, ToolCallAttributes
    kinds = OpenInferenceSpanKindValues
    calls = f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}"
    with tracer.start_as_current_span(
        "agent", attributes={SA.OPENINFERENCE_SPAN_KIND: kinds.AGENT.value, SA.AGENT_NAME: "researcher"}
    ):
        with tracer.start_as_current_span(
            "llm",
            attributes={
                SA.OPENINFERENCE_SPAN_KIND: kinds.LLM.value,
                SA.LLM_MODEL_NAME: "claude-x",
                SA.LLM_TOKEN_COUNT_PROMPT: 50,
                SA.LLM_TOKEN_COUNT_COMPLETION: 10,
                SA.LLM_TOKEN_COUNT_TOTAL: 60,
                f"{SA.LLM_INPUT_MESSAGES}.0.{MA.MESSAGE_ROLE}": "user",
                f"{SA.LLM_INPUT_MESSAGES}.0.{MA.MESSAGE_CONTENT}": "What is the weather in Paris?",
                f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_ROLE}": "assistant",
                f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}.0.{TC.TOOL_CALL_ID}": "tc-9",
                f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}.0.{TC.TOOL_CALL_FUNCTION_NAME}": "weather",
                f"{calls}.0.{TC.TOOL_CALL_FUNCTION_ARGUMENTS_JSON}": json.dumps({"city": "Paris"}),
            },
        ):
            pass
        with tracer.start_as_current_span(
            "weather",
            attributes={
                SA.OPENINFERENCE_SPAN_KIND: kinds.TOOL.value,
                SA.TOOL_NAME: "weather",
                SA.TOOL_ID: "tc-9",
                SA.TOOL_PARAMETERS: json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
                SA.INPUT_VALUE: json.dumps({"city": "Paris"}),
                SA.INPUT_MIME_TYPE: OpenInferenceMimeTypeValues.JSON.value,
                SA.OUTPUT_VALUE: json.dumps({"temperature": 14, "sky": "rain"}),
                SA.OUTPUT_MIME_TYPE: OpenInferenceMimeTypeValues.JSON.value,
            },
        ):
            pass
        with tracer.start_as_current_span("retrieve", attributes={SA.OPENINFERENCE_SPAN_KIND: kinds.CHAIN.value}):
            pass


def _bundle(run: ConvertedRun, root: Path) -> list[dict[str, Any]]:
    """Write `run` as a bundle folder and read it back as the importer does: every line validated."""
    root.mkdir()
    write_bundle(run, root)
    manifest = parse_manifest((root / "manifest.json").read_bytes())
    verify_blobs(root, manifest)
    with open(root / "events.jsonl", "rb") as fh:
        return [record.event for record in iter_event_records(fh)]


def _by_kind(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


def _blob(run: ConvertedRun, digest: str) -> bytes:
    return run.blobs[digest][0]


def _source_span(run: ConvertedRun, event: dict[str, Any]) -> dict[str, Any]:
    """The span an event names, read as the event panel reads it: from its byte range in the kept protobuf
    original, or from the source-trace blob holding it."""
    ref = event["otlp"]
    data = _blob(run, ref["blob"])
    if "bytes" not in ref:
        found = source_span_from_chunk(data, ref["span"])
        assert found is not None
        return found

    def cut(text: str | None) -> bytes | None:
        at = parse_byte_range(text)
        return None if at is None else data[at[0] : at[0] + at[1]]

    span = cut(ref["bytes"])
    assert span is not None
    return source_span_from_bytes(span, cut(ref.get("resource_bytes")), cut(ref.get("scope_bytes")))


# ------------------------------------------------------------------------------------------------- GenAI spans


@pytest.fixture(scope="module")
def genai_spans() -> tuple[ReadableSpan, ...]:
    return _spans(_genai)


@pytest.mark.parametrize("form", ["protobuf", "json", "json-base64-ids"])
def test_it_maps_genai_spans_to_a_valid_run(genai_spans: tuple[ReadableSpan, ...], form: str, tmp_path: Path) -> None:
    if form == "protobuf":
        data, media = _protobuf(genai_spans), PB
    else:
        data, media = sdk_json(genai_spans, hex_ids=form == "json"), "application/json"
    assert looks_like_otlp(data) == ("protobuf" if form == "protobuf" else "json")
    [run] = convert_otlp(data, content_type=media)
    trace_id = format(genai_spans[0].context.trace_id, "032x")
    assert run.run["id"] == f"otlp-{trace_id}"
    assert run.run["title"] == "invoke_agent fixer"
    assert run.run["task"] == {"id": "fix-issue-42", "revision": "2.1"}
    assert run.run["model"] == {"name": "gpt-4o", "version": "gpt-4o-2024-08-06"}
    assert (run.run["environment"], run.run["mode"]) == ("live", "recorded")
    events = _bundle(run, tmp_path / "bundle")
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for e in events]
    assert kinds == [
        "attempt.started",
        "model.proposal",
        "budget.charged",
        "tool.call",
        "workspace.created",
        "tool.result",
        "tool.call",
        "tool.result",
        "tool.call",
        "account.claim",
        "command.receipt",
        "run.state",
        "attempt.ended",
    ]
    # Wall and logical times follow the spans, in order.
    walls = [e["at"]["wall"] for e in events]
    assert walls == sorted(walls) and all(e["at"]["logical"] == e["at"]["wall"] for e in events)
    # The original export is kept, and every event names the span it came from: by its byte range in a protobuf
    # original (the spans are not kept a second time), in a source-trace blob of JSON otherwise.
    roles = {role for _data, _media, role in run.blobs.values()}
    assert {"source-otlp", "tool-output"} <= roles
    assert ("source-trace" in roles) == (form != "protobuf")
    assert _blob(run, events[0]["source_blob"]) == data
    flat = {span["span_id"]: span for span in flatten_spans(decode_otlp(data, content_type=media))}
    for event in events:
        assert ("bytes" in event["otlp"]) == (form == "protobuf")
        shown = _source_span(run, event)
        original = dict(flat[event["otlp"]["span"]])
        assert shown["resource"] == original.pop("resource") and shown["scope"] == original.pop("scope")
        assert shown["span"] == original
    # The lineage checker reads the run and finds nothing broken: every reference resolves.
    assert check_events(run.run, events) == []


def test_it_maps_model_tool_command_and_usage_fields(genai_spans: tuple[ReadableSpan, ...]) -> None:
    [run] = convert_otlp(_protobuf(genai_spans), content_type=PB)
    events = run.events
    proposal = _by_kind(events, "model.proposal")[0]
    assert proposal["proposal"] == {
        "type": "tool_call",
        "tool": "read_file",
        "calls": [{"call": "call_1", "tool": "read_file", "arguments": {"path": "a.py"}}],
        "finish_reason": "tool_call",
    }
    assert proposal["accepted"] is True and proposal["model"] == "gpt-4o-2024-08-06"
    assert proposal["parameters"] == {"temperature": 0.2}
    assert proposal["input_messages"][0]["parts"][0]["content"] == "Fix the failing test"
    charged = _by_kind(events, "budget.charged")[0]
    assert (charged["resource"], charged["amount"], charged["input_tokens"], charged["output_tokens"]) == (
        "tokens",
        150,
        120,
        30,
    )
    read_call, fetch_call, command_call = _by_kind(events, "tool.call")
    assert read_call["tool"] == "read_file" and read_call["request"] == {"path": "a.py"}
    assert read_call["request_digest"] == request_digest({"path": "a.py"})
    assert read_call["proposal_id"] == proposal["id"] and read_call["tool_call"] == "call_1"
    assert read_call["workspace_id"] == "ws-1"
    ok, timed_out = _by_kind(events, "tool.result")
    assert (ok["call_id"], ok["outcome"], ok["origin"]) == (read_call["id"], "ok", "historical")
    # The 4 KB result is a blob, byte for byte.
    assert _blob(run, ok["blob"]) == BIG_RESULT.encode()
    assert (timed_out["call_id"], timed_out["outcome"]) == (fetch_call["id"], "timeout")
    assert timed_out["error"] == {"type": "TimeoutError", "message": "no answer in 30 s"}
    assert timed_out["blob"] is None
    receipt = _by_kind(events, "command.receipt")[0]
    assert receipt["call_id"] == command_call["id"] and command_call["tool"] == "pytest"
    assert (receipt["command"], receipt["exit_code"], receipt["completion"]) == (
        "pytest -q tests/test_a.py",
        0,
        "completed",
    )
    assert receipt["workspace_id"] == "ws-1" and receipt["suites"] == ["unit"]
    assert receipt["results"] == {"passed": 3, "failed": 0, "skipped": 0}
    claim = _by_kind(events, "account.claim")[0]
    assert (claim["id"], claim["text"], claim["claim_kind"], claim["supports"]) == (
        "claim-1",
        "I ran the unit tests",
        "other",
        [],
    )
    started, ended = _by_kind(events, "attempt.started")[0], _by_kind(events, "attempt.ended")[0]
    assert started["agent"] == {"name": "fixer", "version": "2.1", "provider": "openai"}
    assert ended["outcome"] == "completed"
    assert all(e["attempt"] == "attempt-1" for e in events)


def test_it_reports_what_it_mapped_and_what_it_kept_unmapped(genai_spans: tuple[ReadableSpan, ...]) -> None:
    [run] = convert_otlp(_protobuf(genai_spans), content_type=PB)
    report = run.report.to_json()
    assert report["format"] == "otlp"
    assert report["mapped"]["chat span -> model.proposal"] == 1
    assert report["mapped"]["execute_tool span -> tool.result"] == 2
    assert report["mapped"]["command span -> command.receipt"] == 1
    assert report["mapped"]["n17q span event -> workspace.created"] == 1
    # An attribute no mapping reads is counted, and it is still in the span the event names.
    assert report["unmapped"] == {"span attribute server.address": 1}
    chat = next(e for e in run.events if e["kind"] == "model.proposal")
    shown = _source_span(run, chat)
    assert shown["span"]["attributes"]["server.address"] == "api.openai.example"
    assert shown["resource"]["service.name"] == "fixer-agent"


def test_a_failed_root_span_fails_the_run(tmp_path: Path) -> None:
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span(
            "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}
        ) as root:
            root.set_status(Status(StatusCode.ERROR, "agent crashed"))
            root.set_attribute("error.type", "RuntimeError")

    [run] = convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    events = _bundle(run, tmp_path / "b")
    state, ended = _by_kind(events, "run.state")[0], _by_kind(events, "attempt.ended")[0]
    assert state["state"] == "failed" and "agent crashed" in state["reason"]
    assert ended["outcome"] == "error" and ended["error"] == {"type": "RuntimeError", "message": "agent crashed"}


def test_an_unfinished_command_has_no_post_tree_and_a_finished_one_names_it(tmp_path: Path) -> None:
    # Seed 000, "Unknown fixture data stayed unknown": a command that timed out left a tree nobody knows, so the
    # receipt says null rather than a word that could pass for one (DESIGN §10); a completed one must name one.
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
            with tracer.start_as_current_span(
                "run broad",
                attributes={"process.command_line": "pytest -q tests", "n17q.workspace.id": "ws-1"},
            ) as span:
                span.set_status(Status(StatusCode.ERROR, "killed after 900 s"))
                span.set_attribute("error.type", "TimeoutError")
            with tracer.start_as_current_span(
                "run focused",
                attributes={
                    "process.command_line": "pytest -q tests/test_a.py",
                    "process.exit.code": 0,
                    "n17q.workspace.id": "ws-1",
                },
            ):
                pass

    [run] = convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    timed_out, finished = _by_kind(_bundle(run, tmp_path / "b"), "command.receipt")
    assert (timed_out["completion"], timed_out["post_tree"]) == ("termination_unknown", None)
    assert (finished["completion"], finished["post_tree"]) == ("completed", "unknown")


# -------------------------------------------------------------------------------------------- OpenInference spans


def test_the_openinference_names_are_the_packages() -> None:
    SA, MA, TC = SpanAttributes, MessageAttributes, ToolCallAttributes
    assert otlp.OI_SPAN_KIND == SA.OPENINFERENCE_SPAN_KIND
    assert (otlp.OI_MODEL_NAME, otlp.OI_PROVIDER, otlp.OI_SYSTEM) == (SA.LLM_MODEL_NAME, SA.LLM_PROVIDER, SA.LLM_SYSTEM)
    assert (otlp.OI_INPUT_MESSAGES, otlp.OI_OUTPUT_MESSAGES) == (SA.LLM_INPUT_MESSAGES, SA.LLM_OUTPUT_MESSAGES)
    assert (otlp.OI_TOKENS_PROMPT, otlp.OI_TOKENS_COMPLETION, otlp.OI_TOKENS_TOTAL) == (
        SA.LLM_TOKEN_COUNT_PROMPT,
        SA.LLM_TOKEN_COUNT_COMPLETION,
        SA.LLM_TOKEN_COUNT_TOTAL,
    )
    assert otlp.OI_INVOCATION_PARAMETERS == SA.LLM_INVOCATION_PARAMETERS
    assert (otlp.OI_MESSAGE_ROLE, otlp.OI_MESSAGE_CONTENT, otlp.OI_MESSAGE_TOOL_CALLS) == (
        MA.MESSAGE_ROLE,
        MA.MESSAGE_CONTENT,
        MA.MESSAGE_TOOL_CALLS,
    )
    assert (otlp.OI_TOOL_CALL_ID, otlp.OI_TOOL_CALL_FUNCTION_NAME, otlp.OI_TOOL_CALL_FUNCTION_ARGUMENTS) == (
        TC.TOOL_CALL_ID,
        TC.TOOL_CALL_FUNCTION_NAME,
        TC.TOOL_CALL_FUNCTION_ARGUMENTS_JSON,
    )
    assert (otlp.OI_TOOL_NAME, otlp.OI_TOOL_DESCRIPTION, otlp.OI_TOOL_PARAMETERS, otlp.OI_TOOL_ID) == (
        SA.TOOL_NAME,
        SA.TOOL_DESCRIPTION,
        SA.TOOL_PARAMETERS,
        SA.TOOL_ID,
    )
    assert (otlp.OI_INPUT_VALUE, otlp.OI_INPUT_MIME_TYPE, otlp.OI_OUTPUT_VALUE, otlp.OI_OUTPUT_MIME_TYPE) == (
        SA.INPUT_VALUE,
        SA.INPUT_MIME_TYPE,
        SA.OUTPUT_VALUE,
        SA.OUTPUT_MIME_TYPE,
    )
    assert (otlp.OI_AGENT_NAME, otlp.OI_SESSION_ID) == (SA.AGENT_NAME, SA.SESSION_ID)
    assert OpenInferenceMimeTypeValues.JSON.value == otlp.OI_MIME_JSON
    kinds = OpenInferenceSpanKindValues
    assert (
        kinds.AGENT.value,
        kinds.CHAIN.value,
        kinds.LLM.value,
        kinds.TOOL.value,
        kinds.EMBEDDING.value,
    ) == (otlp.OI_AGENT, otlp.OI_CHAIN, otlp.OI_LLM, otlp.OI_TOOL, otlp.OI_EMBEDDING)


@pytest.mark.parametrize("form", ["protobuf", "json"])
def test_it_maps_openinference_spans(form: str, tmp_path: Path) -> None:
    spans = _spans(_openinference)
    data, media = (_protobuf(spans), PB) if form == "protobuf" else (sdk_json(spans), "application/json")
    [run] = convert_otlp(data, content_type=media)
    events = _bundle(run, tmp_path / "b")
    assert [e["kind"] for e in events] == [
        "attempt.started",
        "model.proposal",
        "budget.charged",
        "tool.call",
        "tool.result",
        "run.state",
        "attempt.ended",
    ]
    assert run.run["title"] == "agent" and run.run["task"]["id"] == "researcher"
    assert run.run["model"] == {"name": "claude-x", "version": "claude-x"}
    proposal = _by_kind(events, "model.proposal")[0]
    assert proposal["proposal"]["type"] == "tool_call"
    assert proposal["proposal"]["calls"] == [{"call": "tc-9", "tool": "weather", "arguments": {"city": "Paris"}}]
    assert proposal["input_messages"] == [
        {"role": "user", "parts": [{"type": "text", "content": "What is the weather in Paris?"}]}
    ]
    charged = _by_kind(events, "budget.charged")[0]
    assert (charged["amount"], charged["input_tokens"], charged["output_tokens"]) == (60, 50, 10)
    call, result = _by_kind(events, "tool.call")[0], _by_kind(events, "tool.result")[0]
    assert (call["tool"], call["request"], call["tool_call"]) == ("weather", {"city": "Paris"}, "tc-9")
    assert call["proposal_id"] == proposal["id"]
    assert call["tool_parameters"]["properties"] == {"city": {"type": "string"}}
    assert json.loads(_blob(run, result["blob"])) == {"temperature": 14, "sky": "rain"}
    assert result["outcome"] == "ok"
    # A CHAIN span has no event of its own: counted, kept in its blob.
    assert run.report.unmapped["span without a mapped convention (kept in the run's source blobs)"] == 1
    assert check_events(run.run, events) == []


# -------------------------------------------------------------------------------------- n17q.* events and attributes


def test_n17q_events_carry_the_full_vocabulary_into_the_lineage_checks(tmp_path: Path) -> None:
    tree = "sha256:" + "a" * 64

    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span(
            "harness", attributes={"n17q.run.id": "deploy-run-7", "n17q.run.title": "Deploy fix #42"}
        ) as span:
            span.add_event(
                "n17q.workspace.created",
                {"workspace_id": "ws", "base_digest": DIGEST0, "overlay_digest": DIGEST1, "environment_revision": "e1"},
            )
            span.add_event(
                "n17q.artifact.created",
                {
                    "artifact_id": "art",
                    "digest": DIGEST1,
                    "media_type": "text/x-diff",
                    "size": 10,
                    "role": "patch",
                    "workspace_id": "ws",
                    "tree_digest": tree,
                    "files": ["a.py"],
                },
            )
            span.add_event(
                "n17q.effect.intent",
                {
                    "n17q.id": "intent-1",
                    "effect_class": "deploy",
                    "destination": "prod",
                    "artifact_id": "art",
                    "admission_ids": [],
                    "idempotency_key": "k1",
                    "namespace": "live",
                },
            )
            span.add_event(
                "n17q.event",
                {
                    "n17q.kind": "effect.execution",
                    "intent_id": "intent-1",
                    "attempt_no": 1,
                    "stage": "completed",
                    "outcome": "acknowledged",
                    "connection": "prod-api",
                },
            )
            span.add_event(
                "n17q.event",
                {
                    "n17q.kind": "world.observation",
                    "resource": "service/api",
                    "world_revision": 3,
                    "state": json.dumps({"version": "1.2"}),
                },
            )

    [run] = convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    assert run.run["id"] == "deploy-run-7" and run.run["title"] == "Deploy fix #42"
    events = _bundle(run, tmp_path / "b")
    kinds = [e["kind"] for e in events]
    assert kinds[1:6] == [
        "workspace.created",
        "artifact.created",
        "effect.intent",
        "effect.execution",
        "world.observation",
    ]
    intent = _by_kind(events, "effect.intent")[0]
    assert intent["id"] == "intent-1" and intent["approval_id"] is None and intent["historical_intent"] is None
    assert _by_kind(events, "world.observation")[0]["state"] == {"version": "1.2"}
    assert _by_kind(events, "workspace.created")[0]["derived_from"] is None
    # The intent was executed without the evidence the console requires: the checks read the harness's events.
    findings = check_events(run.run, events)
    assert all(f.code != "LIN011" for f in findings)


@pytest.mark.parametrize(
    ("event", "attributes", "said"),
    [
        ("n17q.workspace.created", {"workspace_id": "ws"}, "field base_digest: is required for workspace.created"),
        ("n17q.event", {"n17q.kind": "tool.teleport"}, "'tool.teleport' is not a kind of the run vocabulary"),
        ("n17q.workspace.exploded", {}, "'workspace.exploded' is not a kind of the run vocabulary"),
        (
            "n17q.event",
            {"n17q.kind": "run.state", "state": "exploded"},
            "field state: 'exploded' is not one of",
        ),
        ("n17q.run.state", {"state": "completed", "seq": 5}, "attribute 'seq' is written by the converter"),
        (
            "n17q.policy.decision",
            {
                "policy_revision": "p",
                "subject": "x",
                "input_ids": "not json",
                "required": "[]",
                "outcome": "allow",
                "reasons": "[]",
            },
            "field input_ids must be a JSON array",
        ),
    ],
)
def test_a_bad_n17q_event_is_refused_naming_the_span_and_field(
    event: str, attributes: dict[str, Any], said: str
) -> None:
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span("harness step") as span:
            span.add_event(event, attributes)

    with pytest.raises(ConversionError) as caught:
        convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    message = str(caught.value)
    assert "\n" not in message
    assert "span 'harness step'" in message and f"span event {event!r}" in message
    assert said in message


def test_a_bad_run_id_attribute_is_refused() -> None:
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span("root", attributes={"n17q.run.id": "has a/slash"}):
            pass

    with pytest.raises(ConversionError, match=r"attribute n17q\.run\.id must be"):
        convert_otlp(_protobuf(_spans(emit)), content_type=PB)


# ------------------------------------------------------------------------------------------------------- decoding


def test_decode_gives_the_otlp_json_mapping_of_message_to_dict(genai_spans: tuple[ReadableSpan, ...]) -> None:
    message = encode_spans(genai_spans)
    expected = json_format.MessageToDict(message)["resourceSpans"]
    for rs in expected:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    assert decode_otlp(message.SerializeToString(), content_type=PB) == expected
    # The JSON form decodes to the same spans.
    from_json = flatten_spans(decode_otlp(sdk_json(genai_spans), content_type="application/json"))
    from_pb = flatten_spans(decode_otlp(message.SerializeToString(), content_type="application/x-protobuf; q=1"))
    assert from_json == from_pb


def test_flat_spans_carry_resource_scope_ids_times_and_plain_values(genai_spans: tuple[ReadableSpan, ...]) -> None:
    flat = flatten_spans(decode_otlp(_protobuf(genai_spans), content_type=PB))
    by_name = {span["name"]: span for span in flat}
    root, chat = by_name["invoke_agent fixer"], by_name["chat gpt-4o"]
    assert root["parent_span_id"] is None and chat["parent_span_id"] == root["span_id"]
    assert len(chat["trace_id"]) == 32 and len(chat["span_id"]) == 16
    assert chat["start_ns"] <= chat["end_ns"] and isinstance(chat["start_ns"], int)
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == 120
    assert chat["attributes"]["gen_ai.request.temperature"] == 0.2
    assert by_name["run tests"]["attributes"]["n17q.command.suites"] == ["unit"]
    assert chat["resource"]["service.name"] == "fixer-agent"
    assert chat["scope"]["name"] == "n17q.tests" and chat["scope"]["version"] == "1.0"
    assert by_name["execute_tool fetch_url"]["status"] == {"code": "error", "message": "no answer in 30 s"}
    assert chat["kind"] == "internal"
    json.dumps(flat)  # what the receiver buffers is plain JSON
    # The direct protobuf path convert_otlp takes gives the same flat spans, and so does the receiver's reading of
    # its buffered requests (flatten_protobuf), and the same refusal for bytes that are not a request.
    assert otlp._flat_from_proto(otlp._parse_proto(_protobuf(genai_spans))) == flat
    assert otlp.flatten_protobuf(_protobuf(genai_spans)) == flat
    with pytest.raises(ConversionError, match="not an OTLP ExportTraceServiceRequest in protobuf"):
        otlp.flatten_protobuf(b"\xff\xfe not an OTLP request")


def test_one_file_with_two_traces_makes_two_runs(tmp_path: Path) -> None:
    def emit(tracer: Tracer) -> None:
        for name in ("first", "second"):
            with tracer.start_as_current_span(name, attributes={"gen_ai.operation.name": "invoke_agent"}):
                pass

    runs = convert_otlp(_protobuf(_spans(emit)), content_type=PB)
    assert [run.run["title"] for run in runs] == ["first", "second"]
    assert len({run.run["id"] for run in runs}) == 2
    flat = flatten_spans(decode_otlp(_protobuf(_spans(emit)), content_type=PB))
    with pytest.raises(ConversionError, match="one run is one trace"):
        convert_trace(flat)
    # The receiver's path: one trace's buffered spans, no original -> the spans are the kept source.
    run = convert_trace(flat[:1])
    assert {role for _d, _m, role in run.blobs.values()} == {"source-trace"}
    _bundle(run, tmp_path / "one")


def test_converting_the_same_bytes_twice_gives_identical_bundles(
    genai_spans: tuple[ReadableSpan, ...], tmp_path: Path
) -> None:
    data = _protobuf(genai_spans)
    for n in (1, 2):
        [run] = convert_otlp(data, content_type=PB)
        write_bundle(run, (tmp_path / f"b{n}").mkdir() or tmp_path / f"b{n}")
    files = sorted(p.relative_to(tmp_path / "b1") for p in (tmp_path / "b1").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b2") for p in (tmp_path / "b2").rglob("*") if p.is_file())
    for name in files:
        assert (tmp_path / "b1" / name).read_bytes() == (tmp_path / "b2" / name).read_bytes()


# ------------------------------------------------------------------------------ spans named by their bytes


def _two_services(tmp_path: Path) -> bytes:
    """One export holding two services' spans (two resources, two scopes each): what a collector forwards."""
    requests = []
    for service in ("planner", "executor"):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        for scope in ("lib.a", "lib.b"):
            tracer = provider.get_tracer(scope, "3.1")
            with tracer.start_as_current_span(
                f"execute_tool {service}-{scope}",
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "unmapped.x": scope},
            ):
                pass
        provider.shutdown()
        requests.append(encode_spans(exporter.get_finished_spans()).SerializeToString())
    return b"".join(requests)  # two serialized requests, concatenated: one request (repeated fields append)


def test_every_span_is_named_by_its_bytes_under_its_own_resource_and_scope(tmp_path: Path) -> None:
    data = _two_services(tmp_path)
    ranges = span_byte_ranges(data)
    assert ranges is not None and len(ranges) == 4
    runs = convert_otlp(data, content_type=PB)
    assert len(runs) == 4  # four root spans, four traces
    for run in runs:
        assert {role for _d, _m, role in run.blobs.values()} == {"source-otlp"}
        [started] = _by_kind(run.events, "attempt.started")
        shown = _source_span(run, started)
        service, scope = shown["span"]["name"].removeprefix("execute_tool ").split("-", 1)
        assert shown["resource"]["service.name"] == service
        assert shown["scope"] == {"name": scope, "version": "3.1", "attributes": {}}
        assert shown["span"]["attributes"]["unmapped.x"] == scope


def test_a_span_whose_ids_are_not_written_first_is_still_found(genai_spans: tuple[ReadableSpan, ...]) -> None:
    request = ExportTraceServiceRequest.FromString(_protobuf(genai_spans))
    span = request.resource_spans[0].scope_spans[0].spans[0]
    ids = type(span)(trace_id=span.trace_id, span_id=span.span_id)
    rest = type(span)()
    rest.CopyFrom(span)
    rest.ClearField("trace_id")
    rest.ClearField("span_id")
    # The same span, its ids written last (a message's fields may come in any order; a parser merges them).
    reordered = rest.SerializeToString() + ids.SerializeToString()
    assert type(span).FromString(reordered) == span
    scope = request.resource_spans[0].scope_spans[0].scope.SerializeToString()
    scope_spans = b"\x0a" + _len(scope) + scope + b"\x12" + _len(reordered) + reordered
    resource_spans = b"\x12" + _len(scope_spans) + scope_spans
    body = b"\x0a" + _len(resource_spans) + resource_spans
    ranges = span_byte_ranges(body)
    assert ranges is not None
    [(key, at)] = ranges.items()
    assert key == (span.trace_id.hex(), span.span_id.hex())
    assert body[at.span[0] : at.span[0] + at.span[1]] == reordered


def _len(data: bytes) -> bytes:
    out, n = b"", len(data)
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def test_an_export_a_byte_range_cannot_stand_for_keeps_its_spans_as_json(
    genai_spans: tuple[ReadableSpan, ...], tmp_path: Path
) -> None:
    data = _protobuf(genai_spans)
    # A second `resource` in one ResourceSpans: a parser merges the two, so no one range holds the resource.
    request = ExportTraceServiceRequest.FromString(data)
    rs = request.resource_spans[0].SerializeToString() + b"\x0a\x00"
    body = b"\x0a" + _len(rs) + rs
    assert ExportTraceServiceRequest.FromString(body) == request
    assert span_byte_ranges(body) is None
    [run] = convert_otlp(body, content_type=PB)
    assert {"source-trace", "source-otlp"} <= {role for _d, _m, role in run.blobs.values()}
    for event in _bundle(run, tmp_path / "b"):
        assert "bytes" not in event["otlp"]
        assert _source_span(run, event)["span"]["span_id"] == event["otlp"]["span"]
    # Spans handed over with an original they did not come from are kept as JSON too, never misnamed.
    other = _protobuf(_spans(lambda tracer: tracer.start_span("elsewhere").end()))
    flat = flatten_spans(decode_otlp(data, content_type=PB))
    run = convert_trace(flat, original=other)
    assert "source-trace" in {role for _d, _m, role in run.blobs.values()}
    assert all("bytes" not in event["otlp"] for event in run.events)


def test_truncated_or_odd_wire_data_gives_no_ranges(genai_spans: tuple[ReadableSpan, ...]) -> None:
    data = _protobuf(genai_spans)
    assert span_byte_ranges(data[:-3]) is None
    assert span_byte_ranges(b"\x0b\x00") is None  # a group: OTLP has none
    assert span_byte_ranges(b"\x00") is None  # field number 0
    assert span_byte_ranges(b"") == {}
    with pytest.raises(ConversionError, match="do not decode"):
        source_span_from_bytes(b"\x0a\xff", None, None)


# ------------------------------------------------------------------------------------------------------ bad input


def _refusal(data: bytes, media: str) -> str:
    with pytest.raises(ConversionError) as caught:
        convert_otlp(data, content_type=media)
    message = str(caught.value)
    assert message and "\n" not in message and "Traceback" not in message
    return message


def test_bad_input_is_refused_in_one_line(genai_spans: tuple[ReadableSpan, ...]) -> None:
    data = _protobuf(genai_spans)
    assert "truncated or corrupt" in _refusal(data[: len(data) // 2], PB)
    assert "not an OTLP ExportTraceServiceRequest" in _refusal(b"\xff\x00garbage\x13" * 50, PB)
    assert "does not parse" in _refusal(b'{"resourceSpans": [', "application/json")
    assert "has no resourceSpans" in _refusal(b'{"hello": 1}', "application/json")
    assert "is a list, not an object" in _refusal(b"[]", "application/json")
    assert "resourceSpans must be a list" in _refusal(b'{"resourceSpans": {}}', "application/json")
    assert "is not OTLP" in _refusal(data, "text/plain")
    assert "holds no spans" in _refusal(b"", PB)
    doc = json.loads(sdk_json(genai_spans))
    del doc["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"]
    assert "spans[1].traceId is missing" in _refusal(json.dumps(doc).encode(), "application/json")
    doc = json.loads(sdk_json(genai_spans))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "xyz"
    assert "spans[0].spanId is not a 8-byte id" in _refusal(json.dumps(doc).encode(), "application/json")
    doc = json.loads(sdk_json(genai_spans))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"] = {"intValue": "ten"}
    assert "intValue must be an integer" in _refusal(json.dumps(doc).encode(), "application/json")
    doc = json.loads(sdk_json(genai_spans))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "yesterday"
    assert "startTimeUnixNano must be an integer" in _refusal(json.dumps(doc).encode(), "application/json")


def test_only_otlp_is_taken_for_otlp(genai_spans: tuple[ReadableSpan, ...]) -> None:
    data = _protobuf(genai_spans)
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("trace.pb", data)
    assert looks_like_otlp(data) == "protobuf"
    assert looks_like_otlp(sdk_json(genai_spans)) == "json"
    for other in (
        b"",
        gzip.compress(data),
        zipped.getvalue(),
        data[: len(data) // 2],
        b"\n" + b"plain text that starts with a newline\n" * 20,
        bytes(range(256)) * 40,
        b'{"log": {"entries": []}}',
        b'{"format": "n17q.run-bundle/1"}',
        b"\x0a\x00",  # an export with one empty resourceSpans: no span
    ):
        assert looks_like_otlp(other) is None, other[:20]
