"""Model calls as model fixtures (issue 37 point 2): an imported run's model calls (a real Inspect eval's log, an
OTLP trace from the real OpenTelemetry SDK) staged as `model.chat` recordings one by one, approved by a second
reviewer, and the minted version's fixture keyed by the request the agent sends."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.run_model_calls import run_model_calls_stage
from fixtures_review.scenarios import scenario_bodies
from fixtures_review.services import recording_approve
from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL
from n17q_engine.contracts import Contract
from runs.models import Run
from tests.engine.inspect_logs import produce_once
from tests.engine.test_format_otlp import _protobuf, _spans
from tests.engine.test_recorded_chat import CONVERSATION, TOOLS, _genai_call, _openinference_call

pytestmark = pytest.mark.django_db
CONTRACT = Contract.from_dict(MODEL_CONTRACT)


@pytest.fixture(scope="module")
def inspect_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return produce_once(tmp_path_factory)["eval"]


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


def _import(path: Path) -> list[Run]:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    answer = json.loads(out.getvalue())
    ids = [r["run"] for r in answer["runs"]] if "runs" in answer else [answer["run"]]
    return [Run.objects.get(run_id=i) for i in ids]


def test_an_inspect_run_s_model_calls_are_staged_approved_and_answer_their_requests(demo, inspect_log, role_user):
    run = _import(inspect_log)[0]
    stager = role_user("reviewer", "stager")
    out = run_model_calls_stage(run=run, user=stager, scenario="docs-research", connection="docs-api").to_json()
    assert len(out["recordings"]) == 5 and out["skipped"] == [] and out["already"] == []
    second = role_user("reviewer", "second")
    digests = set()
    for item in out["recordings"]:
        recording = StagedRecording.objects.get(public_id=item["staged"])
        assert recording.tool == MODEL_TOOL and recording.origin == "run-result" and not recording.synthetic
        assert (recording.source_run, recording.source_event) == (run.run_id, item["event"])
        assert recording.contract_revision == MODEL_CONTRACT["revision"]
        digests.add(CONTRACT.digest(recording.request["args"])[1])
        approved = recording_approve(recording=recording, user=second)
        assert approved.state == "promoted"
    latest = ScenarioVersion.objects.filter(name="docs-research").order_by("-version").first()
    models = [f for f in latest.fixture_items if f.get("tool") == MODEL_TOOL]
    # Each fixture is keyed by the request the agent sends, normalized by model.chat, answered by the completion.
    assert {CONTRACT.digest(f["request"])[1] for f in models} == digests and len(digests) == 5
    # Each body is held by digest (seed 001), read back through the one resolver.
    assert latest is not None
    bodies = scenario_bodies(latest)
    assert all("body" not in f["response"] and f["response"]["body_digest"] for f in models)
    assert all(bodies.body(f).value["object"] == "chat.completion" for f in models)
    again = run_model_calls_stage(run=run, scenario="docs-research", connection="docs-api").to_json()
    assert again["recordings"] == [] and len(again["already"]) == 5


def test_a_call_that_cannot_be_staged_is_skipped_with_its_reason_and_the_others_stage(demo, tmp_path):
    def emit(tracer):
        with tracer.start_as_current_span("agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
            _openinference_call(
                tracer, {"model": "gpt-4o-mini", "messages": CONVERSATION, "tools": TOOLS, "temperature": 0}
            )
            _genai_call(tracer)  # no tool definitions recorded, and its answer calls a tool

    path = tmp_path / "trace.pb"
    path.write_bytes(_protobuf(_spans(emit)))
    [run] = _import(path)
    out = run_model_calls_stage(run=run, scenario="docs-research", connection="docs-api").to_json()
    assert len(out["recordings"]) == 1
    staged = StagedRecording.objects.get(public_id=out["recordings"][0]["staged"])
    # The span's token counts (its budget.charged event) are the completion's usage.
    assert staged.response["body"]["usage"] == {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}
    [skipped] = out["skipped"]
    assert "tools it was offered were not recorded" in skipped["reason"]


def test_a_canary_secret_in_a_message_or_in_the_tools_given_is_never_stored_in_clear(demo, tmp_path):
    """A secret in a recorded message was masked when the run was imported and stays masked; one in the tool
    definitions the stager gives (`model_tools`, bytes the run never held) is masked by the intake."""
    secret = "ghp_" + "Zq7Rk2Lw9Xc4Vb8Nm1Pa5Sd3Fg6Hj0Kt2Ye"
    given = "ghp_" + "Lm3Np8Qr2St7Uv1Wx6Yz0Ab4Cd9Ef5Gh2Ij"
    messages = [{"role": "user", "content": f"use the token {secret} to open the repository"}]

    def emit(tracer):
        with tracer.start_as_current_span("agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
            _openinference_call(tracer, {"model": "gpt-4o-mini", "messages": messages, "tools": TOOLS})
            _genai_call(tracer)

    path = tmp_path / "trace.pb"
    path.write_bytes(_protobuf(_spans(emit)))
    [run] = _import(path)
    tools = [{**TOOLS[0]["function"], "description": f"The weather in a city; authenticate with {given}."}]
    out = run_model_calls_stage(run=run, scenario="docs-research", connection="docs-api", model_tools=tools).to_json()
    assert out["skipped"] == [] and len(out["recordings"]) == 2
    recordings = [StagedRecording.objects.get(public_id=r["staged"]) for r in out["recordings"]]
    stored = json.dumps([[r.request, r.response] for r in recordings])
    assert secret not in stored and given not in stored
    assert "[masked:vendor-prefixed-token]" in stored
    assert any(r.findings for r in recordings)  # the given tools' secret: found and masked at intake
