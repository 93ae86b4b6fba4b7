"""The trace as the recording (issue 17, point 6): a run's recorded tool results staged as recordings with their
provenance, from the command, the run page's button and the API; the same intake and four-eyes review."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from fixtures_review.services import ReviewRefused, recording_approve
from runs.models import Event, Run
from tests import bundles

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


# The reviewed connection the demo runs' tool calls went through (tests/conftest.py registers and approves it).
VIA = ("--connection", "docs-api")


def stage(capsys, run: str, *args: str) -> dict:
    call_command("capture_from_run", run, *VIA, *args, "--json")
    return json.loads(capsys.readouterr().out)


def test_it_stages_each_recorded_result_with_its_provenance(demo, capsys):
    out = stage(capsys, "run-000-recorded")
    assert out["run"] == "run-000-recorded" and out["scenario"] == "docs-research"
    assert [(r["event"], r["tool"], r["outcome"]) for r in out["recordings"]] == [
        ("e-000-res-search", "docs.search", "ok"),
        ("e-000-res-status", "status.lookup", "not_found"),
    ]
    search = StagedRecording.objects.get(public_id=out["recordings"][0]["staged"])
    assert search.origin == "run-result" and (search.source_run, search.source_event) == (
        "run-000-recorded",
        "e-000-res-search",
    )
    provenance = search.copied_from or {}
    assert provenance["call"] == "e-000-call-search" and provenance["result_origin"] == "historical"
    call = Event.objects.get(run__run_id="run-000-recorded", event_id="e-000-call-search").body
    # Keyed like the replay will ask: the call's arguments under the scenario's contract.
    assert search.request["args"] == call["request"] and search.request_digest == call["request_digest"]
    assert search.response["status"] == 200 and search.response["body"]
    status = StagedRecording.objects.get(public_id=out["recordings"][1]["staged"])
    assert status.response["status"] == 404 and status.outcome == "not_found"
    assert status.effect_class == "read" and status.state == "staged" and status.fixture_version is None


def test_staging_the_same_results_again_stages_nothing_and_says_where_they_are(demo, capsys):
    first = stage(capsys, "run-000-recorded")
    count = StagedRecording.objects.count()
    again = stage(capsys, "run-000-recorded")
    assert again["recordings"] == [] and StagedRecording.objects.count() == count
    assert [(a["event"], a["recording"], a["state"]) for a in again["already"]] == [
        (r["event"], r["staged"], "staged") for r in first["recordings"]
    ]


def test_results_answered_by_fixtures_are_skipped_and_a_live_one_is_staged(demo, capsys):
    out = stage(capsys, "run-000-fail-open-replay")
    assert [r["event"] for r in out["recordings"]] == ["e-000r-res-status"]  # the answer that went live
    assert out["skipped"][0]["event"] == "e-000r-res-search" and "origin fixture" in out["skipped"][0]["reason"]
    # Nothing to stage is no refusal of the request: each result says why (issue 37: never all or nothing).
    out = stage(capsys, "run-003-review-request")
    assert out["recordings"] == [] and out["refused"] == []
    assert len(out["skipped"]) == 4 and all("origin fixture" in s["reason"] for s in out["skipped"])


def test_tool_and_event_narrow_what_is_staged(demo, capsys):
    out = stage(capsys, "run-000-recorded", "--tool", "status.lookup")
    assert [r["event"] for r in out["recordings"]] == ["e-000-res-status"]
    out = stage(capsys, "run-000-recorded", "--event", "e-000-res-search")
    assert [r["event"] for r in out["recordings"]] == ["e-000-res-search"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nope"], "no run 'nope'"),
        (["run-000-recorded", "--scenario", "coding-review-request"], "was recorded in docs-research, not"),
        (["run-000-recorded", "--event", "e-none"], "holds no tool.result 'e-none'"),
        (["run-000-recorded", "--tool", "no.such"], "holds no result of tool 'no.such'"),
        (["run-000-recorded", "--user", "ghost"], "no user 'ghost'"),
    ],
)
def test_bad_requests_are_one_line_and_stage_nothing(demo, args, said):
    before = StagedRecording.objects.count()
    with pytest.raises(CommandError, match=said):
        call_command("capture_from_run", *args, *VIA)
    assert StagedRecording.objects.count() == before


def test_a_run_without_a_scenario_needs_one_and_a_tool_without_a_contract_needs_its_effect_class(capsys, demo):
    call_command("import_run", str(bundles.EXAMPLE), "--json")
    capsys.readouterr()
    with pytest.raises(CommandError, match=r"^scenario: run run-example-docs names no scenario.*--scenario"):
        call_command("capture_from_run", "run-example-docs")
    # A tool without a contract and without a given effect class: each of its results refused, with the reason.
    out = stage(capsys, "run-example-docs", "--scenario", "fresh-world")
    assert out["recordings"] == [] and len(out["refused"]) == 2
    assert [r["reason"].split(" (")[0] for r in out["refused"]] == [
        "effect_class: unknown for docs.search",
        "effect_class: unknown for status.lookup",
    ]
    assert "no version of fresh-world is held" in out["refused"][0]["reason"]
    assert not StagedRecording.objects.filter(source_run="run-example-docs").exists()
    out = stage(capsys, "run-example-docs", "--scenario", "fresh-world", "--effect-class", "read")
    assert len(out["recordings"]) == 2 and out["scenario"] == "fresh-world"
    # The seed scenario's contracts give the effect class when the scenario is held.
    out = stage(capsys, "run-example-docs", "--scenario", "docs-research")
    assert out["already"] and not out["recordings"]  # the same results: provenance, not scenario, is the identity


def test_the_stager_cannot_approve_and_another_reviewer_mints_it(demo, capsys, role_user):
    stager = role_user("reviewer", "stager")
    out = stage(capsys, "run-000-recorded", "--event", "e-000-res-status", "--user", "stager")
    recording = StagedRecording.objects.get(public_id=out["recordings"][0]["staged"])
    with pytest.raises(ReviewRefused, match="four eyes: you staged this recording from a run's recorded result"):
        recording_approve(recording=recording, user=stager)
    approved = recording_approve(recording=recording, user=role_user("reviewer", "second"))
    assert approved.state == "promoted" and approved.fixture_version is not None


# --- the run page's button and the recording's page --------------------------------------------------------------


def test_the_run_page_offers_the_button_to_operators_only(demo, client, role_user):
    url = reverse("runs:run-detail", args=["run-000-recorded"])
    client.force_login(role_user("operator"))
    assert b'id="stage-results"' in client.get(url).content
    client.force_login(role_user("viewer"))
    assert b'id="stage-results"' not in client.get(url).content
    response = client.post(reverse("fixtures:run-results-stage", args=["run-000-recorded"]))
    assert response.status_code == 403 and StagedRecording.objects.filter(source_run="run-000-recorded").count() == 0


def test_the_button_stages_and_the_recording_page_links_back_to_the_run_and_event(demo, client, role_user):
    client.force_login(role_user("operator"))
    response = client.post(
        reverse("fixtures:run-results-stage", args=["run-000-recorded"]), data={"connection": "docs-api"}, follow=True
    )
    assert b"Staged 2 recordings from run run-000-recorded" in response.content
    status = StagedRecording.objects.get(source_run="run-000-recorded", source_event="e-000-res-status")
    page = client.get(reverse("fixtures:recording", args=[status.public_id])).content.decode()
    assert 'id="provenance"' in page
    assert reverse("runs:run-detail", args=["run-000-recorded"]) + "?event=e-000-res-status" in page
    assert "e-000-call-status" in page
    # The demo's own staged status capture answers the same key: the page flags the duplicate.
    assert 'id="duplicate-flag"' in page
    again = client.post(
        reverse("fixtures:run-results-stage", args=["run-000-recorded"]), data={"connection": "docs-api"}, follow=True
    )
    assert b"Staged 0 recordings" in again.content and b"2 already staged before" in again.content


def test_the_button_refusal_is_a_message_on_the_run_page(client, role_user, capsys):
    call_command("import_run", str(bundles.EXAMPLE), "--json")
    client.force_login(role_user("operator"))
    url = reverse("runs:run-detail", args=["run-example-docs"])
    assert b'name="scenario"' in client.get(url).content  # a run without a scenario asks for one
    response = client.post(reverse("fixtures:run-results-stage", args=["run-example-docs"]), follow=True)
    assert response.redirect_chain[-1][0] == url
    assert b"Staging the results refused: scenario: run run-example-docs names no scenario" in response.content
    assert StagedRecording.objects.count() == 0


# --- the API -----------------------------------------------------------------------------------------------------


def _token(user, *scopes: str) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(name="h", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9],
                                scopes=list(scopes or [HarnessToken.Scope.CAPTURE]))  # fmt: skip
    return key


def test_a_capture_only_token_reads_nothing_of_a_run_through_its_captures(demo, client, role_user):
    # Issue 33: on 89ef8a5 a token that can only capture staged a run's results and read back their event ids and
    # tools (and, refused, which events the run holds). The answer is the run's contents: reading a run needs a scope
    # that names runs.
    url = reverse("api-run-captures", args=["run-000-recorded"])
    response = client.post(url, data={"tool": "docs.search", "connection": "docs-api"}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Token {_token(role_user('operator', 'capturer'))}")  # fmt: skip
    assert response.status_code == 403 and "e-000" not in response.content.decode()
    assert not StagedRecording.objects.filter(origin="run-result").exists()


def test_the_api_stages_a_runs_results(demo, client, role_user):
    harness = role_user("operator", "harness")
    url = reverse("api-run-captures", args=["run-000-recorded"])
    key = _token(harness, HarnessToken.Scope.CAPTURE, HarnessToken.Scope.IMPORT_RUNS)  # it captures and reads runs
    response = client.post(url, data={"tool": "docs.search", "connection": "docs-api"}, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Token {key}")  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert [r["event"] for r in body["recordings"]] == ["e-000-res-search"]
    assert StagedRecording.objects.get(public_id=body["recordings"][0]["staged"]).token.user == harness


@pytest.mark.parametrize(
    ("run", "data", "code", "said"),
    [
        ("nope", {}, 404, "no run 'nope'"),
        ("run-000-recorded", {"events": "e-000-res-status"}, 400, "events: a list"),
        ("run-000-recorded", {"effect_class": "write"}, 400, "effect_class: one of read, mutation"),
        ("run-000-recorded", {"scenario": 3}, 400, "scenario: a string"),
        ("run-000-recorded", ["e-000-res-status"], 400, "the body must be an object"),
        ("run-000-recorded", {"events": ["e-none"], "connection": "docs-api"}, 400, "holds no tool.result 'e-none'"),
        ("run-000-recorded", {}, 400, "connection: say which reviewed connection the tool calls of run"),
    ],
)
def test_the_api_refuses_bad_requests_in_one_line(demo, client, role_user, run, data, code, said):
    client.force_login(role_user("operator"))
    response = client.post(reverse("api-run-captures", args=[run]), data=data, content_type="application/json")
    assert response.status_code == code and said in response.json()["error"]
    assert not StagedRecording.objects.filter(origin="run-result").exists()


def test_a_viewer_cannot_stage_through_the_api(demo, client, role_user):
    client.force_login(role_user("viewer"))
    response = client.post(reverse("api-run-captures", args=["run-000-recorded"]), data={},
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 403 and not StagedRecording.objects.filter(origin="run-result").exists()
    assert Run.objects.filter(run_id="run-000-recorded").exists()
