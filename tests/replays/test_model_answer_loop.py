"""The model-fixture loop as a product feature (issue 36, build point 2; docs/agents.md "Model fixtures").

A real agent (tests/engine/agents/mcp_openai_agent.py: the `mcp` and `openai` clients) replays story 003 from the
checkpoint before the broad suite against the demo's scenario version, which pins no `model.chat` contract and holds
no model answer: the built-in contract normalizes its first model request and the run stops on it. From there, by
command, by API and from the missing-fixture page: stage the exact request with a proposed answer, a reviewer other
than the stager approves it, the approval mints the next scenario version (the model fixture and the contract), and
the same replay relaunched against that version gets past the request.
"""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.models import HarnessToken
from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.scenarios import scenario_bodies
from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL
from replays.models import Replay
from runs.models import Event
from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

A1 = "e-003-a1-checkpoint"
RUN = "run-003-review-request"
SCENARIO = "coding-review-request"
AGENT = "mcp_openai_agent.py"
DONE = "I read the task; the checks are not mine to change. Stopping here."


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def users(role_user):
    return {
        "olga": role_user("operator", "olga"),
        "rhea": role_user("reviewer", "rhea"),
        "rex": role_user("reviewer", "rex"),
        "vic": role_user("viewer", "vic"),
    }


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def relaunch(capsys, scenario: str | None = None) -> Replay:
    """The agent's counterfactual of story 003 from the checkpoint, inline (the worker's path, in process)."""
    args = ["replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:loop", "--checkpoint", A1]
    if scenario:
        args += ["--scenario", scenario]
    call_command(*args, "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    return Replay.objects.get(pk=out["replay"])


@pytest.fixture
def stopped(demo, users, tmp_path, capsys) -> Replay:
    """A finished replay of the agent, stopped on its first model request (the demo holds no model answer)."""
    _isolation_or_skip()
    folder = agent_folder(tmp_path, AGENT)
    call_command("register_agent", "loop", str(folder), "--command", f"python {AGENT}", "--json")
    capsys.readouterr()
    replay = relaunch(capsys)
    assert replay.state == Replay.State.FINISHED, replay.error
    (missing,) = replay.missing
    assert missing["tool"] == MODEL_TOOL and missing.get("call_id"), missing
    return replay


def stopped_request(replay: Replay) -> dict:
    (missing,) = replay.missing
    return Event.objects.get(run=replay.run, event_id=missing["call_id"], kind="tool.call").body


def stage(capsys, *args: str) -> dict:
    call_command("stage_model_answer", *args, "--json")
    return json.loads(capsys.readouterr().out)


def approve(reviewer, public_id: str) -> StagedRecording:
    recording = StagedRecording.objects.get(public_id=public_id)
    response = client_for(reviewer).post(f"/review/{public_id}/approve/", {"revision": recording.revision})
    assert response.status_code == 302, response.content.decode()[:2000]
    recording.refresh_from_db()
    return recording


def test_the_built_in_contract_normalizes_the_request_the_replay_stopped_on(stopped):
    """The demo's scenario version pins no model.chat contract, yet the run holds the exact request it stopped on."""
    (missing,) = stopped.missing
    call = stopped_request(stopped)
    assert call["tool"] == MODEL_TOOL and call["contract_revision"] == MODEL_CONTRACT["revision"]
    assert call["request"]["model"] == "n17q-test-model" and call["request"]["messages"][0]["role"] == "system"
    assert missing["request_digest"] == call["request_digest"]
    assert "pins no model.chat contract; the built-in one (revision 1) normalized the request" in missing["reason"]
    sv = ScenarioVersion.objects.get(name=SCENARIO, version=1)
    assert MODEL_TOOL not in {c["tool"] for c in json.loads(sv.files["contracts.json"])}


def test_the_whole_loop_by_command_gets_the_relaunched_replay_past_the_request(stopped, users, capsys):
    call = stopped_request(stopped)
    out = stage(capsys, str(stopped.pk), "--content", DONE, "--user", "rhea")
    assert out["tool"] == MODEL_TOOL and out["answer"] == "typed" and out["copied_from"] is None
    assert out["request_digest"] == call["request_digest"] and out["run"] == stopped.run.run_id
    recording = StagedRecording.objects.get(public_id=out["staged"])
    assert recording.synthetic and recording.state == "staged"
    assert recording.request["args"] == call["request"]  # the exact request, keyed as the engine keys it
    body = recording.response["body"]
    assert body["choices"][0]["message"] == {"role": "assistant", "content": DONE}
    assert body["model"] == "n17q-test-model" and body["object"] == "chat.completion"

    # four eyes: the stager (a reviewer) may not approve it
    refused = client_for(users["rhea"]).post(
        f"/review/{out['staged']}/approve/", {"revision": recording.revision}, follow=True
    )
    assert "you typed the model answer of this recording" in refused.content.decode()
    recording.refresh_from_db()
    assert recording.state == "staged"
    recording = approve(users["rex"], out["staged"])
    assert recording.state == "promoted" and recording.scenario_version.ref == f"{SCENARIO}@2"
    minted = recording.scenario_version
    contracts = json.loads(minted.files["contracts.json"])
    assert [c for c in contracts if c["tool"] == MODEL_TOOL] == [MODEL_CONTRACT]  # the built-in, now pinned
    (fixture,) = [f for f in json.loads(minted.files["fixtures.json"]) if f["tool"] == MODEL_TOOL]
    assert fixture["request"] == call["request"] and fixture["provenance"]["synthetic"] is True

    again = relaunch(capsys, f"{SCENARIO}@2")
    assert again.state == Replay.State.FINISHED, again.error
    assert call["request_digest"] not in {m["request_digest"] for m in again.missing}
    answered = Event.objects.filter(run=again.run, kind="tool.result", body__fixture=fixture["id"])
    assert answered.count() == 1  # the approved answer answered the request the first replay stopped on
    state = Event.objects.filter(run=again.run, kind="run.state").order_by("-seq").first().body
    assert (again.run.final_state, again.missing) == ("stopped", []), state
    assert DONE in state["reason"], state  # the agent stopped on the answer it was given, its words in the reason


def test_copy_similar_copies_the_nearest_model_answer_and_says_which(stopped, users, capsys, tmp_path, monkeypatch):
    """Turn one is answered with a tool call (the recorded broad suite); the relaunched replay runs it, asks its
    model again with the result, and stops there; copying similar for that request copies turn one's answer, the
    model fixture whose request shares the longest prefix of messages with it."""
    from tests.engine.test_agent_decider import _recorded_request

    # against @1 there is no model answer to copy: one line, nothing staged
    with pytest.raises(CommandError, match=r"holds no recorded model\.chat answer to copy"):
        call_command("stage_model_answer", str(stopped.pk), "--copy-similar", "--user", "olga")
    suite = [{"name": "shell.run", "arguments": _recorded_request(RUN, "e-003-a1-call-broad")}]
    # turn one typed as a whole assistant message on stdin (`--answer -`)
    message = {"role": "assistant", "content": None, "tool_calls": suite}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(message).encode())))
    first = stage(capsys, str(stopped.pk), "--answer", "-", "--user", "olga")
    recording = approve(users["rex"], first["staged"])
    (turn_one,) = [f for f in json.loads(recording.scenario_version.files["fixtures.json"]) if f["tool"] == MODEL_TOOL]

    again = relaunch(capsys, f"{SCENARIO}@2")
    (missing,) = again.missing
    assert missing["tool"] == MODEL_TOOL, again.missing
    second = Event.objects.get(run=again.run, event_id=missing["call_id"]).body["request"]
    assert second["messages"][:2] == turn_one["request"]["messages"]
    assert second["messages"][2]["tool_calls"][0]["function"]["name"] == "shell.run"

    out = stage(capsys, str(again.pk), "--copy-similar", "--user", "olga")
    assert out["answer"] == "copied" and out["scenario"] == SCENARIO
    assert out["copied_from"] == {"fixture": turn_one["id"], "scenario": f"{SCENARIO}@2", "shared_messages": 2}
    copy = StagedRecording.objects.get(public_id=out["staged"])
    # The promoted answer holds its body by digest (seed 001): the copy is the body the digest names.
    assert recording.scenario_version is not None
    promoted_body = scenario_bodies(recording.scenario_version).body(turn_one).value
    assert "body" not in turn_one["response"] and promoted_body["choices"]
    assert copy.request["args"] == second and copy.response["body"] == promoted_body
    assert copy.synthetic and f"copied from model fixture {turn_one['id']}" in copy.fidelity_note
    page = client_for(users["rex"]).get(f"/review/{copy.public_id}/").content.decode()
    assert f"a model answer copied from fixture <code>{turn_one['id']}</code> of {SCENARIO}@2" in page


BAD = [
    (("9999", "--content", "x"), "no replay 9999"),
    (("abc", "--content", "x"), "no replay 'abc'"),
    (("{pk}",), "say the answer"),
    (("{pk}", "--content", "x", "--copy-similar"), "say the answer"),
    (("{pk}", "--answer", "{bad}"), "answer: not JSON"),
    (("{pk}", "--answer", "{list}"), "answer: a JSON object"),
    (("{pk}", "--answer", "{user_role}"), "the answer is the assistant's, not 'user'"),
    (("{pk}", "--answer", "{no_choices}"), "choices: a non-empty list"),
    (("{pk}", "--answer", "{nowhere}"), "cannot be read"),
    (("{pk}", "--tool-calls", '[{"arguments": {}}]'), "tool_calls[0]: name must be"),
    (("{pk}", "--tool-calls", '{"name": "x"}'), "--tool-calls: a JSON list"),
    (("{pk}", "--tool-calls", "[{"), "--tool-calls: not JSON"),
    (("{pk}", "--content", "   "), "say something"),
    (("{pk}", "--content", "x", "--user", "vic"), "needs the operator or reviewer role"),
    (("{pk}", "--content", "x", "--user", "nobody"), "no user 'nobody'"),
    (("{pk}", "--content", "x", "--missing", "3"), "has no missing fixture #3"),
    (("{other}", "--content", "x"), "did not stop on a model request (model.chat): it stopped on status.lookup"),
]


def test_bad_input_is_refused_in_one_line_and_nothing_is_staged(stopped, users, tmp_path, capsys):
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    other = json.loads(capsys.readouterr().out)["replay"]  # stopped on status.lookup, not on a model request
    files = {
        "bad": "{not json",
        "list": "[1, 2]",
        "user_role": '{"role": "user", "content": "hi"}',
        "no_choices": '{"choices": []}',
    }
    for name, text in files.items():
        (tmp_path / f"{name}.json").write_text(text)
    names = {"{pk}": str(stopped.pk), "{other}": str(other), "{nowhere}": str(tmp_path / "nowhere.json")}
    names.update({"{" + n + "}": str(tmp_path / f"{n}.json") for n in files})
    for args, message in BAD:
        filled = [names.get(a, a) for a in args]
        with pytest.raises(CommandError) as caught:
            call_command("stage_model_answer", *filled)
        assert message in str(caught.value) and "\n" not in str(caught.value), (args, str(caught.value))
    assert not StagedRecording.objects.filter(tool=MODEL_TOOL).exists()


# --- the API door -------------------------------------------------------------------------------------------------


def api_post(client: Client, pk, body, key: str | None = None):
    headers = {"Authorization": f"Token {key}"} if key else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        f"/api/v1/replays/{pk}/missing/model-answer/", data, content_type="application/json", headers=headers
    )


def test_the_whole_loop_by_api_gets_the_relaunched_replay_past_the_request(stopped, users, capsys):
    from tests.runs.test_api import token_for

    call = stopped_request(stopped)
    key = token_for(users["olga"], HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)
    answer = {"role": "assistant", "content": DONE}
    response = api_post(Client(), stopped.pk, {"answer": answer}, key)
    assert response.status_code == 201, response.content
    out = response.json()
    assert out["tool"] == MODEL_TOOL and out["request_digest"] == call["request_digest"] and out["answer"] == "typed"
    recording = StagedRecording.objects.get(public_id=out["staged"])
    assert recording.token is not None and recording.captured_by == users["olga"]  # the token's owner
    assert recording.response["body"]["choices"][0]["message"] == answer

    recording = approve(users["rex"], out["staged"])
    assert recording.scenario_version.ref == f"{SCENARIO}@2"
    again = relaunch(capsys, f"{SCENARIO}@2")
    assert again.missing == [] and again.run.final_state == "stopped"
    assert Event.objects.filter(run=again.run, kind="tool.result", body__origin="fixture").exists()


def test_the_api_refuses_bad_input_with_its_status_and_stages_nothing(stopped, users, capsys):
    from tests.runs.test_api import token_for

    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    other = json.loads(capsys.readouterr().out)["replay"]
    key = token_for(users["olga"], HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)
    capture_only = token_for(users["olga"], HarnessToken.Scope.CAPTURE)
    viewer = token_for(users["vic"], HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)
    cases = [
        (9999, {"content": "x"}, key, 404, "no replay 9999"),
        (stopped.pk, "{not json", key, 400, "the body: not JSON"),
        (
            stopped.pk,
            '{"answer": ' + "[" * 100000 + "]" * 100000 + "}",
            key,
            400,
            "the body: not JSON: nested too deeply",
        ),
        (stopped.pk, json.dumps({"content": "x" * 1_200_000}), key, 400, "the body: larger than"),
        (stopped.pk, '{"answer": ' + "[" * 200 + "]" * 200 + "}", key, 400, "the body nests deeper than"),
        (stopped.pk, [1, 2], key, 400, "the body must be a JSON object"),
        (stopped.pk, {"answer": {"choices": "x"}}, key, 400, "choices: a non-empty list"),
        (stopped.pk, {"answer": "text"}, key, 400, "answer: a JSON object"),
        (stopped.pk, {"content": 3}, key, 400, "content: text"),
        (stopped.pk, {"answers": {}}, key, 400, "answers: not a field"),
        (stopped.pk, {}, key, 400, "say the answer"),
        (stopped.pk, {"content": "x", "missing": 4}, key, 404, "has no missing fixture #4"),
        (other, {"content": "x"}, key, 400, "did not stop on a model request"),
        (stopped.pk, {"content": "x"}, capture_only, 403, "scopes do not allow"),
        (stopped.pk, {"content": "x"}, viewer, 403, "needs"),
        (stopped.pk, {"content": "x"}, None, 401, "credentials were not provided"),
    ]
    for pk, body, token, code, message in cases:
        response = api_post(Client(), pk, body, token)
        assert response.status_code == code, (body, response.content)
        text = json.dumps(response.json())
        assert message in text, (body, text)
    assert not StagedRecording.objects.filter(tool=MODEL_TOOL).exists()


# --- the page's button ----------------------------------------------------------------------------------------------


def test_the_whole_loop_from_the_missing_fixture_page(stopped, users, capsys):
    call = stopped_request(stopped)
    olga = client_for(users["olga"])
    page = olga.get(f"/replays/{stopped.pk}/missing/0/").content.decode()
    form = re.search(r'<div class="model-answer" id="model-answer">(.*?)</div>', page, re.S)
    assert form is not None, page
    action = f"/replays/{stopped.pk}/missing/0/model-answer/"
    assert f'action="{action}"' in form.group(1) and 'name="content"' in form.group(1)
    assert "copy-model-answer" not in form.group(1)  # @1 holds no model answer to copy
    assert "copy-similar" not in page  # an empty model answer answers nothing: the page offers the typed one instead

    refused = olga.post(action, {"tool_calls": "{not json"}, follow=True).content.decode()
    assert "Answer refused: tool calls: not JSON" in refused and not StagedRecording.objects.filter(tool=MODEL_TOOL)
    assert client_for(users["vic"]).post(action, {"content": DONE}).status_code == 403
    assert olga.post(f"/replays/{stopped.pk}/missing/5/model-answer/", {"content": DONE}).status_code == 404
    assert not StagedRecording.objects.filter(tool=MODEL_TOOL).exists()

    response = olga.post(action, {"content": DONE})
    assert response.status_code == 302
    recording = StagedRecording.objects.get(tool=MODEL_TOOL)
    assert response["Location"] == f"/review/{recording.public_id}/"
    assert recording.request["args"] == call["request"] and recording.captured_by == users["olga"]
    # the missing page now lists it as pending
    page = olga.get(f"/replays/{stopped.pk}/missing/0/").content.decode()
    assert f'href="/review/{recording.public_id}/"' in page

    recording = approve(users["rex"], recording.public_id)
    assert recording.scenario_version.ref == f"{SCENARIO}@2"
    again = relaunch(capsys, f"{SCENARIO}@2")
    assert again.missing == [] and again.run.final_state == "stopped"


def test_the_page_offers_no_answer_form_for_a_tool_that_is_not_the_model(demo, users, capsys):
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    pk = json.loads(capsys.readouterr().out)["replay"]
    page = client_for(users["olga"]).get(f"/replays/{pk}/missing/0/").content.decode()
    assert "copy-recorded" in page  # its own next steps
    assert 'id="model-answer"' not in page
