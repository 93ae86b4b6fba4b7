"""Issue 18 through the console: the counterfactual form lists the run's checkpoints and human choices, the CLI takes
`--checkpoint`, a branch runs in the sandbox like any replay, and the comparison sets the restored history aside."""

from __future__ import annotations

import html as htmlmod
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from replays import services as replays
from replays.comparison import comparison_build
from replays.models import Replay
from runs.models import Event, Run
from tests.replays.test_replay_pages import launched

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def client_as(role_user):
    def make(role: str) -> Client:
        client = Client()
        client.force_login(role_user(role, f"{role}-branch"))
        return client

    return make


@pytest.fixture
def no_broker(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


A1 = "e-003-a1-checkpoint"
FORM = "/runs/run-003-review-request/launch/counterfactual/"


def run_json(capsys, *args) -> dict:
    call_command(*args, "--json")
    return json.loads(capsys.readouterr().out)


def options(page: str, name: str) -> dict[str, str]:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', page, re.S)
    assert select, page[:2000]
    return {
        htmlmod.unescape(v): htmlmod.unescape(label.strip())
        for v, label in re.findall(r'<option value="([^"]*)"[^>]*>(.*?)</option>', select.group(1), re.S)
    }


def test_the_form_lists_the_runs_checkpoints_with_what_each_holds(demo, client_as):
    operator = client_as("operator")
    page = operator.get(FORM).content.decode()
    choices = options(page, "checkpoint")
    assert list(choices) == ["start", A1]
    assert choices[A1] == (
        f"{A1}: logical 2026-05-04T09:00:50.200Z, world revision 0, workspaces ws-1 (tree sha256:507cecf1…), "
        "after e-003-focused-observed (evidence.observed)"
    )
    summary = operator.get(
        FORM, {"scenario": "coding-review-request@1", "variable": "decider", "decider": "careful", "checkpoint": A1}
    ).content.decode()
    assert "The history up to it is the recording&#x27;s" in summary
    assert "every recorded call has a fixture for its exact request" in summary


def test_a_branch_launched_from_the_form_compares_only_what_follows_the_checkpoint(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    replay = launched(
        operator,
        "run-003-review-request",
        "counterfactual",
        {"scenario": "coding-review-request@1", "variable": "decider", "decider": "careful", "checkpoint": A1},
        django_capture_on_commit_callbacks,
    )
    assert replay.state == Replay.State.FINISHED and replay.checkpoint == A1
    run = replay.run
    assert run is not None and run.final_state == "stopped"
    assert not Event.objects.filter(run=run, kind="effect.intent").exists()
    assert Event.objects.filter(run=run, kind="command.receipt", workspace_ref="ws-2", body__command="pytest -q tests")
    scope = Event.objects.get(run=run, kind="replay.scope").body
    assert scope["segment"]["from_checkpoint"] == A1 and scope["segment"]["restored"]["workspaces"]["ws-1"]

    assert run is not None
    report = comparison_build(run)
    assert report.segment is not None and report.segment.source_set_aside == 18
    source = Run.objects.get(run_id="run-003-review-request")
    after = Event.objects.filter(run=source, kind="model.proposal", seq__gt=18).count()
    proposals = next(layer for layer in report.layers if layer.key == "proposals")
    assert len([r for r in proposals.rows if r.source is not None]) == after  # nothing before the checkpoint
    page = operator.get(f"/replays/{replay.pk}/comparison/").content.decode()
    assert f"Compared from checkpoint {A1} to the end." in page
    assert "left unevaluated" in page and "segment-differs" in page


def test_the_cli_branches_from_a_checkpoint(demo, capsys):
    result = run_json(
        capsys,
        "replay",
        "run-003-review-request",
        "--mode",
        "counterfactual",
        "--vary",
        "decider=careful",
        "--checkpoint",
        A1,
        "--inline",
    )
    assert result["checkpoint"] == A1 and result["state"] == "stopped"
    child = Run.objects.get(run_id=result["run"])
    states = list(Event.objects.filter(run=child, kind="run.state").order_by("seq").values_list("body", flat=True))
    assert [s["state"] for s in states] == ["running", "stopped"]  # returned to planning, then stopped
    assert states[0]["returned_to"] == "planning"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--mode", "rerun", "--checkpoint", "e-003-nope"],
            "checkpoint 'e-003-nope': run run-003-review-request holds",
        ),
        (["--mode", "reconstruction", "--checkpoint", A1], "a reconstruction re-projects the whole run"),
        (
            ["--mode", "counterfactual", "--vary", "clock=2026-05-04T08:00:00Z", "--checkpoint", A1],
            "is before checkpoint e-003-a1-checkpoint",
        ),
        (
            ["--mode", "counterfactual", "--vary", "human.e-003-reviewer-views=approve"],
            "the recorded choice was already 'approve'",
        ),
        (["--mode", "counterfactual", "--vary", "human.e-003-nobody=reject"], "not a human input of"),
        (["--mode", "counterfactual", "--vary", "human.e-003-reviewer-views=maybe"], "the choice is one of"),
    ],
)
def test_the_cli_refuses_a_checkpoint_or_human_choice_the_run_does_not_hold_and_stores_nothing(demo, args, message):
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("replay", "run-003-review-request", *args, "--inline", "--json")
    assert Replay.objects.count() == 0


def test_the_form_offers_the_runs_human_inputs_and_a_human_choice_changes_only_that_input(
    demo, client_as, django_capture_on_commit_callbacks, no_broker
):
    operator = client_as("operator")
    page = operator.get("/runs/run-001-recorded/launch/counterfactual/").content.decode()
    choices = options(page, "human")
    assert (
        choices["e-001-reviewer-narrows=reject"]
        == "e-001-reviewer-narrows (reviewer, recorded: reject_audience) → reject"
    )
    assert {"approved", "rejected", "e-001-reviewer-narrows=approve"} <= set(choices)
    replay = launched(
        operator,
        "run-001-recorded",
        "counterfactual",
        {
            "scenario": "email-delivery@1",
            "variable": "human",
            "human": "e-001-reviewer-narrows=reject",
            "checkpoint": "start",
        },
        django_capture_on_commit_callbacks,
    )
    assert replay.vary == {"human.e-001-reviewer-narrows": "reject"} and replay.state == Replay.State.FINISHED
    run = replay.run
    human = Event.objects.get(run=run, kind="human.input").body
    assert (human["action"], human["recorded_action"], human["origin"]) == ("reject", "reject_audience", "varied")
    assert not Event.objects.filter(run=run, kind="effect.execution").exists()
    assert run.final_state == "stopped"
