"""The missing fixture → review → replay loop (issue 16, build 4), on story 000 through the pages.

The demo stages the status lookup of req-7781 (404 not_found) by the operator; a replay of `run-000-recorded`
under `docs-research@1` stops on that very request. These tests follow it from the missing-fixture page to the
review page and back to a replay against the version the approval mints.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review.models import ScenarioVersion, StagedRecording
from fixtures_review.services import capture_stage
from n17q_demo.captures import demo_captures
from replays import services as replays
from replays.models import Replay

pytestmark = pytest.mark.django_db


@pytest.fixture
def paused(capsys, role_user) -> Replay:
    call_command("load_demo", "--json")
    capsys.readouterr()
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "incomplete_test_world"
    return Replay.objects.get(pk=out["replay"])


@pytest.fixture
def client_as(role_user):
    def make(role: str, username: str) -> Client:
        client = Client()
        client.force_login(role_user(role, username))
        return client

    return make


def _status_capture() -> StagedRecording:
    return StagedRecording.objects.get(tool="status.lookup", origin="capture", state="staged")


def test_it_lists_the_staged_capture_of_the_same_request_on_the_missing_page(paused, client_as):
    capture = _status_capture()
    html = client_as("operator", "olga").get(f"/replays/{paused.pk}/missing/0/").content.decode()
    section = html[html.index('id="answers"') : html.index('id="near-h"')]
    assert f'href="/review/{capture.public_id}/"' in section
    assert "Staged capture" in section and "not_found, status 404" in section
    assert "answers it with fixture" not in section  # no version answers it yet


def test_it_offers_to_replay_the_run_that_needed_it_against_the_approved_version(paused, client_as, capsys):
    capture = _status_capture()
    reviewer = client_as("reviewer", "rhea")
    staged_page = reviewer.get(f"/review/{capture.public_id}/").content.decode()
    assert paused.run.run_id in staged_page and "Replays that needed it" in staged_page  # links back to the replay
    assert "replay-again" not in staged_page  # nothing to replay against before approval
    reviewer.post(f"/review/{capture.public_id}/approve/", {"revision": capture.revision})
    capture.refresh_from_db()
    assert capture.state == "promoted" and capture.scenario_version.ref == "docs-research@2"

    page = reviewer.get(f"/review/{capture.public_id}/").content.decode()
    link = re.search(r'<a class="button primary replay-again" href="([^"]+)">([^<]+)</a>', page)
    assert link is not None, page
    assert link.group(1) == "/runs/run-000-recorded/launch/replay/?scenario=docs-research%402"
    assert link.group(2) == "Replay run-000-recorded against @2"
    missing_page = client_as("operator", "olga").get(f"/replays/{paused.pk}/missing/0/").content.decode()
    assert "docs-research@2</a> answers it with fixture" in missing_page
    assert "?scenario=docs-research%402" in missing_page

    call_command("replay", "run-000-recorded", "--mode", "rerun", "--scenario", "docs-research@2", "--inline", "--json")
    assert json.loads(capsys.readouterr().out)["state"] == "completed"


def test_it_flags_a_capture_whose_request_is_already_staged_or_promoted(paused, client_as):
    first = _status_capture()
    again = capture_stage(raw={**demo_captures()[0], "captured_at": "2026-07-01T09:00:06Z"}).recording
    reviewer = client_as("reviewer", "rhea")
    page = reviewer.get(f"/review/{again.public_id}/").content.decode()
    assert 'id="duplicate-flag"' in page and first.public_id in page and "already staged" in page
    queue = reviewer.get("/review/").content.decode()
    assert f"same request as {first.public_id} (staged)" in queue
    assert f"same request as {again.public_id} (staged)" in queue

    reviewer.post(f"/review/{first.public_id}/approve/", {"revision": first.revision})
    page = reviewer.get(f"/review/{again.public_id}/").content.decode()
    assert "already promoted" in page and "docs-research@2" in page


def test_it_refuses_a_second_body_for_a_promoted_key_without_a_note(paused, client_as):
    first = _status_capture()
    reviewer = client_as("reviewer", "rhea")
    reviewer.post(f"/review/{first.public_id}/approve/", {"revision": first.revision})
    other = dict(demo_captures()[0])
    other["response"] = {"status": 200, "headers": {}, "body": {"request_id": "req-7781", "status": "open"}}
    second = capture_stage(raw=other).recording

    page = reviewer.get(f"/review/{second.public_id}/").content.decode()
    assert 'id="approve-conflict"' in page and 'name="note"' in page
    refused = reviewer.post(
        f"/review/{second.public_id}/approve/", {"revision": second.revision}, follow=True
    ).content.decode()
    assert "docs-research@2 already answers this request" in refused and "Say why in a note" in refused
    assert ScenarioVersion.objects.filter(name="docs-research").count() == 2
    second.refresh_from_db()
    assert second.state == "staged" and not second.events.filter(action="refused").exists()

    reviewer.post(
        f"/review/{second.public_id}/approve/",
        {"revision": second.revision, "note": "the request opened after the consistency window"},
    )
    second.refresh_from_db()
    assert second.state == "promoted" and second.scenario_version.ref == "docs-research@3"
    assert second.events.get(action="approve").reason == "the request opened after the consistency window"


def test_the_launch_page_for_the_replay_again_link_answers(paused, client_as, monkeypatch):
    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: True)
    first = _status_capture()
    client_as("reviewer", "rhea").post(f"/review/{first.public_id}/approve/", {"revision": first.revision})
    response = client_as("operator", "olga").get("/runs/run-000-recorded/launch/replay/?scenario=docs-research%402")
    assert response.status_code == 200
    assert "docs-research@2" in response.content.decode()
