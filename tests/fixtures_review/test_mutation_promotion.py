"""Missing mutations are treated most strictly (issue 19 point 2; seed 000 "Missing mutations were treated most
strictly", seed 001 "The simulated world started from a snapshot"): a fixture for a mutating tool is promoted only
with the world transition it made and the receipt it answered with; a tool that cannot be modelled credibly is
excluded with its documented limitation, and a replay that calls it stops precisely."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.models import AuditEntry
from fixtures_review.models import StagedRecording
from fixtures_review.services import (
    ReviewRefused,
    capture_stage,
    promotion_blockers,
    recording_approve,
    recording_exclude_tool,
)
from tests.fixtures_review.conftest import status_capture

pytestmark = pytest.mark.django_db


def send_capture(*, body=None, transition=None) -> dict:
    """seed 001's send, recorded through the mail provider's sandbox (tests/conftest.py approves `mail-sandbox`)."""
    return status_capture(
        scenario="email-delivery",
        tool="email.send",
        contract_revision=3,
        connection="mail-sandbox",
        effect_class="mutation",
        request={
            "method": "POST",
            "url": "https://mail.sandbox.example/send",
            "headers": {},
            "body": None,
            "args": {"draft_id": "dr-7001"},
        },
        response={"status": 200, "headers": {}, "body": body},
        proposed_transition=transition,
    )


TRANSITION = {"resource": "mailbox:dr-7001", "revision_before": None, "revision_after": 1, "change": {"sent": True}}


def test_a_static_success_for_a_mutation_names_the_fixture_and_both_missing_parts(seed_scenarios, role_user):
    # "OK" as the whole answer: the provider said it happened, and nothing says what happened.
    rec = capture_stage(raw=send_capture(body="OK")).recording
    (blocker,) = promotion_blockers(rec)
    assert blocker.startswith("mutation test: fixture fx-") and "(email.send, a mutation answered ok)" in blocker
    assert "declares no world transition and no expected receipt" in blocker
    with pytest.raises(ReviewRefused, match="declares no world transition and no expected receipt"):
        recording_approve(recording=rec, user=role_user("reviewer"))
    assert AuditEntry.objects.get(action="recording.approve_refused", target=rec.public_id).detail["reason"] == blocker
    rec.refresh_from_db()
    assert rec.state == "staged" and rec.fixture_version is None


def test_a_receipt_without_a_world_transition_is_refused_too(seed_scenarios):
    rec = capture_stage(raw=send_capture(body={"message_id": "m-1"})).recording
    (blocker,) = promotion_blockers(rec)
    assert "declares no world transition:" in blocker and "receipt" not in blocker.split(":")[1]


def test_a_mutation_with_its_transition_and_receipt_is_promoted(seed_scenarios, role_user):
    rec = capture_stage(raw=send_capture(body={"message_id": "m-1"}, transition=TRANSITION)).recording
    assert promotion_blockers(rec) == []
    promoted = recording_approve(recording=rec, user=role_user("reviewer"))
    assert promoted.state == "promoted" and promoted.fixture_version.fixture["transition"] == TRANSITION


def test_a_refused_failure_is_no_mutation_success_and_needs_no_transition(seed_scenarios):
    capture = send_capture(body={"error": "denied"})
    capture["response"]["status"] = 403
    assert promotion_blockers(capture_stage(raw=capture).recording) == []


def test_excluding_the_tool_records_its_limitation_and_a_replay_calling_it_stops_precisely(
    capsys, client, role_user, reviewed_connections
):
    call_command("load_demo", "--json")
    capsys.readouterr()
    rec = capture_stage(raw=send_capture(body="OK")).recording
    reviewer = role_user("reviewer", "second-reviewer")
    limitation = "the provider's bounce handling cannot be simulated credibly"
    with pytest.raises(ReviewRefused, match="needs its limitation"):
        recording_exclude_tool(recording=rec, limitation=" ", user=reviewer)
    rec = recording_exclude_tool(recording=rec, limitation=limitation, user=reviewer)
    version = rec.scenario_version
    assert rec.state == "rejected" and version.scenario_json["excluded_tools"] == [
        {"tool": "email.send", "reason": limitation}
    ]
    assert not [f for f in version.fixture_items if f["tool"] == "email.send"]
    client.force_login(reviewer)
    page = client.get(reverse("fixtures:scenario", args=[version.name, version.version])).content.decode()
    assert "<code>email.send</code>: " + limitation.replace("'", "&#x27;") in page
    call_command("replay", "run-001-recorded", "--mode", "rerun", "--scenario", version.ref, "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "incomplete_test_world", out
    assert len(out["missing"]) == 1, out
    missing = out["missing"][0]
    assert missing["tool"] == "email.send", missing
    assert missing["excluded"] == {"tool": "email.send", "reason": limitation}
    assert missing["reason"].startswith("excluded: email.send is a mutation this scenario version excludes")
    assert missing["intent_id"]  # the send is the effect of an intent: it stopped before the execution


def test_the_recording_page_offers_exclusion_for_a_mutation_only(seed_scenarios, client, role_user):
    client.force_login(role_user("reviewer"))
    send = capture_stage(raw=send_capture(body="OK")).recording
    page = client.get(reverse("fixtures:recording", args=[send.public_id])).content.decode()
    assert 'id="exclude-form"' in page and "declares no world transition" in page
    read = capture_stage(raw=status_capture()).recording
    assert 'id="exclude-form"' not in client.get(reverse("fixtures:recording", args=[read.public_id])).content.decode()
    response = client.post(
        reverse("fixtures:action", args=[send.public_id, "exclude"]),
        {"limitation": "cannot be modelled", "revision": send.revision},
        follow=True,
    )
    assert b"Excluded email.send: scenario version email-delivery@2 records why." in response.content
    assert StagedRecording.objects.get(pk=send.pk).state == "rejected"
