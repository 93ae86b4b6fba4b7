"""A tool span whose recorded input is not an arguments object (issue 37): its tool.call's request is the arguments
the linked model proposal gave that call, the recorded input kept beside it and the reconciliation reported; an
object input is left as it is; a call with no proposal, or whose proposal disagrees, keeps its input and says why.

The committed LangChain trace (tests/data/producers, OpenInference for LangChain 0.1.80) is the real case: its
TOOL spans record `Oslo` where the model proposed `{"city": "Oslo"}`. The other spans here are written by the
OpenTelemetry SDK with OpenInference's and GenAI's attribute names and read through the real exporter's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openinference.semconv.trace import (
    MessageAttributes,
    OpenInferenceMimeTypeValues,
    OpenInferenceSpanKindValues,
    SpanAttributes,
    ToolCallAttributes,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from n17q_engine.bundle import iter_event_records, parse_manifest, verify_blobs
from n17q_engine.canonical import request_digest
from n17q_engine.formats import ConvertedRun, write_bundle
from n17q_engine.formats.otlp import MAX_TEXT_CHARS, convert_otlp
from tests.otlp_json import sdk_json

DATA = Path(__file__).resolve().parents[1] / "data" / "producers"
SA, MA, TC = SpanAttributes, MessageAttributes, ToolCallAttributes
KINDS = OpenInferenceSpanKindValues
OUT = f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_TOOL_CALLS}"


def _run(emit: Callable[[Tracer], None]) -> ConvertedRun:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "tool-inputs"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    emit(provider.get_tracer("n17q.tests", "1.0"))
    provider.shutdown()
    [run] = convert_otlp(sdk_json(exporter.get_finished_spans()), content_type="application/json")
    return run


def _llm(tracer: Tracer, calls: list[tuple[str | None, str, dict[str, Any]]]) -> None:
    """An OpenInference LLM span whose answer proposes `calls` (call id or None, tool, arguments)."""
    attributes: dict[str, Any] = {
        SA.OPENINFERENCE_SPAN_KIND: KINDS.LLM.value,
        SA.LLM_MODEL_NAME: "gpt-x",
        f"{SA.LLM_INPUT_MESSAGES}.0.{MA.MESSAGE_ROLE}": "user",
        f"{SA.LLM_INPUT_MESSAGES}.0.{MA.MESSAGE_CONTENT}": "weather please",
        f"{SA.LLM_OUTPUT_MESSAGES}.0.{MA.MESSAGE_ROLE}": "assistant",
    }
    for m, (call_id, tool, arguments) in enumerate(calls):
        if call_id is not None:
            attributes[f"{OUT}.{m}.{TC.TOOL_CALL_ID}"] = call_id
        attributes[f"{OUT}.{m}.{TC.TOOL_CALL_FUNCTION_NAME}"] = tool
        attributes[f"{OUT}.{m}.{TC.TOOL_CALL_FUNCTION_ARGUMENTS_JSON}"] = json.dumps(arguments)
    with tracer.start_as_current_span("llm", attributes=attributes):
        pass


def _tool(tracer: Tracer, tool: str, value: Any, *, json_input: bool = False, call_id: str | None = None) -> None:
    attributes: dict[str, Any] = {
        SA.OPENINFERENCE_SPAN_KIND: KINDS.TOOL.value,
        SA.TOOL_NAME: tool,
        SA.INPUT_VALUE: value,
        SA.OUTPUT_VALUE: "done",
    }
    if json_input:
        attributes[SA.INPUT_MIME_TYPE] = OpenInferenceMimeTypeValues.JSON.value
    if call_id is not None:
        attributes[SA.TOOL_ID] = call_id
    with tracer.start_as_current_span(tool, attributes=attributes):
        pass


def _agent(*steps: Callable[[Tracer], None]) -> Callable[[Tracer], None]:
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span("agent", attributes={SA.OPENINFERENCE_SPAN_KIND: KINDS.AGENT.value}):
            for step in steps:
                step(tracer)

    return emit


def _calls(run: ConvertedRun) -> list[dict[str, Any]]:
    return [e for e in run.events if e["kind"] == "tool.call"]


def _events_as_imported(run: ConvertedRun, root: Path) -> list[dict[str, Any]]:
    """The run written as a bundle and read back as the importer does: every event validated."""
    root.mkdir()
    write_bundle(run, root)
    verify_blobs(root, parse_manifest((root / "manifest.json").read_bytes()))
    with open(root / "events.jsonl", "rb") as fh:
        return [record.event for record in iter_event_records(fh)]


# ---------------------------------------------------------------------------------- the committed LangChain trace


def test_the_langchain_traces_tool_calls_carry_the_models_proposed_arguments_and_keep_the_recorded_input(tmp_path):
    raw = (DATA / "openinference-langchain.otlp.json").read_bytes()
    [run] = convert_otlp(raw, content_type="application/json")
    calls = _calls(run)
    assert [(c["tool"], c["request"]) for c in calls] == [
        ("get_forecast", {"city": "Oslo"}),
        ("get_forecast", {"city": "Atlantis"}),
        ("list_alerts", {"region": "north"}),
    ]
    assert [c["recorded_input"] for c in calls] == ["Oslo", "Atlantis", "north"]
    assert all(c["request_digest"] == request_digest(c["request"]) for c in calls)
    proposals = {e["id"]: e for e in run.events if e["kind"] == "model.proposal"}
    for call in calls:
        source = call["request_from"]
        assert source["proposal"] == call["proposal_id"] and source["proposal"] in proposals
        [proposed] = [p for p in proposals[source["proposal"]]["proposal"]["calls"] if p["call"] == source["call"]]
        assert proposed["arguments"] == call["request"]
    # The two answered calls name their call id through the ToolMessage LangChain recorded as their output; the
    # failed one has no output and is matched by order among its proposal's get_forecast calls.
    assert [(c.get("tool_call"), c["request_from"]["matched_by"]) for c in calls] == [
        ("call_forecast_oslo", "call id"),
        (None, "order"),
        ("call_alerts_north", "call id"),
    ]
    report = run.report.to_json()
    assert report["mapped"]["tool span input not an arguments object -> request from the proposal's arguments"] == 3
    assert any("recorded_input" in note and calls[0]["id"] in note for note in report["notes"])
    # The events, with their added fields, are what the importer accepts.
    imported = _events_as_imported(run, tmp_path / "bundle")
    assert [e["request"] for e in imported if e["kind"] == "tool.call"] == [c["request"] for c in calls]


def test_the_langchain_trace_gives_the_same_requests_and_results_as_the_same_agent_traced_on_the_openai_client():
    """The same conversation (examples/traced_agent) traced two ways: what a fixture would be keyed on and serve is
    the same, so a replayed agent's calls match either recording."""

    def seen(name: str) -> list[tuple[str, dict[str, Any], str, Any]]:
        [run] = convert_otlp((DATA / name).read_bytes(), content_type="application/json")
        results = {e["call_id"]: e for e in run.events if e["kind"] == "tool.result"}
        out = []
        for call in _calls(run):
            result = results[call["id"]]
            body = json.loads(run.blobs[result["blob"]][0]) if result["blob"] else None
            out.append((call["tool"], call["request"], result["outcome"], body))
        return out

    langchain = seen("openinference-langchain.otlp.json")
    assert langchain == seen("openinference-openai.otlp.json")
    assert langchain[0][3] == {"city": "Oslo", "summary": "storm", "high_c": 4, "low_c": -2, "wind_kmh": 70}


def test_the_langchain_tool_error_says_its_message_and_keeps_the_whole_traceback():
    [run] = convert_otlp((DATA / "openinference-langchain.otlp.json").read_bytes(), content_type="application/json")
    [failed] = [e for e in run.events if e["kind"] == "tool.result" and e["outcome"] != "ok"]
    assert failed["error"]["type"] == "agent.UnknownCity"
    assert failed["error"]["message"] == "no forecast for 'Atlantis'"
    whole = run.blobs[failed["error"]["description_blob"]][0].decode()
    assert whole.startswith("UnknownCity(\"no forecast for 'Atlantis'\")Traceback (most recent call last):")
    assert whole.rstrip().endswith("agent.UnknownCity: no forecast for 'Atlantis'")


# ------------------------------------------------------------------------------------------------ the rules


def test_a_tool_input_that_is_already_an_object_is_kept_as_recorded():
    """Even when it differs from what the model proposed: the span's own arguments object is what ran."""
    run = _run(
        _agent(
            lambda t: _llm(t, [(None, "weather", {"city": "Paris"})]),
            lambda t: _tool(t, "weather", json.dumps({"city": "Lyon"}), json_input=True),
        )
    )
    [call] = _calls(run)
    assert call["request"] == {"city": "Lyon"} and call["proposal_id"] is not None
    assert not {"recorded_input", "request_from", "request_unreconciled"} & set(call)
    assert not any("arguments object" in note for note in run.report.notes)


def test_a_call_whose_input_disagrees_with_its_proposal_keeps_its_input_and_says_so():
    run = _run(
        _agent(
            lambda t: _llm(t, [(None, "weather", {"city": "Paris"})]),
            lambda t: _tool(t, "weather", "Berlin"),
        )
    )
    [call] = _calls(run)
    assert call["request"] == {"arguments": "Berlin"} and call["recorded_input"] == "Berlin"
    assert call["proposal_id"] is not None and "request_from" not in call
    assert "not one of the proposed arguments' values" in call["request_unreconciled"]
    report = run.report.to_json()
    assert any(key.startswith("tool span input not an arguments object, kept") for key in report["unmapped"])
    assert any(call["id"] in note and "will not match" in note for note in report["notes"])


def test_a_call_with_no_proposal_keeps_its_input_and_says_so():
    run = _run(_agent(lambda t: _tool(t, "weather", "Paris")))
    [call] = _calls(run)
    assert call["request"] == {"arguments": "Paris"} and call["recorded_input"] == "Paris"
    assert call["proposal_id"] is None
    assert call["request_unreconciled"] == "no model proposal of this call is in the trace"


def test_a_call_its_proposal_has_no_call_left_for_keeps_its_input():
    run = _run(
        _agent(
            lambda t: _llm(t, [(None, "weather", {"city": "Paris"})]),
            lambda t: _tool(t, "weather", "Paris"),
            lambda t: _tool(t, "weather", "Paris"),
        )
    )
    first, second = _calls(run)
    assert first["request"] == {"city": "Paris"}
    assert second["request"] == {"arguments": "Paris"}
    assert "request_unreconciled" in second


def test_calls_without_ids_run_out_of_the_proposed_order_each_get_their_own_arguments():
    run = _run(
        _agent(
            lambda t: _llm(t, [(None, "weather", {"city": "Oslo"}), (None, "weather", {"city": "Atlantis"})]),
            lambda t: _tool(t, "weather", "Atlantis"),
            lambda t: _tool(t, "weather", "Oslo"),
        )
    )
    assert [c["request"] for c in _calls(run)] == [{"city": "Atlantis"}, {"city": "Oslo"}]
    assert [c["request_from"]["matched_by"] for c in _calls(run)] == ["order", "order"]


def test_a_call_id_on_the_span_picks_the_proposed_call_of_that_id():
    run = _run(
        _agent(
            lambda t: _llm(t, [("c-1", "weather", {"city": "Oslo"}), ("c-2", "weather", {"city": "Oslo", "days": 3})]),
            lambda t: _tool(t, "weather", "Oslo", call_id="c-2"),
        )
    )
    [call] = _calls(run)
    assert call["request"] == {"city": "Oslo", "days": 3}
    assert call["request_from"] == {"proposal": call["proposal_id"], "call": "c-2", "matched_by": "call id"}


def test_a_number_or_a_python_literal_input_is_reconciled_too():
    run = _run(
        _agent(
            lambda t: _llm(
                t, [(None, "forecast_days", {"days": 3}), (None, "send_alert", {"region": "north", "text": "ice"})]
            ),
            lambda t: _tool(t, "forecast_days", 3),
            lambda t: _tool(t, "send_alert", "{'region': 'north', 'text': 'ice'}"),
        )
    )
    calls = _calls(run)
    assert [c["request"] for c in calls] == [{"days": 3}, {"region": "north", "text": "ice"}]
    assert [c["recorded_input"] for c in calls] == [3, "{'region': 'north', 'text': 'ice'}"]


def test_a_genai_execute_tool_span_with_a_bare_argument_takes_the_chat_spans_arguments():
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
            output = [
                {
                    "role": "assistant",
                    "parts": [{"type": "tool_call", "id": "call-1", "name": "lookup", "arguments": {"q": "tides"}}],
                }
            ]
            chat = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "m",
                "gen_ai.output.messages": json.dumps(output),
            }
            with tracer.start_as_current_span("chat m", attributes=chat):
                pass
            tool = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "call-1",
                "gen_ai.tool.call.arguments": "tides",
            }
            with tracer.start_as_current_span("execute_tool lookup", attributes=tool):
                pass

    [call] = _calls(_run(emit))
    assert call["request"] == {"q": "tides"} and call["recorded_input"] == "tides"
    assert call["request_from"]["matched_by"] == "call id"


# ------------------------------------------------------------------------------------------------ error messages


def test_a_long_error_description_keeps_its_end_and_the_whole_is_kept():
    description = "first line of the failure\n" + "x" * 2000 + "\nthe part that says what failed"

    def emit(tracer: Tracer) -> None:
        tool = {SA.OPENINFERENCE_SPAN_KIND: KINDS.TOOL.value, SA.TOOL_NAME: "weather"}
        with (
            tracer.start_as_current_span("agent", attributes={SA.OPENINFERENCE_SPAN_KIND: KINDS.AGENT.value}),
            tracer.start_as_current_span("weather", attributes=tool) as span,
        ):
            span.set_status(Status(StatusCode.ERROR, description))

    run = _run(emit)
    [result] = [e for e in run.events if e["kind"] == "tool.result"]
    message = result["error"]["message"]
    assert len(message) <= MAX_TEXT_CHARS
    assert message.startswith("first line of the failure") and message.endswith("the part that says what failed")
    assert run.blobs[result["error"]["description_blob"]][0].decode() == description


def test_a_short_error_description_is_the_message_with_no_blob():
    def emit(tracer: Tracer) -> None:
        with tracer.start_as_current_span(
            "weather", attributes={SA.OPENINFERENCE_SPAN_KIND: KINDS.TOOL.value, SA.TOOL_NAME: "weather"}
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "city unknown"))

    [result] = [e for e in _run(emit).events if e["kind"] == "tool.result"]
    assert result["error"] == {"type": None, "message": "city unknown"}
