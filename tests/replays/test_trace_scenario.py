"""Scenario from a trace (issue 37 point 3): an OTLP trace made with the real OpenTelemetry SDK is imported, a
scenario version is proposed from it (contracts inferred from its calls and the tool definitions it recorded, the
effect class asked), its tool results are staged and approved by a second reviewer, the latest version answers
them, and a replay launched from the flow compares with the trace's own run."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review import connections, intake
from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.review_rules import _OUTCOME_STATUS
from fixtures_review.services import recording_approve
from fixtures_review.staging import _stage_all, capture_digest_key
from replays.confirm import LaunchUnconfirmed
from replays.models import Replay
from replays.services import replay_execute
from replays.trace_scenarios import (
    TraceScenarioRefused,
    trace_scenario_launch,
    trace_scenario_launch_preview,
    trace_scenario_propose,
    trace_scenario_status,
)
from runs.models import Event, Run
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

ORDER_TOOL = {
    "type": "function",
    "name": "lookup_order",
    "description": "Look an order up by its id",
    "parameters": {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": "the order's id"},
            "verbose": {"type": "boolean"},
        },
        "required": ["order_id"],
    },
}


def support_trace(tracer, *, orders=("A-1", "A-2")) -> None:
    """One agent turn as the GenAI instrumentation writes it: a chat span offering `lookup_order` (its definition in
    `gen_ai.tool.definitions`) that asks for it, then the tool span; twice; plus a `refund_order` call the model
    was offered no definition of (its effect class is the trace's to ask)."""
    from opentelemetry import trace as otel_trace

    root = tracer.start_span("invoke_agent support-agent", attributes={"gen_ai.operation.name": "invoke_agent"})
    context = otel_trace.set_span_in_context(root)
    for n, order in enumerate(orders):
        call_id = f"call_{n}"
        with tracer.start_as_current_span(
            "chat gpt-4o-mini",
            context=context,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": f"where is order {order}?"}]}]
                ),
                "gen_ai.tool.definitions": json.dumps([ORDER_TOOL]),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [
                                {
                                    "type": "tool_call",
                                    "id": call_id,
                                    "name": "lookup_order",
                                    "arguments": {"order_id": order},
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
                "gen_ai.tool.call.arguments": json.dumps({"order_id": order}),
                "gen_ai.tool.call.result": json.dumps({"status": "shipped", "order_id": order}),
            },
        ):
            pass
    with tracer.start_as_current_span(
        "execute_tool refund_order",
        context=context,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund_order",
            "gen_ai.tool.call.id": "call_r",
            "gen_ai.tool.call.arguments": json.dumps({"order_id": orders[0], "amount": 12}),
            "gen_ai.tool.call.result": json.dumps({"refund": "r-1", "state": "refunded"}),
        },
    ):
        pass
    root.end()


@pytest.fixture
def trace_run(tmp_path, capsys) -> Run:
    """The trace exported by the real OpenTelemetry SDK, its file imported through `import_run`."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    support_trace(provider.get_tracer("n17q-tests"))
    provider.shutdown()
    path = tmp_path / "spans.pb"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())
    call_command("import_run", str(path), "--json")
    answer = json.loads(capsys.readouterr().out)
    run = Run.objects.get(run_id=answer["runs"][0]["run"])
    assert run.scenario_name == ""
    return run


def stage_results(run: Run, user, *, connection: str = "sim:review-requests", revision: int = 1) -> list:
    """Stage the run's tool results through the existing intake with the contract revision given, as the
    stageselect door (issue 37 point 1) will: until it is merged, `run_recordings_stage` takes the converted run's
    `contract_revision: 0` and intake refuses it."""
    calls = {e.body["id"]: e.body for e in Event.objects.filter(run=run, kind="tool.call")}
    items = []
    for event in Event.objects.filter(run=run, kind="tool.result").order_by("seq"):
        body = event.body
        call = calls[body["call_id"]]
        mutation = call["tool"] == "refund_order"
        capture = intake.tool_call_capture(
            scenario="support-orders",
            tool=call["tool"],
            contract_revision=revision,
            connection=connection,
            captured_at="2026-07-01T09:00:00Z",
            source_revision=None,
            effect_class="mutation" if mutation else "read",
            args=call["request"],
            status=_OUTCOME_STATUS[body["outcome"]],
            body=json.loads(_body(run, body)),
            proposed_transition=(
                {
                    "resource": "refund:r-1",
                    "revision_before": None,
                    "revision_after": 1,
                    "change": {"state": "refunded"},
                }
                if mutation
                else None
            ),
        )
        red = intake.intake(capture, digest_key=capture_digest_key())
        admitted = connections.capture_admit(red.capture, door="run-result", actor=user, token=None)
        items.append(
            dict(
                red=red,
                admitted=admitted,
                origin=StagedRecording.Origin.RUN_RESULT,
                outcome=body["outcome"],
                source=(run.run_id, body["id"]),
            )
        )
    return _stage_all(items, actor=user, token=None)


def _body(run: Run, result: dict) -> bytes:
    from fixtures_review.copying import _recorded_body

    value = _recorded_body(run, result.get("blob"))
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def test_proposing_asks_the_effect_class_the_trace_does_not_say_and_mints_version_1(trace_run, role_user):
    operator = role_user("operator", "op")
    with pytest.raises(TraceScenarioRefused, match=r"^effect class needed for lookup_order, refund_order: say "):
        trace_scenario_propose(run=trace_run, name="support-orders", user=operator)
    with pytest.raises(TraceScenarioRefused, match=r"^effect class needed for refund_order: say "):
        trace_scenario_propose(run=trace_run, name="support-orders", effect_classes={"lookup_order": "read"})
    assert not ScenarioVersion.objects.filter(name="support-orders").exists()
    proposal = trace_scenario_propose(
        run=trace_run,
        name="support-orders",
        effect_classes={"refund_order": "mutation", "lookup_order": "read"},
        user=operator,
    )
    version = proposal.version
    assert version.ref == "support-orders@1" and proposal.created and version.source == "trace"
    meta = version.scenario_json
    assert meta["source_runs"] == [trace_run.run_id] and meta["world"] == "support-orders-w1"
    contracts = {c["tool"]: c for c in json.loads(version.files["contracts.json"])}
    assert set(contracts) == {"lookup_order", "refund_order", "model.chat"}
    assert contracts["lookup_order"]["fields"] == {
        "order_id": {"type": "string"},
        "verbose": {"type": "boolean", "required": False},
    }
    assert contracts["refund_order"]["effect_class"] == "mutation"
    assert contracts["refund_order"]["fields"] == {"amount": {"type": "integer"}, "order_id": {"type": "string"}}
    assert version.fixture_items == []
    # Again: the same contracts, recorded from this run already: nothing new.
    again = trace_scenario_propose(
        run=trace_run,
        name="support-orders",
        effect_classes={"refund_order": "mutation", "lookup_order": "read"},
        user=operator,
    )
    assert again.version.pk == version.pk and not again.created


def propose(run: Run, user) -> ScenarioVersion:
    return trace_scenario_propose(
        run=run, name="support-orders", effect_classes={"refund_order": "mutation", "lookup_order": "read"}, user=user
    ).version


def test_the_flow_from_a_trace_to_a_replay_that_compares_with_it(trace_run, role_user, client, reviewed_connections):
    operator, reviewer = role_user("operator", "op"), role_user("reviewer", "rev")
    propose(trace_run, operator)
    status = trace_scenario_status(trace_run)
    assert status["scenario"] == "support-orders" and status["trace"] == {
        "tool_calls": 3,
        "tool_results": 3,
        "model_calls": 2,
        "tools": {"lookup_order": 2, "refund_order": 1},
    }
    assert status["latest"]["ref"] == "support-orders@1" and status["latest"]["answered"] == 0
    assert status["mutations"] == ["refund_order"] and not status["ready"]
    assert any("3 of the run's 3 tool calls have no approved fixture" in b for b in status["blocks"])

    staged = stage_results(trace_run, operator)
    assert trace_scenario_status(trace_run)["recordings"]["staged"] == 3
    for recording in staged:
        recording_approve(recording=recording, user=reviewer)
    status = trace_scenario_status(trace_run)
    assert status["recordings"] == {
        "staged": 0,
        "approved": 3,
        "rejected": 0,
        "model_calls": {"staged": 0, "approved": 0, "rejected": 0},
    }
    assert status["latest"]["ref"] == "support-orders@4" and status["latest"]["answered"] == 3
    # The model calls are not answered yet (issue 37 point 2 stages them): an agent would stop at its first one.
    assert status["blocks"] == [
        "support-orders@4 holds no model answer: an agent replay stops at its first model call until the run's "
        "model calls are staged and approved as model.chat recordings"
    ]

    # The launch goes through the replays app's confirmation: the summary first, then its digest.
    preview = trace_scenario_launch_preview(trace_run, agent=None)
    assert preview.version.ref == "support-orders@4"
    # The converted calls' revision 0 is looked up under the pinned contract, as the replay will look them up.
    assert preview.summary["fixtures"]["answered"] == 3 and preview.summary["fixtures"]["missing"] == []
    with pytest.raises(LaunchUnconfirmed):
        trace_scenario_launch(run=trace_run, agent=None, user=operator, digest=None)
    replay, created = trace_scenario_launch(run=trace_run, agent=None, user=operator, digest=preview.digest)
    assert created and replay.source_run_id == trace_run.pk and replay.decider == "recorded"
    assert replay.scenario_version.ref == "support-orders@4" and replay.mode == "counterfactual"
    replay = replay_execute(replay.pk)
    assert replay.state == Replay.State.FINISHED, (replay.state, replay.error)
    assert replay.run is not None and replay.run.parent_id == trace_run.pk and replay.missing == [], json.dumps(
        replay.missing, indent=1
    )
    answered = [e.body for e in Event.objects.filter(run=replay.run, kind="tool.result")]
    assert sorted((r["origin"], r["outcome"]) for r in answered) == [("fixture", "ok")] * 3, answered

    client.force_login(operator)
    page = client.get(reverse("replays:replay-comparison", args=[replay.pk]))
    assert page.status_code == 200
    assert f"Comparison: <code>{trace_run.run_id}</code> against its counterfactual" in page.content.decode()
    report = page.context["report"]
    assert report.source.pk == trace_run.pk and report.replay_run.pk == replay.run.pk
    # Every recorded tool result of the trace is a row the replay is compared with.
    tools = next(layer for layer in report.layers if layer.key == "tools")
    assert len(tools.rows) == 3 and all(row.source for row in tools.rows), [
        (r.source_text, r.replay_text, r.note) for r in tools.rows
    ]
    assert [r.same for r in tools.rows] == [True] * 3, [(r.source, r.replay) for r in tools.rows]


def scenario_command(capsys, run: Run, *args: str) -> dict:
    call_command("scenario_from_run", run.run_id, *args, "--json")
    return json.loads(capsys.readouterr().out)


def test_the_command_reports_proposes_and_launches(trace_run, role_user, capsys, reviewed_connections):
    operator, reviewer = role_user("operator", "op"), role_user("reviewer", "rev")
    status = scenario_command(capsys, trace_run)["status"]
    assert status["scenario"] is None and status["latest"] is None
    assert status["contracts"]["asked"] == ["lookup_order", "refund_order"]
    fields = {f["name"]: f for f in status["contracts"]["tools"][0]["fields"]}
    assert fields["order_id"]["source"] == "definitions and observed in 2 of 2 calls" and fields["order_id"]["required"]
    assert fields["verbose"]["source"] == "definitions" and not fields["verbose"]["required"]
    with pytest.raises(CommandError, match=r"^effect class needed for lookup_order, refund_order"):
        call_command("scenario_from_run", trace_run.run_id, "--scenario", "support-orders", "--propose")
    with pytest.raises(CommandError, match=r"--effect-class 'lookup_order=write': write TOOL=read or TOOL=mutation"):
        call_command("scenario_from_run", trace_run.run_id, "--effect-class", "lookup_order=write")
    out = scenario_command(
        capsys,
        trace_run,
        *("--scenario", "support-orders", "--propose", "--user", "op"),
        *("--effect-class", "lookup_order=read", "--effect-class", "refund_order=mutation"),
    )
    assert out["proposed"]["scenario"] == "support-orders@1" and out["proposed"]["created"]
    assert out["status"]["scenario"] == "support-orders" and out["status"]["latest"]["answered"] == 0
    for recording in stage_results(trace_run, operator):
        recording_approve(recording=recording, user=reviewer)
    with pytest.raises(CommandError, match=r"agent:nobody': no agent is registered under that name"):
        call_command("scenario_from_run", trace_run.run_id, "--launch", "nobody")
    out = scenario_command(capsys, trace_run, "--launch", "recorded", "--inline", "--user", "op")
    assert out["replay"]["replay_state"] == "finished" and out["replay"]["missing"] == []
    assert (
        out["replay"]["scenario"] == "support-orders@4" and out["replay"]["summary"]["source_run"] == trace_run.run_id
    )
    assert Replay.objects.get(pk=out["replay"]["replay"]).source_run_id == trace_run.pk


def test_proposing_refuses_contracts_that_disagree_and_another_scenario_of_the_run(trace_run, role_user):
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios as seeds

    for package in seeds.seed_packages():
        scenario_import(package, source="demo")
    version = propose(trace_run, role_user("operator", "op"))
    with pytest.raises(TraceScenarioRefused, match=r"^scenario: a name 'no spaces allowed' must be"):
        trace_scenario_propose(run=trace_run, name="no spaces allowed", effect_classes={})
    files = {n: json.loads(t) for n, t in version.files.items()}
    lookup = next(c for c in files["contracts.json"] if c["tool"] == "lookup_order")
    lookup["fields"]["order_id"]["type"] = "integer"
    from fixtures_review.minting import scenario_files_mint

    scenario_files_mint(base=version, files=files, user=None, source="import")
    with pytest.raises(TraceScenarioRefused, match=r"support-orders@2 pins contracts that disagree .* lookup_order"):
        propose(trace_run, None)


def test_the_api_reports_proposes_and_launches_with_the_summary_first(trace_run, role_user, client):
    operator = role_user("operator", "op")
    reader = token_for(role_user("viewer", "reader"), HarnessToken.Scope.IMPORT_RUNS)
    url = reverse("api-run-scenario", args=[trace_run.run_id])
    answer = client.get(url, HTTP_AUTHORIZATION=f"Token {reader}")
    assert answer.status_code == 200 and answer.json()["trace"]["tool_calls"] == 3
    assert client.post(url, {"scenario": "x"}, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Token {reader}").status_code == 403  # fmt: skip
    assert (
        client.get(reverse("api-run-scenario", args=["nope"]), HTTP_AUTHORIZATION=f"Token {reader}").status_code == 404
    )
    client.force_login(operator)
    refused = client.post(url, {"scenario": "support-orders"}, content_type="application/json")
    assert refused.status_code == 400 and refused.json()["error"].startswith("effect class needed for lookup_order")
    bad = client.post(url, {"scenario": "s", "effect_classes": {"a": "write"}}, content_type="application/json")
    assert bad.status_code == 400
    body = {"scenario": "support-orders", "effect_classes": {"lookup_order": "read", "refund_order": "mutation"}}
    made = client.post(url, body, content_type="application/json")
    assert made.status_code == 201 and made.json()["proposed"]["scenario"] == "support-orders@1"
    assert client.post(url, body, content_type="application/json").status_code == 200  # held already
    launch = reverse("api-run-scenario-launch", args=[trace_run.run_id])
    asked = client.post(launch, {"agent": "recorded"}, content_type="application/json")
    assert asked.status_code == 409 and asked.json()["summary"]["source_run"] == trace_run.run_id
    launched = client.post(
        launch,
        {"agent": "recorded", "summary_digest": asked.json()["summary_digest"]},
        content_type="application/json",
    )
    assert launched.status_code == 201, launched.json()
    assert Replay.objects.get(pk=launched.json()["replay"]).source_run_id == trace_run.pk
    unknown = client.post(launch, {"agent": "nobody"}, content_type="application/json")
    assert unknown.status_code == 400 and "nobody" in unknown.json()["error"]


def test_the_page_shows_the_steps_proposes_and_launches(trace_run, role_user, client):
    client.force_login(role_user("viewer", "looker"))
    url = reverse("replays:run-scenario", args=[trace_run.run_id])
    assert client.get(url).status_code == 200
    body = {
        "action": "propose",
        "scenario": "s",
        "effect_class:lookup_order": "read",
        "effect_class:refund_order": "read",
    }
    assert client.post(url, body).status_code == 403 and not ScenarioVersion.objects.exists()
    assert client.post(url, {"action": "launch", "agent": "recorded"}).status_code == 403
    assert client.post(url, {"action": "delete"}).status_code == 400
    client.force_login(role_user("operator", "op"))
    run_page = client.get(reverse("runs:run-detail", args=[trace_run.run_id])).content.decode()
    url = reverse("replays:run-scenario", args=[trace_run.run_id])
    assert f'href="{url}"' in run_page
    page = client.get(url).content.decode()
    for step in ("1. Contracts", "2. Stage", "3. Review", "4. Launch a replay"):
        assert step in page
    assert "definitions and observed in 2 of 2 calls" in page and 'name="effect_class:refund_order"' in page
    refused = client.post(url, {"action": "propose", "scenario": "support-orders"})
    assert (
        refused.status_code == 400 and "effect class needed for lookup_order, refund_order" in refused.content.decode()
    )
    made = client.post(
        url,
        {
            "action": "propose",
            "scenario": "support-orders",
            "effect_class:lookup_order": "read",
            "effect_class:refund_order": "mutation",
        },
        follow=True,
    )
    assert "Scenario proposed support-orders@1." in made.content.decode()
    assert "A mutation's fixture needs the world transition" in made.content.decode()
    shown = client.get(url, {"agent": "recorded"})
    digest = shown.context["digest"]
    assert digest and shown.context["summary"]["source_run"] == trace_run.run_id
    stale = client.post(url, {"action": "launch", "agent": "recorded", "summary_digest": "sha256:" + "0" * 64})
    assert stale.status_code == 409
    launched = client.post(url, {"action": "launch", "agent": "recorded", "summary_digest": digest})
    replay = Replay.objects.get(source_run=trace_run)
    assert launched.status_code == 302 and launched["Location"] == reverse("replays:replay-detail", args=[replay.pk])


def test_a_registered_agent_launched_from_the_flow_replays_against_the_trace_and_stops_at_its_first_model_call(
    trace_run, role_user, capsys, tmp_path, reviewed_connections
):
    """The agent of tests/engine/agents (the official mcp and openai clients) as the decider: the scenario pins the
    model.chat contract (the trace made model calls), holds no model answer yet (issue 37 point 2 stages them), so
    the agent's first model request is the replay's precise stop, recorded whole, in a replay of the trace's run."""
    from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder

    _isolation_or_skip()
    operator, reviewer = role_user("operator", "op"), role_user("reviewer", "rev")
    propose(trace_run, operator)
    for recording in stage_results(trace_run, operator):
        recording_approve(recording=recording, user=reviewer)
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    call_command("register_agent", "support-bot", str(folder), "--command", "python mcp_openai_agent.py", "--json")
    capsys.readouterr()
    out = scenario_command(capsys, trace_run, "--launch", "support-bot", "--inline", "--user", "op")
    replay = Replay.objects.get(pk=out["replay"]["replay"])
    assert replay.decider == "agent:support-bot" and replay.source_run_id == trace_run.pk
    assert out["replay"]["summary"]["agent"]["decider"] == "agent:support-bot"
    assert replay.state == Replay.State.FINISHED and replay.run.final_state == "incomplete_test_world", replay.error
    assert [m["tool"] for m in replay.missing] == ["model.chat"]
    assert out["status"]["blocks"][0].startswith("support-orders@4 holds no model answer")
