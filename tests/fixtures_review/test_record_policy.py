"""Record mode's fail-closed edges (issue 19, seed 000 "Record mode needed its own fail-closed edges"): captures come
only through reviewed connections, and what the policy refuses leaves its reason, an audit entry and a safe request
observation behind; a capture that failed after a live read keeps only that observation and says no fixture resulted.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounts.models import AuditEntry
from fixtures_review.connections import (
    CaptureRefused,
    ConnectionRefused,
    connection_approve,
    connection_change,
    connection_propose,
    connection_retire,
)
from fixtures_review.intake import CaptureError
from fixtures_review.models import Connection, RequestObservation, StagedRecording
from fixtures_review.services import capture_receive, capture_stage
from tests.conftest import approve_test_connection
from tests.fixtures_review.conftest import search_capture, status_capture

pytestmark = pytest.mark.django_db


def refused(capture: dict, said: str) -> RequestObservation:
    """Stage `capture`, expect the policy's refusal saying `said`; nothing staged; the observation it kept."""
    before = StagedRecording.objects.count()
    with pytest.raises(CaptureRefused, match=said) as caught:
        capture_stage(raw=capture)
    assert StagedRecording.objects.count() == before
    observation = caught.value.observation
    assert observation.kind == "refused" and re.search(said, observation.reason)
    entry = AuditEntry.objects.get(action="capture.refused", target=observation.public_id)
    assert entry.detail["reason"] == observation.reason and entry.detail["connection"] == capture["connection"]
    return observation


def test_the_example_capture_is_staged_through_its_reviewed_connection_with_the_policy_resolved():
    result = capture_stage(raw=status_capture())
    rec = result.recording
    assert (rec.connection, rec.source_class, rec.account_scope, rec.result_class) == (
        "status-service",
        "api",
        "test-account",
        "internal",
    )


def test_an_unknown_connection_is_refused_with_a_safe_request_observation():
    capture = status_capture(connection="status-shadow")
    capture["request"]["args"] = {"request_id": "req-7781", "api_key": "sk-live-abcdefghijklmnop"}
    obs = refused(capture, "connection status-shadow: not a reviewed connection")
    assert (obs.tool, obs.method, obs.effect_class, obs.door) == ("status.lookup", "GET", "read", "capture")
    # The digest is of the arguments after redaction: the key never reaches it, nor any stored field.
    stored = json.dumps(list(RequestObservation.objects.values()), default=str)
    assert "sk-live" not in stored and "status.example" not in stored and obs.request_digest.startswith("sha256:")
    assert "sk-live" not in json.dumps(list(AuditEntry.objects.values("detail")), default=str)


def test_a_secret_pasted_into_a_policy_key_is_masked_in_the_refusal():
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    obs = refused(status_capture(account_scope=token), "account_scope: .* is not an account approved")
    assert token not in obs.reason
    assert token not in json.dumps(list(AuditEntry.objects.values("detail")), default=str)


def test_a_proposed_or_retired_connection_is_refused(role_user, reviewed_connections):
    proposer, approver = role_user("reviewer", "p"), role_user("reviewer", "a")
    connection_propose(
        name="status-next",
        user=proposer,
        source_classes=["api"],
        capabilities=["read"],
        account_scopes=["test-account"],
        capture_result_classes=["internal"],
        default_result_class="internal",
    )
    refused(status_capture(connection="status-next"), "connection status-next: proposed .*not approved")
    connection_retire(connection=reviewed_connections["status-service"], user=approver)
    refused(status_capture(), "connection status-service: retired since .*not approved")


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"source_class": "partner-feed"}, "source_class: 'partner-feed' is not a source class approved for"),
        ({"account_scope": "other-account"}, "account_scope: 'other-account' is not an account approved"),
        ({"account_scope": ["test-account", "other-account"]}, "account_scope: 2 accounts named .*ambiguous"),
        ({"account_scope": "tenant-*"}, r"account_scope: 'tenant-\*' is a pattern, not one account: ambiguous"),
        ({"result_class": "personal"}, "result_class: personal results are excluded by the capture policy"),
        ({"effect_class": "mutation", "proposed_transition": None}, "a mutation recorded live through status-service"),
    ],
)
def test_the_policy_refuses_each_fail_closed_edge(changes, said):
    refused(status_capture(**changes), said)


def test_a_capture_naming_no_account_where_the_connection_records_several_is_ambiguous():
    approve_test_connection("docs-multi", account_scopes=["acme", "globex"])
    refused(search_capture(connection="docs-multi"), "account_scope: the capture names none and connection docs-multi")
    staged = capture_stage(raw=search_capture(connection="docs-multi", account_scope="globex"))
    assert staged.recording.account_scope == "globex"


def test_a_mutation_beyond_a_sandbox_connections_capabilities_is_refused_and_within_them_staged():
    approve_test_connection("mail-sandbox-reads", reaches="sandbox", capabilities=["read"])
    send = status_capture(
        connection="mail-sandbox-reads",
        effect_class="mutation",
        proposed_transition={"resource": "r", "revision_before": None, "revision_after": 1, "change": {}},
    )
    refused(send, "connection mail-sandbox-reads may record read only, not a mutation")
    staged = capture_stage(raw={**send, "connection": "mail-sandbox"})
    assert staged.recording.effect_class == "mutation"


def test_a_policy_change_sends_an_approved_connection_back_to_proposed(reviewed_connections):
    connection = reviewed_connections["status-service"]
    connection.capture_result_classes = ["public", "internal", "personal"]
    state = connection_change(connection=connection, user=None)
    assert state == "proposed" and connection.approved_by is None
    refused(status_capture(result_class="personal"), "connection status-service: proposed")
    assert AuditEntry.objects.filter(action="connection.change", target="status-service").exists()


def test_approving_a_connection_needs_another_reviewer_and_a_complete_policy(role_user):
    proposer = role_user("reviewer", "proposer")
    incomplete = connection_propose(name="half-done", user=proposer, capabilities=["read"])
    with pytest.raises(ConnectionRefused, match="four eyes: you proposed connection half-done"):
        connection_approve(connection=incomplete, user=proposer)
    with pytest.raises(ConnectionRefused, match="needs the reviewer role"):
        connection_approve(connection=incomplete, user=role_user("operator"))
    with pytest.raises(ConnectionRefused, match=r"incomplete .*no source class.*no account scope"):
        connection_approve(connection=incomplete, user=role_user("reviewer", "second"))
    assert Connection.objects.get(name="half-done").state == "proposed"
    assert AuditEntry.objects.filter(action="connection.approve_refused", target="half-done").count() == 3


# --- a capture that failed after a live read ----------------------------------------------------------------------


def failed_capture(**changes) -> dict:
    capture = status_capture(response=None, capture_failure="the connection dropped after the service answered")
    capture.update(changes)
    return capture


def test_a_failed_capture_keeps_only_the_request_observation_and_says_no_fixture_resulted():
    answer = capture_receive(raw=failed_capture())
    out = answer.to_json()
    assert out["staged"] is None and out["fixture"] is None and out["promotable"] is False
    assert "no fixture resulted" in out["note"] and out["observation"].startswith("ro-")
    assert StagedRecording.objects.count() == 0
    obs = RequestObservation.objects.get(public_id=out["observation"])
    assert obs.kind == "capture-failed" and obs.request_digest == out["request_digest"]
    assert AuditEntry.objects.filter(action="capture.failed", target=obs.public_id).exists()


def test_a_failed_capture_is_still_judged_by_the_policy_and_never_staged_by_capture_stage():
    with pytest.raises(CaptureRefused, match="not a reviewed connection"):
        capture_receive(raw=failed_capture(connection="elsewhere"))
    with pytest.raises(CaptureError, match="capture_failure: a failed capture stages nothing"):
        capture_stage(raw=failed_capture())
    with pytest.raises(CaptureError, match="response: a failed capture kept no response"):
        capture_receive(raw={**failed_capture(), "response": {"status": 200}})


# --- the doors: the command, the API, recordings, a run's results ----------------------------------------------------


def test_the_command_refuses_in_one_line_and_answers_a_failed_capture(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(status_capture(connection="nowhere")))
    with pytest.raises(CommandError, match=r"refused by the record policy: connection nowhere: not a reviewed"):
        call_command("capture", str(path), "--json")
    path.write_text(json.dumps(failed_capture()))
    call_command("capture", str(path), "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["staged"] is None and "no fixture resulted" in out["note"]


def test_the_api_refuses_with_400_and_accepts_a_failed_capture_as_202(client, role_user):
    client.force_login(role_user("operator"))
    url = reverse("api-captures")
    response = client.post(url, data=json.dumps(status_capture(connection="nowhere")), content_type="application/json")
    assert response.status_code == 400 and "not a reviewed connection" in response.json()["error"]
    assert AuditEntry.objects.filter(action="capture.refused").count() == 1  # kept although the answer is 400
    response = client.post(url, data=json.dumps(failed_capture()), content_type="application/json")
    assert response.status_code == 202 and response.json()["staged"] is None


def test_a_runs_live_mutation_result_is_refused_through_a_live_connection(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    # Each mutation result is refused on its own, naming the observation that keeps its trace (issue 37).
    call_command(
        "capture_from_run",
        "run-001-recorded",
        *("--scenario", "support-followup", "--effect-class", "mutation", "--connection", "status-service"),
        "--json",
    )
    out = json.loads(capsys.readouterr().out)
    mutations = [r for r in out["refused"] if r["tool"].startswith("email.")]
    assert mutations and all("a mutation recorded live through status-service" in r["reason"] for r in mutations)
    assert not StagedRecording.objects.filter(source_run="run-001-recorded", effect_class="mutation").exists()
    observations = RequestObservation.objects.filter(door="run-result", kind="refused")
    assert sorted(o.public_id for o in observations) == sorted(r["observation"] for r in mutations)
    assert all(o.tool.startswith("email.") and o.effect_class == "mutation" for o in observations)


# --- the page ----------------------------------------------------------------------------------------------------


def test_the_record_policy_page_lists_connections_and_refusals_in_constant_queries(
    client, role_user, django_assert_num_queries
):
    refused(status_capture(connection="nowhere"), "not a reviewed connection")
    capture_receive(raw=failed_capture())
    client.force_login(role_user("reviewer"))
    url = reverse("fixtures:record-policy")
    # session, user, the user's groups and permissions for the menu, connections (people joined), observations
    # (actors joined): and no more with more rows
    with django_assert_num_queries(7):
        page = client.get(url).content.decode()
    assert 'id="connection-status-service"' in page and "approved by connection-approver" in page
    assert "connection nowhere: not a reviewed connection" in page
    assert "no fixture resulted" in page
    for n in range(5):
        refused(status_capture(connection=f"nowhere-{n}"), "not a reviewed connection")
    with django_assert_num_queries(7):
        client.get(url)
    client.force_login(role_user("viewer"))
    assert client.get(url).status_code == 403


# --- the admin ---------------------------------------------------------------------------------------------------


def test_an_admin_registers_a_connection_and_another_approves_it_in_the_admin(client, role_user):
    first, second = role_user("admin", "admin-one"), role_user("admin", "admin-two")
    client.force_login(first)
    response = client.post(
        reverse("admin:fixtures_review_connection_add"),
        {
            "name": "billing-sandbox",
            "description": "",
            "reaches": "sandbox",
            "source_classes": "billing-api",
            "capabilities": "read, mutation",
            "account_scopes": "acme-test",
            "capture_result_classes": "internal, bogus",
            "default_result_class": "internal",
        },
    )
    assert response.status_code == 200 and "&#x27;bogus&#x27; is not one of" in response.content.decode()
    response = client.post(
        reverse("admin:fixtures_review_connection_add"),
        {
            "name": "billing-sandbox",
            "description": "",
            "reaches": "sandbox",
            "source_classes": "billing-api",
            "capabilities": "read, mutation",
            "account_scopes": "acme-test",
            "capture_result_classes": "internal",
            "default_result_class": "internal",
        },
    )
    assert response.status_code == 302
    connection = Connection.objects.get(name="billing-sandbox")
    assert connection.state == "proposed" and connection.capabilities == ["read", "mutation"]
    assert connection.proposed_by == first
    changelist = reverse("admin:fixtures_review_connection_changelist")
    client.post(changelist, {"action": "approve", "_selected_action": [connection.pk]})
    assert Connection.objects.get(pk=connection.pk).state == "proposed"  # four eyes
    client.force_login(second)
    client.post(changelist, {"action": "approve", "_selected_action": [connection.pk]})
    connection.refresh_from_db()
    assert connection.state == "approved" and connection.approved_by == second
    assert [e.action for e in AuditEntry.objects.filter(target="billing-sandbox").order_by("at", "id")] == [
        "connection.propose",
        "connection.approve_refused",
        "connection.approve",
    ]


REPLAY_KEY = "replay:email-delivery-w1:5f2a9c0d1e7b3a46"


@pytest.mark.seed("001", "Effect identities received a replay namespace")
@pytest.mark.parametrize(
    "carry",
    [
        lambda c: c["request"]["headers"].update({"Idempotency-Key": REPLAY_KEY}),
        lambda c: c["request"]["headers"].update({"X-Idempotency-Key": [REPLAY_KEY]}),
        lambda c: c["request"].update(body={"send": {"idempotencyKey": REPLAY_KEY}}),
        lambda c: c["request"]["args"].update(namespace="replay:email-delivery-w1"),
    ],
)
def test_a_capture_on_a_live_connection_carrying_a_replay_key_is_refused_and_the_refusal_kept(carry):
    capture = status_capture()
    carry(capture)
    obs = refused(capture, r"the replay-namespaced key 'replay:email-delivery-w1.* was bound for status-service")
    assert "a live connection: refused before anything was sent" in obs.reason
    # The same key on a sandbox connection, or a replay key merely quoted in a body, is not a key sent live.
    approve_test_connection("status-sandbox", reaches="sandbox")
    sandboxed = status_capture(connection="status-sandbox")
    carry(sandboxed)
    assert capture_stage(raw=sandboxed).recording.connection == "status-sandbox"
    quoted = status_capture()
    quoted["request"]["body"] = {"note": f"the replay used {REPLAY_KEY}"}
    assert capture_stage(raw=quoted).recording.connection == "status-service"
