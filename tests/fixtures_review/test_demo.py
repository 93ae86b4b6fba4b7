"""The demo's review queue tells seed 000's story: approve the status lookup, and the replay gets past it."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from accounts.models import AuditEntry
from fixtures_review.models import StagedRecording
from fixtures_review.services import ReviewRefused, promotion_blockers, recording_approve

pytestmark = pytest.mark.django_db


def load(capsys) -> dict:
    call_command("load_demo", "--json")
    return json.loads(capsys.readouterr().out)


def test_load_demo_stages_two_recordings_once_and_keeps_its_shape(capsys):
    first = load(capsys)
    assert set(first) >= {"runs", "users", "scenarios", "staged"}
    assert [s["tool"] for s in first["staged"]] == ["status.lookup", "docs.search"]
    again = load(capsys)
    assert again["staged"] == first["staged"] and StagedRecording.objects.count() == 2
    search = StagedRecording.objects.get(tool="docs.search")
    assert {f["rule"] for f in search.findings} == {"github-pat"}
    assert {r["rule"] for r in search.redactions} == {"secret-header", "signed-url-param"}
    assert search.encodings == {"response.body": "gzip+base64"}
    assert promotion_blockers(search) == ["1 unresolved finding(s)"]


def test_approving_the_demo_status_lookup_lets_the_research_replay_past_it(capsys):
    load(capsys)
    users = get_user_model().objects
    status = StagedRecording.objects.get(tool="status.lookup")
    with pytest.raises(ReviewRefused, match="needs the reviewer role"):
        recording_approve(recording=status, user=users.get(username="operator"))
    status = recording_approve(recording=status, user=users.get(username="reviewer"))
    assert status.scenario_version.ref == "docs-research@2"
    assert AuditEntry.objects.filter(action="recording.approve", target=status.public_id).count() == 1
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    before = json.loads(capsys.readouterr().out)
    assert before["state"] == "incomplete_test_world"  # the run names @1, which never changes
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--scenario", "docs-research@2", "--inline", "--json")
    after = json.loads(capsys.readouterr().out)
    assert after["state"] == "completed" and after["missing"] == [], after


def test_the_demo_shows_the_record_policy_refusing_a_live_send_and_a_failed_capture(capsys, client):
    first = load(capsys)
    assert [(c["connection"], c["state"]) for c in first["connections"]] == [
        ("status-service", "approved"),
        ("docs-api", "approved"),
        ("mail-provider", "approved"),
    ]
    send, lost = first["refused"]
    assert send["kind"] == "refused" and "a mutation recorded live through mail-provider" in send["reason"]
    assert lost["kind"] == "capture-failed" and "no fixture resulted" in lost["reason"]
    assert load(capsys)["refused"] == first["refused"]  # once, however often the demo loads
    entry = AuditEntry.objects.get(action="capture.refused", target=send["observation"])
    assert entry.actor == "operator" and entry.detail["connection"] == "mail-provider"
    client.force_login(get_user_model().objects.get(username="reviewer"))
    page = client.get("/review/record-policy/").content.decode()
    assert f'id="{send["observation"]}"' in page and "a mutation recorded live through mail-provider" in page
    assert f'id="{lost["observation"]}"' in page and "no fixture resulted" in page
    assert "approved by reviewer" in page
