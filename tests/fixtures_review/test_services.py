"""The review workflow as services: staging, reviewer actions, four eyes, promotion, minting, copy similar."""

from __future__ import annotations

import json
import random

import pytest
from django.core.management import call_command
from django.db.models import ProtectedError

from accounts.models import AuditEntry, HarnessToken
from console.append_only import HistoryIsAppendOnly
from fixtures_review import intake
from fixtures_review.models import FixtureVersion, ReviewEvent, ScenarioVersion, StagedRecording
from fixtures_review.scenarios import ScenarioRefused, loaded_scenario
from fixtures_review.services import (
    ReviewRefused,
    capture_stage,
    promotion_blockers,
    recording_approve,
    recording_copy_recorded,
    recording_copy_similar,
    recording_redact,
    recording_reject,
    recording_synthesize,
    scenario_version_mint,
)
from runs.models import Event, Run

from .conftest import search_capture, status_capture

pytestmark = pytest.mark.django_db


def stage(capture, user=None, token=None) -> StagedRecording:
    return capture_stage(raw=json.dumps(capture).encode(), user=user, token=token).recording


def token_of(user) -> HarnessToken:
    return HarnessToken.objects.create(
        name="harness",
        user=user,
        key_digest=HarnessToken.digest_key("k" + user.username),
        prefix="n17q_abcd",
        scopes=[HarnessToken.Scope.CAPTURE],
    )


# --- staging ------------------------------------------------------------------------------------------------------


def test_it_stages_the_example_capture_with_its_authorization_redacted(seed_scenarios):
    result = capture_stage(raw=json.dumps(status_capture()).encode())
    out = result.to_json()
    assert out["redactions"] == [{"path": "request.headers.Authorization", "rule": "secret-header"}]
    assert out["findings"] == [] and out["promotable"] is True
    rec = StagedRecording.objects.get(public_id=out["staged"])
    assert rec.request["headers"]["Authorization"] == intake.REDACTED
    assert rec.outcome == "not_found" and rec.normalized_request == {"request_id": "req-7781"}
    assert rec.original_digest.startswith("hmac:") and rec.state == "staged"
    assert [e.action for e in rec.events.all()] == ["staged"]


def test_it_refuses_a_bad_capture_naming_the_field_and_stores_nothing(seed_scenarios):
    capture = status_capture()
    capture["response"]["status"] = "404"
    with pytest.raises(intake.CaptureError, match=r"response\.status"):
        capture_stage(raw=json.dumps(capture).encode())
    assert StagedRecording.objects.count() == 0 and ReviewEvent.objects.count() == 0


def test_it_stages_a_capture_of_a_scenario_it_does_not_know_and_says_why_it_is_not_promotable(db):
    result = capture_stage(raw=json.dumps(status_capture(scenario="brand-new")).encode())
    assert result.to_json()["promotable"] is False
    assert "no version yet" in result.blockers[0]
    assert "no version of scenario brand-new" in result.recording.key_note


def test_it_reports_a_contract_mismatch_as_a_blocker(seed_scenarios):
    result = capture_stage(raw=json.dumps(status_capture(contract_revision=3)).encode())
    assert any("pins status.lookup revision 2" in b for b in result.blockers)


# --- four eyes, roles ---------------------------------------------------------------------------------------------


def test_the_capturer_cannot_approve_and_the_refusal_is_audited_not_written_into_review_history(
    seed_scenarios, role_user
):
    # Issue 16: a refused approval is a fact about the attempt (the audit log keeps who tried and why), not a
    # decision about the content: the recording's review history stays as it was.
    capturer = role_user("reviewer", "rita")
    rec = stage(status_capture(), user=capturer)
    before = list(rec.events.values_list("action", flat=True))
    with pytest.raises(ReviewRefused, match="four eyes: you captured this recording"):
        recording_approve(recording=rec, user=capturer)
    rec.refresh_from_db()
    assert rec.state == "staged" and ScenarioVersion.objects.filter(name="docs-research").count() == 1
    assert list(rec.events.values_list("action", flat=True)) == before
    (entry,) = AuditEntry.objects.filter(action="recording.approve_refused", target=rec.public_id)
    assert entry.actor_user_id == capturer.pk and "four eyes" in entry.detail["reason"]


def test_the_owner_of_the_capturing_token_cannot_approve(seed_scenarios, role_user):
    owner = role_user("reviewer", "harness-owner")
    rec = stage(status_capture(), token=token_of(owner))
    with pytest.raises(ReviewRefused, match="own the token that captured it"):
        recording_approve(recording=rec, user=owner)
    assert recording_approve(recording=rec, user=role_user("reviewer", "other")).state == "promoted"


@pytest.mark.parametrize(
    ("act", "said"),
    [
        (
            lambda rec, who: recording_synthesize(
                recording=rec, path="response.body.error", value="gone", user=who, fidelity_note="made up for a test"
            ),
            "you synthesized response.body.error in it",
        ),
        (
            lambda rec, who: recording_redact(recording=rec, path="response.headers.Content-Type", user=who),
            "you redacted response.headers.Content-Type in it",
        ),
    ],
)
def test_a_reviewer_who_wrote_part_of_the_content_cannot_approve_it_alone(seed_scenarios, role_user, act, said):
    # On 775880e a reviewer could synthesize the whole response of anyone's recording and approve it alone.
    author = role_user("reviewer", "author")
    rec = stage(status_capture(), user=role_user("operator", "capturer"))
    rec = act(rec, author)
    with pytest.raises(ReviewRefused, match=f"four eyes: {said}"):
        recording_approve(recording=rec, user=author, revision=rec.revision)
    rec.refresh_from_db()
    assert rec.state == "staged" and not rec.events.filter(action="refused").exists()
    assert AuditEntry.objects.filter(action="recording.approve_refused", actor_user_id=author.pk).exists()
    approved = recording_approve(recording=rec, user=role_user("reviewer", "second"), revision=rec.revision)
    assert approved.state == "promoted" and approved.fixture_version.approved_by.username == "second"


def test_the_author_of_a_copy_similar_cannot_approve_it(seed_scenarios, role_user):
    from fixtures_review.services import content_authors

    rec = stage(status_capture(), user=role_user("operator", "capturer"))
    copier = role_user("reviewer", "copier")
    authors = content_authors(rec)
    assert authors == {rec.captured_by_id: "captured this recording"}
    rec.excluded_approvers = [copier.pk]
    rec.captured_by = copier
    rec.origin = StagedRecording.Origin.COPY_SIMILAR
    assert content_authors(rec) == {copier.pk: "copied this recording from a similar one"}


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_approving_needs_the_reviewer_role(seed_scenarios, role_user, role):
    rec = stage(status_capture())
    with pytest.raises(ReviewRefused, match="needs the reviewer role"):
        recording_approve(recording=rec, user=role_user(role))
    with pytest.raises(ReviewRefused, match="needs the reviewer role"):
        recording_redact(recording=rec, path="response.body.error", user=role_user(role, f"{role}-2"))


# --- findings, redaction, synthesis ---------------------------------------------------------------------------------


def test_an_unresolved_finding_blocks_approval_until_a_reviewer_redacts_its_path(seed_scenarios, role_user):
    leaked = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    rec = stage(
        status_capture(response={"status": 404, "headers": {}, "body": {"error": "not_found", "debug": leaked}})
    )
    assert rec.findings[0]["path"] == "response.body.debug" and rec.findings[0]["rule"] == "github-pat"
    assert leaked not in json.dumps(rec.response)
    reviewer = role_user("reviewer")
    with pytest.raises(ReviewRefused, match="1 unresolved finding"):
        recording_approve(recording=rec, user=reviewer)
    rec = recording_redact(recording=rec, path="response.body.debug", user=reviewer, reason="a token in a debug field")
    assert rec.response["body"]["debug"] == intake.REDACTED and rec.revision == 2
    # The redacting reviewer wrote part of the content: another reviewer approves it.
    rec = recording_approve(recording=rec, user=role_user("reviewer", "second-reviewer"), revision=2)
    fixture = rec.fixture_version.fixture
    assert fixture["response"]["absent"] == {"debug": "redacted"}


def test_synthesizing_a_value_that_changes_meaning_needs_a_fidelity_note(seed_scenarios, role_user):
    rec = stage(status_capture())
    reviewer = role_user("reviewer")
    with pytest.raises(ReviewRefused, match="fidelity"):
        recording_synthesize(recording=rec, path="response.body.error", value="gone", user=reviewer)
    rec = recording_synthesize(recording=rec, path="request.headers.Accept", value="*/*", user=reviewer)
    assert rec.synthetic is False  # a transport header: meaning unchanged
    rec = recording_synthesize(
        recording=rec, path="response.body.error", value="gone", user=reviewer, fidelity_note="wording invented"
    )
    assert rec.synthetic is True and "wording invented" in rec.fidelity_note
    rec = recording_approve(recording=rec, user=role_user("reviewer", "second"))
    assert rec.fixture_version.fixture["provenance"]["synthetic"] is True


def test_a_replacement_that_looks_like_a_secret_is_refused(seed_scenarios, role_user):
    rec = stage(status_capture())
    with pytest.raises(ReviewRefused, match="looks like a secret"):
        recording_synthesize(
            recording=rec,
            path="request.headers.Accept",
            value="AKIA" + "".join(random.choices("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", k=16)),
            user=role_user("reviewer"),
        )


def test_redacting_an_argument_is_refused_because_it_is_the_fixture_key(seed_scenarios, role_user):
    rec = stage(status_capture())
    with pytest.raises(ReviewRefused, match="part of the fixture key"):
        recording_redact(recording=rec, path="request.args.request_id", user=role_user("reviewer"))


def test_an_action_on_a_stale_revision_is_refused(seed_scenarios, role_user):
    rec = stage(status_capture())
    reviewer = role_user("reviewer")
    recording_redact(recording=rec, path="request.headers.Accept", user=reviewer)
    with pytest.raises(ReviewRefused, match="changed since you opened it"):
        recording_redact(recording=rec, path="response.headers.Content-Type", user=reviewer, revision=1)
    with pytest.raises(ReviewRefused, match="changed meanwhile"):
        recording_approve(recording=rec, user=role_user("reviewer", "second-reviewer"), revision=1)


def test_a_path_the_recording_does_not_hold_is_refused(seed_scenarios, role_user):
    rec = stage(status_capture())
    with pytest.raises(ReviewRefused, match="holds nothing there"):
        recording_redact(recording=rec, path="response.body.nope", user=role_user("reviewer"))


def test_rejecting_needs_a_reason_and_ends_the_review(seed_scenarios, role_user):
    rec = stage(status_capture())
    reviewer = role_user("reviewer")
    with pytest.raises(ReviewRefused, match="needs a reason"):
        recording_reject(recording=rec, reason="  ", user=reviewer)
    rec = recording_reject(recording=rec, reason="captured against the wrong account", user=reviewer)
    assert rec.state == "rejected"
    with pytest.raises(ReviewRefused, match="already rejected"):
        recording_approve(recording=rec, user=role_user("reviewer", "second"))


def test_review_events_are_append_only(seed_scenarios):
    rec = stage(status_capture())
    event = rec.events.get()
    event.reason = "rewritten"
    with pytest.raises(HistoryIsAppendOnly):
        event.save()
    with pytest.raises(HistoryIsAppendOnly):
        ReviewEvent.objects.all().delete()


def test_a_person_named_in_review_history_cannot_be_deleted_and_the_history_keeps_their_name(seed_scenarios, role_user):
    reviewer = role_user("reviewer")
    rec = recording_approve(recording=stage(status_capture()), user=reviewer)
    with pytest.raises(ProtectedError):
        reviewer.delete()
    reviewer.refresh_from_db()  # still there: deactivate an account instead
    assert rec.events.get(action=ReviewEvent.Action.APPROVE).actor_id == reviewer.pk
    assert rec.fixture_version.approved_by_id == reviewer.pk
    assert rec.scenario_version.imported_by_id == reviewer.pk


# --- promotion ------------------------------------------------------------------------------------------------------


def test_approval_mints_a_content_addressed_fixture_and_a_new_scenario_version_pinning_it(seed_scenarios, role_user):
    v1 = seed_scenarios["docs-research"]
    rec = recording_approve(recording=stage(status_capture()), user=role_user("reviewer"))
    v2 = rec.scenario_version
    assert (v2.ref, v2.source, v2.based_on_id) == ("docs-research@2", "promotion", v1.pk)
    assert v2 is not None
    loaded = loaded_scenario(v2)
    fixture = next(f for f in loaded.fixtures if f.tool == "status.lookup")
    assert fixture.id == rec.fixture_version.fixture_id and fixture.response.outcome == "not_found"
    assert rec.fixture_version.digest.startswith("sha256:") and rec.fixture_version.fixture_id.startswith("fx-")
    # The old version is untouched: replays pinned to it see what they saw.
    assert not any(f.tool == "status.lookup" for f in loaded_scenario(v1).fixtures)
    assert rec.events.last().detail["scenario"] == "docs-research@2"


def test_approving_twice_mints_once(seed_scenarios, role_user):
    rec = stage(status_capture())
    recording_approve(recording=rec, user=role_user("reviewer"))
    with pytest.raises(ReviewRefused, match="already promoted"):
        recording_approve(recording=rec, user=role_user("reviewer", "second"))
    assert FixtureVersion.objects.count() == 1
    assert ScenarioVersion.objects.filter(name="docs-research").count() == 2


def test_a_contract_test_failure_refuses_the_approval(seed_scenarios, role_user):
    rec = stage(status_capture(response={"status": 500, "headers": {}, "body": {"error": "boom"}}))
    with pytest.raises(ReviewRefused, match=r"contract test: .*'error' is not an outcome of status.lookup"):
        recording_approve(recording=rec, user=role_user("reviewer"))
    rec.refresh_from_db()
    assert rec.state == "staged" and FixtureVersion.objects.count() == 0
    assert promotion_blockers(rec)


def test_a_recapture_of_the_same_request_replaces_the_fixture_instead_of_making_it_ambiguous(seed_scenarios, role_user):
    reviewer = role_user("reviewer")
    first = recording_approve(recording=stage(status_capture()), user=reviewer)
    again = stage(status_capture(response={"status": 200, "headers": {}, "body": {"state": "sent"}}))
    with pytest.raises(ReviewRefused, match=r"docs-research@2 already answers this request .* Say why in a note"):
        recording_approve(recording=again, user=reviewer)
    assert ScenarioVersion.objects.filter(name="docs-research").count() == 2  # refused before anything was minted
    second = recording_approve(recording=again, user=reviewer, note="the provider's answer changed on 2026-07-02")
    assert second.scenario_version.version == 3
    approval = second.events.get(action="approve")
    assert (
        approval.reason == "the provider's answer changed on 2026-07-02"
        and "already answers" in approval.detail["replaces"]
    )
    assert second.scenario_version is not None
    loaded = loaded_scenario(second.scenario_version)
    status = [f for f in loaded.fixtures if f.tool == "status.lookup"]
    assert [f.id for f in status] == [second.fixture_version.fixture_id] != [first.fixture_version.fixture_id]


# --- minting --------------------------------------------------------------------------------------------------------


def test_mint_adds_fixtures_and_excludes_tools_with_their_reasons(seed_scenarios, role_user):
    base = seed_scenarios["docs-research"]
    fixture = {
        "tool": "status.lookup",
        "contract_revision": 2,
        "request": {"request_id": "req-1"},
        "response": {"outcome": "ok", "body": {"state": "sent"}, "absent": {}},
        "provenance": {
            "recorded_at": "2026-07-01T09:00:00Z",
            "source_revision": None,
            "connection": "authored",
            "synthetic": True,
            "fidelity_note": "authored against the simulator",
        },
    }
    v2 = scenario_version_mint(base=base, add_fixtures=[fixture], user=role_user("reviewer"), source="test")
    assert v2.ref == "docs-research@2"
    v3 = scenario_version_mint(
        base=v2, exclude_tools={"docs.search": "search is out of scope here"}, user=None, source="regression"
    )
    loaded = loaded_scenario(v3)
    assert loaded.excluded("docs.search") == "search is out of scope here"
    assert {f.tool for f in loaded.fixtures} == {"status.lookup"}


def test_mint_numbers_after_the_latest_version_even_from_an_older_base(seed_scenarios):
    base = seed_scenarios["docs-research"]
    a = scenario_version_mint(base=base, exclude_tools={"status.lookup": "a"}, user=None, source="test")
    b = scenario_version_mint(base=base, exclude_tools={"status.lookup": "b"}, user=None, source="test")
    assert (a.version, b.version) == (2, 3) and b.based_on_id == base.pk


def test_mint_refuses_a_fixture_that_breaks_its_contract_and_stores_nothing(seed_scenarios):
    bad = {
        "tool": "status.lookup",
        "contract_revision": 2,
        "request": {"request_id": "req-1", "extra": 1},
        "response": {"outcome": "ok", "body": None, "absent": {}},
        "provenance": {
            "recorded_at": "2026-07-01T09:00:00Z",
            "source_revision": None,
            "connection": "x",
            "synthetic": False,
            "fidelity_note": None,
        },
    }
    with pytest.raises(ScenarioRefused, match="extra"):
        scenario_version_mint(base=seed_scenarios["docs-research"], add_fixtures=[bad], user=None, source="test")
    assert ScenarioVersion.objects.filter(name="docs-research").count() == 1


def test_mint_needs_a_reason_to_exclude_a_tool(seed_scenarios):
    with pytest.raises(ScenarioRefused, match="say why"):
        scenario_version_mint(
            base=seed_scenarios["docs-research"], exclude_tools={"docs.search": " "}, user=None, source="test"
        )


# --- copy similar ---------------------------------------------------------------------------------------------------


@pytest.fixture
def paused_000(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "incomplete_test_world"
    run = Run.objects.get(run_id=out["run"])
    event = Event.objects.get(run=run, kind="fixture.missing")
    return run, {"event": event.event_id, **event.body}


def test_it_refuses_to_copy_another_tools_fixture_or_an_empty_answer_where_one_was_recorded(paused_000, role_user):
    run, missing = paused_000
    operator = role_user("reviewer", "oscar")
    with pytest.raises(ReviewRefused, match=r"answers docs\.search, not status\.lookup"):
        recording_copy_similar(
            replay_run=run, missing_event_id=missing["event"], like_fixture_id="search-rotate-keys", user=operator
        )
    with pytest.raises(ReviewRefused, match=r"recorded an answer to this request \(not_found"):
        recording_copy_similar(replay_run=run, missing_event_id=missing["event"], like_fixture_id=None, user=operator)
    assert not StagedRecording.objects.filter(origin="copy-similar").exists()


def test_it_copies_a_fixture_of_the_same_tool_as_a_synthetic_candidate(paused_000, role_user, capsys):
    base = ScenarioVersion.objects.get(name="docs-research", version=1)
    other = {
        "tool": "status.lookup",
        "contract_revision": 2,
        "request": {"request_id": "req-1"},
        "response": {"outcome": "ok", "body": {"request_id": "req-1", "status": "open"}, "absent": {}},
        "provenance": {
            "recorded_at": "2026-07-01T09:00:00Z",
            "source_revision": None,
            "connection": "status-service",
            "synthetic": False,
            "fidelity_note": None,
        },
    }
    v2 = scenario_version_mint(base=base, add_fixtures=[other], user=None, source="test")
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--scenario", v2.ref, "--inline", "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "incomplete_test_world"
    run = Run.objects.get(run_id=out["run"])
    missing = Event.objects.get(run=run, kind="fixture.missing")
    assert missing.body["tool"] == "status.lookup"
    like = next(f["id"] for f in v2.fixture_items if f["tool"] == "status.lookup")
    rec = recording_copy_similar(
        replay_run=run, missing_event_id=missing.event_id, like_fixture_id=like, user=role_user("reviewer", "oscar")
    )
    assert (rec.origin, rec.synthetic, rec.tool, rec.outcome) == ("copy-similar", True, "status.lookup", "ok")
    assert rec.response["body"] == {"request_id": "req-1", "status": "open"} and like in rec.fidelity_note
    assert rec.request_digest == missing.body["request_digest"]


def test_it_copies_the_recorded_answer_through_intake_and_review(paused_000, role_user, capsys):
    run, missing = paused_000
    operator = role_user("reviewer", "oscar")  # a reviewer who copied it: four eyes still applies
    rec = recording_copy_recorded(replay_run=run, missing_event_id=missing["event"], user=operator)
    assert (rec.origin, rec.synthetic, rec.outcome, rec.response["status"]) == (
        "copy-recorded",
        False,
        "not_found",
        404,
    )
    assert rec.response["body"] == {"request_id": "req-7781", "status": "not_found", "consistency_window_s": 30}
    assert rec.tool == "status.lookup" and rec.request_digest == missing["request_digest"]
    assert rec.copied_from["result"] == "e-000-res-status" and "e-000-res-status" in rec.fidelity_note  # type: ignore[index]
    assert rec.state == "staged" and ScenarioVersion.objects.filter(name="docs-research").count() == 1
    # Staging satisfies nothing: the same replay still stops at the same place.
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    assert json.loads(capsys.readouterr().out)["state"] == "incomplete_test_world"
    with pytest.raises(ReviewRefused, match="four eyes: you copied this recording from a run's recorded answer"):
        recording_approve(recording=rec, user=operator)
    rec = recording_approve(recording=rec, user=role_user("reviewer", "rory"))
    assert rec.scenario_version.ref == "docs-research@2"
    (fixture,) = [f for f in rec.scenario_version.fixture_items if f["tool"] == "status.lookup"]
    assert fixture["response"]["outcome"] == "not_found"  # never 200/empty where the recording saw 404
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--scenario", "docs-research@2", "--inline", "--json")
    after = json.loads(capsys.readouterr().out)
    assert all(m["tool"] != "status.lookup" for m in after["missing"])


def test_copy_similar_refuses_an_event_that_is_not_a_missing_fixture(paused_000, role_user):
    run, _missing = paused_000
    with pytest.raises(ReviewRefused, match=r"no fixture\.missing event"):
        recording_copy_similar(
            replay_run=run, missing_event_id="nope", like_fixture_id=None, user=role_user("reviewer")
        )


def test_copy_similar_refuses_a_fixture_the_scenario_does_not_hold(paused_000, role_user):
    run, missing = paused_000
    with pytest.raises(ReviewRefused, match="holds no fixture"):
        recording_copy_similar(
            replay_run=run, missing_event_id=missing["event"], like_fixture_id="nope", user=role_user("reviewer")
        )


def test_the_same_answer_as_a_promoted_fixture_is_no_conflict_whatever_defaults_it_spells_out(seed_scenarios):
    # The seed packages write fixtures without `absent`; a promoted recording writes `absent: {}`. The same answer
    # was flagged as "a second body for this key" (and approval then demanded a note) on the demo's own run results.
    from fixtures_review.services import promoted_key_conflict

    seed = next(
        f
        for f in ScenarioVersion.objects.get(name="docs-research", version=1).fixture_items
        if f["tool"] == "docs.search" and f["id"] == "search-rotate-keys"
    )
    assert "absent" not in seed["response"]
    same = stage(search_capture(body=seed["response"]["body"]))
    assert promoted_key_conflict(same) is None
    other = stage(search_capture(body={"hits": []}))
    assert "already answers this request with fixture search-rotate-keys" in (promoted_key_conflict(other) or "")


def test_a_copy_the_staging_refuses_is_a_reviewers_refusal_in_one_line(paused_000, role_user, monkeypatch):
    # Issue 33: staging refuses a capture whose effect class is not its contract's. A copy takes its effect class
    # from the replay's scenario ("read" when it pins no contract), so a contract declared to the console can
    # disagree: the refusal reaches the page as a ReviewRefused, not as an error the view does not catch.
    from fixtures_review import staging

    def disagree(cap, contract):
        raise staging.EffectClassRefused("effect_class: status.lookup revision 2 is a mutation, the capture says read")

    monkeypatch.setattr(staging, "_effect_class_check", disagree)
    run, missing = paused_000
    with pytest.raises(ReviewRefused, match=r"the copy cannot be staged: effect_class: status\.lookup revision 2"):
        recording_copy_recorded(replay_run=run, missing_event_id=missing["event"], user=role_user("reviewer", "o"))
    assert not StagedRecording.objects.filter(origin="copy-recorded").exists()
