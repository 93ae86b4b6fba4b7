"""Issue 37's acceptance, whole: files made by real producers (tests/data/producers, ORIGIN.md: the OpenTelemetry
GenAI instrumentation of the `openai` client, OpenInference for `openai` and for LangChain, and Inspect AI itself)
go from an imported trace to a reviewed scenario version: every tool result and every model call of each trace is
staged through one request (`capture_from_run --what all`), reviewed and approved by a second person, and the flow's
status says the latest version answers all of them. For the two traces of examples/traced_agent, the agent that
made them is registered and replayed against that version to completion, in N17Q's sandbox, and the comparison page
reads the trace's own run as the recorded run.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from fixtures_review.approval import recording_approve
from fixtures_review.models import StagedRecording
from n17q_engine.agent.model import MODEL_TOOL
from replays.models import Replay
from replays.trace_scenarios import trace_scenario_propose, trace_scenario_status
from runs.models import Event, Run
from tests.conftest import approve_test_connection
from tests.engine.inspect_logs import produce_once
from tests.engine.test_agent_decider import _isolation_or_skip

pytestmark = [pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = ROOT / "tests" / "data" / "producers"
AGENT = ROOT / "examples" / "traced_agent"
CONNECTION = "weather-production"
READS = {"get_forecast": "read", "list_alerts": "read", "send_alert": "mutation"}


def agent_tools() -> list[dict]:
    """The tools the traced agent offers its model, as it offers them (its TOOLS): GenAI's openai-v2
    instrumentation does not record them, so whoever stages the trace's model calls gives them."""
    spec = importlib.util.spec_from_file_location("traced_agent_for_tests", AGENT / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TOOLS


def import_trace(capsys, path: Path) -> Run:
    call_command("import_run", str(path), "--json")
    answer = json.loads(capsys.readouterr().out)
    (run,) = answer["runs"]
    return Run.objects.get(run_id=run["run"])


def stage_everything(capsys, run: Run, scenario: str, *extra: str) -> dict:
    call_command(
        "capture_from_run", run.run_id, "--what", "all", "--connection", CONNECTION, "--user", "olga",
        "--scenario", scenario, *extra, "--json",
    )  # fmt: skip
    return json.loads(capsys.readouterr().out)


def approve_all(run: Run, reviewer) -> None:
    for recording in StagedRecording.objects.filter(source_run=run.run_id, state="staged").order_by("pk"):
        recording_approve(recording=recording, user=reviewer, revision=recording.revision)


@pytest.fixture
def people(role_user, reviewed_connections):
    approve_test_connection(CONNECTION, reaches="sandbox", capabilities=["read", "mutation"])
    return {"olga": role_user("operator", "olga"), "rex": role_user("reviewer", "rex")}


def _trace_to_version(capsys, people, path: Path, scenario: str, *extra: str) -> tuple[Run, dict]:
    run = import_trace(capsys, path)
    trace = trace_scenario_status(run)["trace"]
    trace_scenario_propose(
        run=run,
        name=scenario,
        effect_classes={tool: READS.get(tool, "read") for tool in trace["tools"]} | _offered(run),
        user=people["olga"],
    )
    staged = stage_everything(capsys, run, scenario, *extra)
    # Every tool result and every model call of the trace, one recording each; nothing skipped or refused.
    assert staged["skipped"] == [] and staged["refused"] == [], staged
    assert len(staged["recordings"]) == trace["tool_results"] + trace["model_calls"]
    approve_all(run, people["rex"])
    status = trace_scenario_status(run, scenario)
    assert status["recordings"]["staged"] == 0 and status["recordings"]["rejected"] == 0
    assert status["recordings"]["model_calls"]["approved"] == trace["model_calls"], status["recordings"]
    assert status["latest"]["answered"] == trace["tool_calls"], status["latest"]
    assert status["latest"]["model_fixtures"] == trace["model_calls"], status["latest"]
    return run, status


def _offered(run: Run) -> dict[str, str]:
    """Tools the trace recorded as offered (its definitions) but never called: their effect class too is asked."""
    from replays.trace_scenarios import trace_inference

    return {tool: READS.get(tool, "read") for tool in trace_inference(run, {}).asked}


@pytest.mark.parametrize(
    ("name", "producer"),
    [("genai-openai.otlp.json", "genai"), ("openinference-openai.otlp.json", "openinference")],
)
def test_the_traced_agent_is_replayed_to_completion_against_the_scenario_made_from_its_own_trace(
    name, producer, people, capsys, tmp_path
):
    _isolation_or_skip()
    extra = ("--model-tools", str(_tools_file(tmp_path))) if producer == "genai" else ()
    run, status = _trace_to_version(capsys, people, PRODUCERS / name, f"weather-{producer}", *extra)
    assert status["trace"] == {
        "tool_calls": 3,
        "tool_results": 3,
        "model_calls": 3,
        "tools": {"get_forecast": 2, "list_alerts": 1},
    }
    assert status["ready"], status["blocks"]

    folder = tmp_path / "traced-agent"
    shutil.copytree(AGENT, folder)
    call_command("register_agent", "traced-agent", str(folder), "--command", "python agent.py", "--json")
    capsys.readouterr()
    call_command("scenario_from_run", run.run_id, "--launch", "traced-agent", "--inline", "--user", "olga", "--json")
    out = json.loads(capsys.readouterr().out)
    replay = Replay.objects.get(pk=out["replay"]["replay"])
    assert replay.state == Replay.State.FINISHED, replay.error
    assert replay.missing == [], json.dumps(replay.missing, indent=1)[:3000]
    assert replay.source_run_id == run.pk and replay.decider == "agent:traced-agent"
    assert replay.run.final_state == "completed", replay.run.final_state
    calls = [e.body for e in Event.objects.filter(run=replay.run, kind="tool.call").order_by("seq")]
    assert [c["tool"] for c in calls].count(MODEL_TOOL) == 3
    assert sorted(c["tool"] for c in calls if c["tool"] != MODEL_TOOL) == [
        "get_forecast",
        "get_forecast",
        "list_alerts",
    ]
    results = {e.body["call_id"]: e.body for e in Event.objects.filter(run=replay.run, kind="tool.result")}
    assert all(results[c["id"]]["origin"] == "fixture" for c in calls), [results[c["id"]] for c in calls]
    # Atlantis has no forecast: the trace's tool error is a fixture too, and the replay gives it back.
    assert sorted(results[c["id"]]["outcome"] for c in calls if c["tool"] == "get_forecast") == ["error", "ok"]

    from django.test import Client

    client = Client()
    client.force_login(people["olga"])
    page = client.get(reverse("replays:replay-comparison", args=[replay.pk]))
    assert page.status_code == 200
    report = page.context["report"]
    assert report.source.pk == run.pk and report.replay_run.pk == replay.run.pk
    tools = next(layer for layer in report.layers if layer.key == "tools")
    assert len(tools.rows) == 3 and all(row.same for row in tools.rows), [
        (r.source_text, r.replay_text, r.note) for r in tools.rows
    ]
    # The agent decided as it did when traced: no layer differs; the trace's contexts, digests of its own message
    # form, are not evaluated (and the page says so) rather than reported as different.
    assert report.first_divergence is None, report.first_divergence
    context = next(layer for layer in report.layers if layer.key == "context")
    assert context.rows == [] and context.summary.startswith("not evaluated: 3 of the 3 recorded proposals")
    assert "not evaluated: 3 of the 3 recorded proposals" in page.content.decode()


def _tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(agent_tools()))
    return path


def test_the_langchain_trace_is_staged_and_approved_whole(people, capsys):
    """OpenInference for LangChain: its tool spans record the input string; the converter takes the proposed
    arguments (docs/formats/otlp.md), so every result and call stages, and the version answers every call."""
    _run, status = _trace_to_version(capsys, people, PRODUCERS / "openinference-langchain.otlp.json", "weather-lc")
    assert status["trace"]["tool_calls"] == 3 and status["trace"]["model_calls"] == 3


def test_an_inspect_log_made_by_inspect_ai_is_staged_and_approved_whole(people, capsys, tmp_path_factory):
    """Inspect AI's own log (tests/engine/inspect_producer.py runs a real eval: tools, a sandbox, an approval policy):
    each sample is a run, and each run's tool results and model calls are all staged and approved."""
    log = produce_once(tmp_path_factory)["eval"]
    call_command("import_run", str(log), "--json")
    answer = json.loads(capsys.readouterr().out)
    assert len(answer["runs"]) == 4  # two samples, two epochs
    for i, imported in enumerate(answer["runs"]):
        run = Run.objects.get(run_id=imported["run"])
        trace = trace_scenario_status(run)["trace"]
        assert trace["model_calls"] and trace["tool_results"], trace
        trace_scenario_propose(
            run=run, name=f"adder-{i}", effect_classes={tool: "read" for tool in trace["tools"]} | _offered(run),
            user=people["olga"],
        )  # fmt: skip
        staged = stage_everything(capsys, run, f"adder-{i}")
        assert staged["refused"] == [] and staged["skipped"] == [], staged
        assert len(staged["recordings"]) == trace["tool_results"] + trace["model_calls"]
        approve_all(run, people["rex"])
        status = trace_scenario_status(run, f"adder-{i}")
        assert status["recordings"]["staged"] == 0 and status["recordings"]["approved"] == len(staged["recordings"])
        assert status["latest"]["answered"] == trace["tool_calls"], status["latest"]
        assert status["latest"]["model_fixtures"] == trace["model_calls"], status["latest"]
