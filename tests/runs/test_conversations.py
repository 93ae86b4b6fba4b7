"""Model calls as conversations (issue 38 point 2; runs/conversations.py, docs/facts.md "Model calls, tokens and cost").

The traces come from the real producers (tests/data/producers, ORIGIN.md: opentelemetry-instrumentation-openai-v2,
openinference-instrumentation-openai and -langchain; a real Inspect eval's log, tests/engine/inspect_producer.py).
What each conversation must show is read from the producer's own file (its messages, tool calls, tool definitions
and token counts), not restated here; the native replay's is the example agent's (examples/mcp_openai_agent) as the
engine replayed it in the sandbox."""

from __future__ import annotations

import io
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from n17q_engine.facts import models_label
from n17q_engine.pricing import price_table, run_cost
from runs.conversations import WINDOW, conversation_of
from runs.event_detail import event_detail_build
from runs.facts import facts_of
from runs.models import Event, Run
from tests.engine.inspect_logs import produce_once
from tests.engine.test_format_otlp import _protobuf, _spans

pytestmark = pytest.mark.django_db
PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
PRICES = price_table(
    {
        "gpt-4o-mini": {"input": "0.15", "output": "0.60", "currency": "USD"},
        "mockllm/model": {"input": "1", "output": "2", "currency": "USD"},
    }
)


@pytest.fixture(scope="module")
def inspect_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return produce_once(tmp_path_factory)["eval"]


def _import(path: Path) -> list[Run]:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    answer = json.loads(out.getvalue())
    ids = [r["run"] for r in answer["runs"]] if "runs" in answer else [answer["run"]]
    return [Run.objects.get(run_id=i) for i in ids]


def _proposals(run: Run) -> list[Event]:
    return list(Event.objects.filter(run=run, kind="model.proposal").order_by("seq"))


def _chat_spans(name: str) -> list[dict[str, Any]]:
    """The producer's model spans with their attributes, in time order."""
    data = json.loads((PRODUCERS / name).read_text())
    spans = []
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                attrs = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                if attrs.get("gen_ai.operation.name") == "chat" or attrs.get("openinference.span.kind") == "LLM":
                    spans.append({"start": int(span["startTimeUnixNano"]), "attrs": attrs})
    return sorted(spans, key=lambda s: s["start"])


def _roles(conv) -> list[str]:
    return [m.role for m in conv.messages]


# --- OpenTelemetry GenAI --------------------------------------------------------------------------------------------


def test_a_genai_trace_shows_each_call_s_messages_tool_calls_results_tokens_and_cost():
    [run] = _import(PRODUCERS / "genai-openai.otlp.json")
    spans = _chat_spans("genai-openai.otlp.json")
    proposals = _proposals(run)
    assert len(proposals) == len(spans) == 3
    for event, span in zip(proposals, spans, strict=True):
        recorded = json.loads(span["attrs"]["gen_ai.input.messages"])
        with override_settings(N17Q_MODEL_PRICES=PRICES):
            conv = conversation_of(run, event)
        assert conv is not None and conv.origin == "recorded" and conv.model == "gpt-4o-mini"
        # One message per recorded message, a tool message per tool_call_response part.
        expected = []
        for m in recorded:
            responses = [p for p in m["parts"] if p.get("type") == "tool_call_response"]
            expected += ["tool"] * len(responses) if responses else [m["role"]]
        assert _roles(conv) == expected and conv.total == len(expected)
        tokens_in, tokens_out = (
            int(span["attrs"]["gen_ai.usage.input_tokens"]),
            int(span["attrs"]["gen_ai.usage.output_tokens"]),
        )
        assert (conv.tokens_in, conv.tokens_out) == (tokens_in, tokens_out)
        assert conv.cost is not None
        assert conv.cost.amount == (Decimal(tokens_in) * Decimal("0.15") + Decimal(tokens_out) * Decimal("0.60")) / (
            10**6
        )
        # openai-v2 records no tool definitions: said, never shown as "no tools".
        assert conv.tools is None and "instrumentation records no tool definitions" in conv.tools_note
        answer = json.loads(span["attrs"]["gen_ai.output.messages"])[0]
        calls = [p for p in answer["parts"] if p["type"] == "tool_call"]
        assert [c.name for c in conv.completion.tool_calls] == [c["name"] for c in calls]
        assert [json.loads(c.arguments) for c in conv.completion.tool_calls] == [c["arguments"] for c in calls]
        texts = [p["content"] for p in answer["parts"] if p["type"] == "text"]
        assert (conv.completion.text or "") == "".join(texts)
    # The first call's tool calls are the run's own tool.call events, with their results.
    first = conversation_of(run, proposals[0])
    linked = [c for c in first.completion.tool_calls if c.call_event]
    assert linked, "no tool call linked to the run's tool.call events"
    for call in linked:
        body = Event.objects.get(run=run, event_id=call.call_event).body
        assert body["tool"] == call.name and body["tool_call"] == call.id
        result = Event.objects.get(run=run, event_id=call.result_event).body
        assert result["call_id"] == call.call_event and result["outcome"] == call.outcome
    # The tool results in the last call's messages are linked back to the calls they answer.
    last = conversation_of(run, proposals[-1])
    answered = [m for m in last.messages if m.role == "tool"]
    assert answered and all(m.answers for m in answered)
    assert any(m.call_event for m in answered)


def test_without_a_price_the_call_and_the_run_say_what_was_not_evaluated_never_zero():
    [run] = _import(PRODUCERS / "genai-openai.otlp.json")
    with override_settings(N17Q_MODEL_PRICES={}):
        conv = conversation_of(run, _proposals(run)[0])
        assert conv.cost is None and conv.cost_note == "no price for gpt-4o-mini: cost not evaluated"
        label = models_label(facts_of(run)["models"], {})
    assert "cost not evaluated for 3 calls: no price for gpt-4o-mini (3 calls)" in label
    assert " 0.000000 " not in label


def test_the_run_s_model_facts_count_calls_and_tokens_as_the_spans_record_them(role_user):
    [run] = _import(PRODUCERS / "genai-openai.otlp.json")
    spans = _chat_spans("genai-openai.otlp.json")
    models = facts_of(run)["models"]
    tokens_in = sum(int(s["attrs"]["gen_ai.usage.input_tokens"]) for s in spans)
    tokens_out = sum(int(s["attrs"]["gen_ai.usage.output_tokens"]) for s in spans)
    assert (
        models["model_calls"]
        == len(spans)
        == json.loads((PRODUCERS / "manifest.json").read_text())["files"]["genai-openai.otlp.json"]["model_calls"]
    )
    assert (models["tokens_in"], models["tokens_out"]) == (tokens_in, tokens_out)
    cost = run_cost(models, PRICES)
    assert cost.amount == (Decimal(tokens_in) * Decimal("0.15") + Decimal(tokens_out) * Decimal("0.60")) / 10**6
    # The run page's header says the same, from the same facts.
    with override_settings(N17Q_MODEL_PRICES=PRICES):
        client = Client()
        client.force_login(role_user("viewer", "vic"))
        page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f"{tokens_in} tokens in, {tokens_out} out; cost {cost.text()}" in page


# --- OpenInference ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["openinference-openai.otlp.json", "openinference-langchain.otlp.json"])
def test_an_openinference_trace_shows_the_tools_offered_and_the_conversation(name):
    [run] = _import(PRODUCERS / name)
    spans = _chat_spans(name)
    proposals = _proposals(run)
    assert len(proposals) == len(spans) == 3
    with override_settings(N17Q_MODEL_PRICES=PRICES):
        convs = [conversation_of(run, e) for e in proposals]
    for conv, span in zip(convs, spans, strict=True):
        attrs = span["attrs"]
        recorded_tools = sorted(
            json.loads(v)["function"]["name"] if "function" in json.loads(v) else json.loads(v)["name"]
            for k, v in attrs.items()
            if k.startswith("llm.tools.") and k.endswith(".tool.json_schema")
        )
        assert recorded_tools, f"{name}: the producer recorded no tools"
        assert sorted(t.name for t in conv.tools) == recorded_tools
        assert all(t.parameters for t in conv.tools)
        roles = [v for k, v in attrs.items() if k.startswith("llm.input_messages.") and k.endswith(".message.role")]
        assert len(conv.messages) == len(roles)
        assert (conv.tokens_in, conv.tokens_out) == (
            int(attrs["llm.token_count.prompt"]),
            int(attrs["llm.token_count.completion"]),
        )
        assert conv.cost is not None
    # The last call answers in words, after the tool results it was given.
    assert convs[-1].completion.text and not convs[-1].completion.tool_calls
    assert "tool" in _roles(convs[-1]) and "assistant" in _roles(convs[-1])


# --- Inspect ---------------------------------------------------------------------------------------------------------


def test_an_inspect_log_shows_its_model_calls_with_tools_tokens_and_links(inspect_log):
    runs = _import(inspect_log)
    run = next(r for r in runs if Event.objects.filter(run=r, kind="model.proposal").count() > 1)
    proposals = _proposals(run)
    with override_settings(N17Q_MODEL_PRICES=PRICES):
        convs = [conversation_of(run, e) for e in proposals]
    for event, conv in zip(proposals, convs, strict=True):
        charge = Event.objects.filter(run=run, kind="budget.charged", seq__gt=event.seq).order_by("seq").first().body
        assert (conv.tokens_in, conv.tokens_out) == (charge["input_tokens"], charge["output_tokens"])
        assert conv.model == "mockllm/model" and conv.cost is not None  # the provider prefix is kept in the name
        assert {t.name for t in conv.tools} == {"add", "shell"}
        assert conv.messages[0].role == "user" and conv.messages[0].text.startswith("What is 1+2")
    # The second call sees the first call's tool call and its result, each linked to the run's events.
    second = convs[1]
    assert _roles(second) == ["user", "assistant", "tool"]
    [call] = second.messages[1].tool_calls
    assert call.name == "add" and json.loads(call.arguments) == {"x": 1, "y": 2}
    assert call.call_event and Event.objects.get(run=run, event_id=call.call_event).body["tool"] == "add"
    result = second.messages[2]
    assert result.answers == "add" and result.text == "3" and result.result_event
    run_cost_now = run_cost(facts_of(run)["models"], PRICES)
    assert run_cost_now.amount is not None and run_cost_now.not_evaluated == ()


# --- a native replay ------------------------------------------------------------------------------------------------


NATIVE = Path(__file__).resolve().parents[2] / "examples" / "mcp_openai_agent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_a_native_replay_s_model_chat_call_shows_its_request_and_completion(tmp_path):
    from n17q_engine.replay_suite import load_suite, run_case
    from tests.engine.test_agent_decider import _isolation_or_skip

    _isolation_or_skip()
    [case] = [c for c in load_suite(NATIVE / "replays.n17q.toml") if c.name == "story-001"]
    outcome = run_case(case, "start", keep=tmp_path)
    assert outcome.output is not None, outcome.message
    [bundle] = list(tmp_path.iterdir())
    # A replay's run id holds '~' (reserved for the worker's runs): imported by hand, it is renamed.
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["run"]["id"] = manifest["run"]["id"].replace("~", "-")
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    [run] = _import(bundle)
    chats = list(Event.objects.filter(run=run, kind="tool.call", body__tool="model.chat").order_by("seq"))
    assert chats
    fixtures = {
        json.dumps(f["request"]["messages"], sort_keys=True): f
        for f in json.loads((NATIVE / "stories/001-email-delivery/scenario/fixtures.json").read_text())
        if f["tool"] == "model.chat"
    }
    for event in chats:
        conv = conversation_of(run, event)
        assert conv.origin == "native" and conv.model == event.body["request"]["model"]
        assert conv.total == len(event.body["request"]["messages"])
        assert [m.role for m in conv.messages] == [m["role"] for m in event.body["request"]["messages"]]
        assert conv.tools and {t.name for t in conv.tools} == {
            t["function"]["name"] for t in event.body["request"]["tools"]
        }
        assert conv.result_event is not None
        fixture = fixtures[json.dumps(event.body["request"]["messages"], sort_keys=True)]
        answer = fixture["response"]["body"]["choices"][0]["message"]
        assert (conv.completion.text or None) == answer.get("content")
        assert [c.name for c in conv.completion.tool_calls] == [
            c["function"]["name"] for c in answer.get("tool_calls") or []
        ]
        usage = fixture["response"]["body"]["usage"]
        assert (conv.tokens_in, conv.tokens_out) == (usage["prompt_tokens"], usage["completion_tokens"])
    models = facts_of(run)["models"]
    assert models["calls_from"] == "model.chat" and models["model_calls"] == len(chats)


# --- bounds ----------------------------------------------------------------------------------------------------------


def test_a_10000_message_5_mb_conversation_shows_a_bounded_window_in_pinned_queries(
    tmp_path, role_user, django_assert_max_num_queries
):
    filler = "x" * 480
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "parts": [{"type": "text", "content": f"message {i} {filler}"}]}
        for i in range(10_000)
    ]

    def emit(tracer):
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 1_200_000,
                "gen_ai.usage.output_tokens": 3,
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "done"}], "finish_reason": "stop"}]
                ),
            },
        ):
            pass

    path = tmp_path / "trace.pb"
    path.write_bytes(_protobuf(_spans(emit)))
    assert path.stat().st_size > 5 * 1024 * 1024
    [run] = _import(path)
    [event] = _proposals(run)
    assert "input_messages_blob" in event.body
    with CaptureQueriesContext(connection) as queries:
        conv = conversation_of(run, event)
    assert len(queries) <= 3  # the token charge, the blob row; no tool call to link
    assert conv.total == 10_000 and conv.hidden == 10_000 - 2 * WINDOW
    assert [m.position for m in conv.head] == list(range(1, WINDOW + 1))
    assert [m.position for m in conv.tail] == list(range(10_000 - WINDOW + 1, 10_001))
    assert conv.tail[-1].text.startswith("message 9999 ")
    assert conv.completion.text == "done"
    client = Client()
    client.force_login(role_user("viewer", "vic"))
    with django_assert_max_num_queries(30):
        response = client.get(f"/runs/{run.run_id}/events/{event.event_id}/", HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert response.status_code == 200
    assert f"{10_000 - 2 * WINDOW} messages not shown here" in page
    assert page.count('class="conv-msg ') == 2 * WINDOW + 1


def test_the_detail_panel_of_a_call_costs_the_same_queries_however_long_the_conversation(tmp_path):
    """The panel of a model call: its query count does not grow with the conversation (300 messages or 3,000, both
    held as a blob)."""
    counts = []
    for n in (300, 3000):
        messages = [{"role": "user", "parts": [{"type": "text", "content": f"m{i}"}]} for i in range(n)]

        def emit(tracer, messages=messages):
            with tracer.start_as_current_span(
                "chat gpt-4o-mini",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.input.messages": json.dumps(messages),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": []}]),
                },
            ):
                pass

        path = tmp_path / f"trace-{n}.pb"
        path.write_bytes(_protobuf(_spans(emit)))
        [run] = _import(path)
        [event] = _proposals(run)
        facts_of(run)
        with CaptureQueriesContext(connection) as queries:
            detail = event_detail_build(run, event.event_id)
        assert detail.conversation.total == n
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a_proposal_that_recorded_no_messages_says_so_and_shows_what_it_proposed(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    run = Run.objects.get(run_id="run-003-review-request")
    event = Event.objects.filter(run=run, kind="model.proposal").order_by("seq").first()
    assert event is not None
    conv = conversation_of(run, event)
    assert conv.origin == "proposal-only" and conv.total == 0
    assert any("recorded no messages" in n for n in conv.notes)
    assert conv.completion is not None and conv.completion.tool_calls[0].name == event.body["proposal"]["tool"]
    assert conv.tokens_in is None and conv.cost_note == "tokens not recorded for this call: cost not evaluated"
    models = facts_of(run)["models"]
    demo_prices = price_table(
        json.loads((Path(__file__).resolve().parents[2] / "docs/examples/model-prices.json").read_text())
    )
    assert run_cost(models, demo_prices).amount is not None  # the demo's example table prices its story runs


@pytest.mark.seed("001", "The transcript was not the run")
def test_a_replayed_deciders_proposal_shows_the_tool_catalogue_it_was_offered(tmp_path):
    from tests.engine.test_replay import story

    out, _log = story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})
    bundle = out.write_bundle(tmp_path / "replay")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["run"]["id"] = manifest["run"]["id"].replace("~", "-")  # a worker's id, imported by hand
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    [run] = _import(bundle)
    own = [e for e in _proposals(run) if e.body["origin"].startswith("scripted:")]
    assert own
    offered = json.loads(out.blobs[own[0].body["tools_blob"]])
    conv = conversation_of(run, own[0])
    assert conv.origin == "proposal-only" and conv.tools is not None
    assert [(t.name, t.description) for t in conv.tools] == [
        (t["function"]["name"], t["function"]["description"]) for t in offered
    ]
    assert all(t.parameters.startswith("{") for t in conv.tools)  # each tool's schema, laid out
    recorded = next(e for e in _proposals(run) if e.body["origin"] == "recorded")
    conv = conversation_of(run, recorded)
    assert conv.tools is None and conv.tools_note == "not recorded: this proposal names no tool catalogue"
