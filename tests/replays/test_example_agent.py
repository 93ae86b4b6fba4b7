"""Issue 36's acceptance through the console: the shipped example agent (examples/mcp_openai_agent, written on the
official `mcp` and `openai` clients from docs/agents.md alone) is registered, replays story 001 from the start
against the demo's scenario, which holds no model answer, and each model request it stops on goes through the
product's loop: staged with its answer (by command, by API, from the missing-fixture page, by command again), approved
by a second reviewer (which mints the next scenario version), relaunched. The fourth relaunch completes; a fifth
gives the same log, and the requests the console recorded are the ones the example's own CI suite answers
(examples/.../stories/001-email-delivery/scenario/fixtures.json): the same branch, the same bytes, in the console
and in a user's CI.
"""

from __future__ import annotations

import html
import json
import shutil
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from n17q_engine.agent.model import MODEL_TOOL
from replays.models import Replay
from runs.models import Event
from runs.relaunch import relaunch_url
from tests.engine.test_agent_decider import _isolation_or_skip
from tests.replays.test_agents import _run_log
from tests.runs.test_api import token_for

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp_openai_agent"
RUN = "run-001-recorded"
SCENARIO = "email-delivery"
NAME = "mcp-openai-agent"  # the suite's agent name: the decider is part of the branch basis


@pytest.fixture
def users(role_user):
    return {"olga": role_user("operator", "olga"), "rex": role_user("reviewer", "rex")}


def example_answers() -> list[dict]:
    """The example's own model fixtures for story 001, in conversation order."""
    fixtures = json.loads((EXAMPLE / "stories/001-email-delivery/scenario/fixtures.json").read_text())
    chats = [f for f in fixtures if f["tool"] == MODEL_TOOL]
    return sorted(chats, key=lambda f: len(f["request"]["messages"]))


def launch(capsys, version: int) -> Replay:
    call_command(
        "replay", RUN, "--mode", "counterfactual", "--vary", f"decider=agent:{NAME}",
        "--scenario", f"{SCENARIO}@{version}", "--inline", "--json",
    )  # fmt: skip
    replay = Replay.objects.get(pk=json.loads(capsys.readouterr().out)["replay"])
    assert replay.state == Replay.State.FINISHED, replay.error
    return replay


def stopped_on(replay: Replay) -> dict:
    (missing,) = replay.missing
    assert missing["tool"] == MODEL_TOOL, replay.missing
    return Event.objects.get(run=replay.run, event_id=missing["call_id"], kind="tool.call").body


def approve(reviewer, public_id: str) -> str:
    client = Client()
    client.force_login(reviewer)
    recording = StagedRecording.objects.get(public_id=public_id)
    response = client.post(f"/review/{public_id}/approve/", {"revision": recording.revision})
    assert response.status_code == 302, response.content.decode()[:2000]
    recording.refresh_from_db()
    assert recording.state == "promoted"
    return recording.scenario_version.ref


def test_the_example_agent_goes_through_the_model_answer_loop_to_completion_by_every_door(users, tmp_path, capsys):
    _isolation_or_skip()
    call_command("load_demo", "--json")
    folder = tmp_path / "agent"
    shutil.copytree(EXAMPLE / "agent", folder)
    call_command("register_agent", NAME, str(folder), "--command", "python agent.py", "--json")
    capsys.readouterr()
    answers = example_answers()
    assert len(answers) == 4  # draft, fix the window, send once, say so
    key = token_for(users["olga"], HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)
    olga = Client()
    olga.force_login(users["olga"])

    version = 1
    for turn, fixture in enumerate(answers):
        replay = launch(capsys, version)
        call = stopped_on(replay)
        # the console's request is the one the example's CI suite answers, the same normalized request
        assert call["request"] == fixture["request"], turn
        message = fixture["response"]["body"]["choices"][0]["message"]
        if turn in (0, 3):  # by command
            answer = tmp_path / f"answer-{turn}.json"
            answer.write_text(json.dumps(message))
            call_command("stage_model_answer", str(replay.pk), "--answer", str(answer), "--user", "olga", "--json")
            staged = json.loads(capsys.readouterr().out)["staged"]
        elif turn == 1:  # by API
            response = olga.post(
                f"/api/v1/replays/{replay.pk}/missing/model-answer/",
                json.dumps({"answer": message}),
                content_type="application/json",
                headers={"Authorization": f"Token {key}"},
            )
            assert response.status_code == 201, response.content
            staged = response.json()["staged"]
        else:  # from the missing-fixture page
            action = f"/replays/{replay.pk}/missing/0/model-answer/"  # OpenAI tool calls typed as they are
            response = olga.post(action, {"tool_calls": json.dumps(message["tool_calls"])})
            assert response.status_code == 302, response.content.decode()[:2000]
            staged = response["Location"].strip("/").split("/")[-1]
        ref = approve(users["rex"], staged)
        version += 1
        assert ref == f"{SCENARIO}@{version}"
        # the review page relaunches the agent's counterfactual as it was launched, not as a rerun
        review = html.unescape(olga.get(f"/review/{staged}/").content.decode())
        again_url = relaunch_url(RUN, "counterfactual", {"decider": f"agent:{NAME}"}, "start", ref)
        assert f'class="button primary replay-again" href="{again_url}"' in review, turn
        assert "decider=agent%3Amcp-openai-agent" in again_url

    done = launch(capsys, version)
    assert (done.run.final_state, done.missing) == ("completed", []), done.run.final_state
    sends = Event.objects.filter(run=done.run, kind="effect.execution").values_list("body", flat=True)
    assert [b["outcome"] for b in sends] == ["acknowledged"], list(sends)  # sent once
    again = launch(capsys, version)
    assert again.run.final_state == "completed" and _run_log(again) == _run_log(done)
