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
    mutation_gaps,
    promotion_blockers,
    recording_approve,
    recording_declare_no_change,
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


# ---- issue 34 point 5: an ambiguous answer needs a world (seed 000: "a static error was insufficient for ambiguous
# outcomes"): a mutation answered unknown, timeout or error is promoted only with the world transition it made, or a
# reviewer's explicit "no change" with its reason.


def ambiguous(status: int, *, transition=None) -> dict:
    capture = send_capture(body={"error": "upstream did not answer"}, transition=transition)
    capture["response"]["status"] = status
    return capture


@pytest.mark.parametrize("outcome", ["unknown", "timeout", "error"])
def test_the_mutation_test_asks_an_ambiguous_answer_for_its_world(outcome):
    fixture = {"response": {"outcome": outcome, "body": {"error": "upstream did not answer"}}}
    assert mutation_gaps(fixture, "mutation") == ["world transition", "reviewed no-change"]
    assert mutation_gaps({**fixture, "transition": TRANSITION}, "mutation") == []
    assert mutation_gaps(fixture, "mutation", no_change="the provider's log shows nothing") == []
    assert mutation_gaps(fixture, "mutation", no_change="  ") == ["world transition", "reviewed no-change"]
    assert mutation_gaps(fixture, "read") == []
    assert mutation_gaps({"response": {"outcome": "denied"}}, "mutation") == []


def test_an_ambiguous_mutation_answer_without_a_world_is_not_promotable(seed_scenarios, role_user):
    # email.send revision 3 answers ok, error or denied: a 500 is its ambiguous answer (no seed mutation contract
    # admits timeout or unknown; the rule above covers them alike).
    rec = capture_stage(raw=ambiguous(500)).recording
    assert rec.outcome == "error"
    (blocker,) = promotion_blockers(rec)
    assert "(email.send, a mutation answered error)" in blocker and "\n" not in blocker
    assert "declares no world transition and no reviewed no-change" in blocker
    with pytest.raises(ReviewRefused, match="no world transition and no reviewed no-change"):
        recording_approve(recording=rec, user=role_user("reviewer"))
    rec.refresh_from_db()
    assert rec.state == "staged" and rec.fixture_version is None


def test_an_ambiguous_answer_with_its_world_transition_is_promoted(seed_scenarios, role_user):
    rec = capture_stage(raw=ambiguous(500, transition=TRANSITION)).recording
    assert promotion_blockers(rec) == []
    assert recording_approve(recording=rec, user=role_user("reviewer")).fixture_version.fixture["transition"]


def test_a_reviewed_no_change_with_its_reason_makes_it_promotable_by_another_reviewer(seed_scenarios, role_user):
    rec = capture_stage(raw=ambiguous(500)).recording
    declarer, approver = role_user("reviewer", "rhea"), role_user("reviewer", "sam")
    with pytest.raises(ReviewRefused, match="needs its reason"):
        recording_declare_no_change(recording=rec, reason="  ", user=declarer)
    rec = recording_declare_no_change(
        recording=rec, reason="the provider's log shows no message for draft dr-7001", user=declarer
    )
    assert rec.no_change_reason.startswith("the provider's log") and promotion_blockers(rec) == []
    event = rec.events.get(action="no_change")
    assert (event.actor, event.reason) == (declarer, rec.no_change_reason)
    with pytest.raises(ReviewRefused, match="four eyes: you declared that its answer changed nothing"):
        recording_approve(recording=rec, user=declarer)
    promoted = recording_approve(recording=rec, user=approver, revision=rec.revision)
    assert promoted.state == "promoted" and "transition" not in promoted.fixture_version.fixture
    assert promoted.events.get(action="approve").detail["no_change"] == rec.no_change_reason


def test_no_change_is_refused_where_it_means_nothing(seed_scenarios, role_user):
    reviewer = role_user("reviewer")
    denied = ambiguous(403)
    with pytest.raises(ReviewRefused, match="only for an ambiguous answer"):
        recording_declare_no_change(recording=capture_stage(raw=denied).recording, reason="x", user=reviewer)
    with pytest.raises(ReviewRefused, match="changes no world state"):
        recording_declare_no_change(recording=capture_stage(raw=status_capture()).recording, reason="x", user=reviewer)
    with_world = capture_stage(raw=ambiguous(500, transition=TRANSITION)).recording
    with pytest.raises(ReviewRefused, match="declares a world transition"):
        recording_declare_no_change(recording=with_world, reason="x", user=reviewer)


def test_the_review_page_offers_no_change_and_refuses_approval_in_one_line(seed_scenarios, client, role_user):
    rec = capture_stage(raw=ambiguous(500)).recording
    rhea, sam = role_user("reviewer", "rhea"), role_user("reviewer", "sam")
    client.force_login(rhea)
    url = reverse("fixtures:recording", args=[rec.public_id])
    page = client.get(url).content.decode()
    assert 'id="no-change-form"' in page and "no world transition and no reviewed no-change" in page
    refused = client.post(reverse("fixtures:action", args=[rec.public_id, "approve"]), {"revision": rec.revision})
    assert refused.status_code == 302
    shown = client.get(url).content.decode()
    assert "Approve refused: mutation test: fixture fx-" in shown
    empty = client.post(
        reverse("fixtures:action", args=[rec.public_id, "no-change"]), {"reason": "", "revision": rec.revision},
        follow=True,
    )  # fmt: skip
    assert b"No change refused: declaring no change needs its reason" in empty.content
    declared = client.post(
        reverse("fixtures:action", args=[rec.public_id, "no-change"]),
        {"reason": "the provider's log shows no message", "revision": rec.revision},
        follow=True,
    )
    assert b"Declared no change" in declared.content
    rec.refresh_from_db()
    assert rec.no_change_reason == "the provider's log shows no message"
    page = client.get(url).content.decode()
    assert 'id="no-change"' in page and 'id="no-change-form"' not in page
    client.force_login(sam)
    approved = client.post(
        reverse("fixtures:action", args=[rec.public_id, "approve"]), {"revision": rec.revision}, follow=True
    )
    assert b"Approved: fixture version" in approved.content
    assert StagedRecording.objects.get(pk=rec.pk).state == "promoted"


def test_the_capture_api_says_an_ambiguous_mutation_is_not_promotable_and_why(seed_scenarios, client, role_user):
    from accounts.models import HarnessToken

    key = HarnessToken.new_key()
    harness = role_user("operator", "harness")
    HarnessToken.objects.create(name="ci", user=harness, key_digest=HarnessToken.digest_key(key), prefix=key[:9],
                                scopes=[HarnessToken.Scope.CAPTURE])  # fmt: skip
    response = client.post(
        reverse("api-captures"), data=json.dumps(ambiguous(500)), content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["promotable"] is False
    (blocker,) = body["blockers"]
    assert "a mutation answered error" in blocker and "no world transition and no reviewed no-change" in blocker


@pytest.mark.seed("003", "The release gate became the scenario")
def test_a_recording_over_its_contracts_output_bound_is_not_promotable(seed_scenarios, role_user):
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios as seeds
    from n17q_engine.package import SCENARIO_FILES, build_scenario

    email = next(p for p in seeds.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery")
    files = {name: json.loads(email.files[name]) for name in SCENARIO_FILES}
    files["scenario.json"]["version"] = 2
    send = next(c for c in files["contracts.json"] if c["tool"] == "email.send")
    send["max_output_bytes"] = 128
    scenario_import(build_scenario(files), source="demo")

    rec = capture_stage(raw=send_capture(body={"receipt": "r-1", "trace": "x" * 200}, transition=TRANSITION)).recording
    (blocker,) = promotion_blockers(rec)
    assert blocker.startswith("contract test: output bound: fixture fx-")
    assert "over the 128 bytes email.send revision 3 declares (max_output_bytes)" in blocker
    with pytest.raises(ReviewRefused, match="output bound"):
        recording_approve(recording=rec, user=role_user("reviewer"))
    fits = capture_stage(raw=send_capture(body={"receipt": "r-2"}, transition=TRANSITION)).recording
    assert promotion_blockers(fits) == []
