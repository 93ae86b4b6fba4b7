"""Approval covers identity (issue 33): a reviewer approves what a connection is (its name, which captures and
recording files use to say where they came from; what it reaches; its policy), not the row. On 89ef8a5 renaming an
approved connection in the admin kept it approved, and captures naming the new host staged and were promotable."""

from __future__ import annotations

import pytest
from django.urls import reverse

from accounts.models import AuditEntry
from fixtures_review.connections import ConnectionRefused, connection_approve, connection_change
from fixtures_review.models import Connection, ConnectionIdentityChanged, StagedRecording
from fixtures_review.services import capture_stage
from tests.fixtures_review.conftest import status_capture
from tests.fixtures_review.test_record_policy import refused

pytestmark = pytest.mark.django_db


def _admin_form(connection: Connection, **changes) -> dict:
    fields = {
        "name": connection.name,
        "description": connection.description,
        "reaches": connection.reaches,
        "source_classes": ", ".join(connection.source_classes),
        "capabilities": ", ".join(connection.capabilities),
        "account_scopes": ", ".join(connection.account_scopes),
        "capture_result_classes": ", ".join(connection.capture_result_classes),
        "default_result_class": connection.default_result_class,
    }
    return {**fields, **changes}


def test_an_approved_connection_stages_captures_naming_it():
    # The positive control: the legitimate path goes on working.
    assert capture_stage(raw=status_capture()).recording.connection == "status-service"


def test_renaming_an_approved_connection_in_the_admin_sends_it_back_to_proposed(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("admin-person", password="a-long-test-password"))
    connection = Connection.objects.get(name="status-service")
    url = reverse("admin:fixtures_review_connection_change", args=[connection.pk])
    response = client.post(url, _admin_form(connection, name="status.attacker.example"), follow=True)
    assert response.status_code == 200
    connection.refresh_from_db()
    assert (connection.name, connection.state, connection.approved_by) == ("status.attacker.example", "proposed", None)
    refused(status_capture(connection="status.attacker.example"), "connection status.attacker.example: proposed")
    assert not StagedRecording.objects.filter(connection="status.attacker.example").exists()
    entry = AuditEntry.objects.get(action="connection.change", target="status.attacker.example")
    assert entry.detail["changed"] == ["name"] and entry.detail["was"] == {"name": "status-service"}
    assert entry.detail["state_before"] == "approved" and entry.detail["state"] == "proposed"


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "status.other.example"), ("reaches", "sandbox"), ("account_scopes", ["another-account"])],
)
def test_a_change_to_what_a_connection_is_sends_it_back_to_proposed(field, value):
    connection = Connection.objects.get(name="status-service")
    setattr(connection, field, value)
    assert connection_change(connection=connection, user=None) == "proposed"
    assert Connection.objects.get(pk=connection.pk).approved_identity == ""


def test_a_new_description_keeps_it_approved():
    connection = Connection.objects.get(name="status-service")
    connection.description = "the status service's public API"
    assert connection_change(connection=connection, user=None) == "approved"
    assert capture_stage(raw=status_capture()).recording.connection == "status-service"


def test_a_door_that_saves_the_row_itself_cannot_keep_a_renamed_connection_approved():
    connection = Connection.objects.get(name="status-service")
    connection.name = "status.attacker.example"
    with pytest.raises(ConnectionIdentityChanged, match=r"goes through fixtures_review\.connections\.connection_chan"):
        connection.save()
    assert Connection.objects.get(pk=connection.pk).name == "status-service"


def test_a_row_renamed_past_every_save_is_not_admitted():
    # A queryset update skips save(): the approval's digest no longer matches, so admission refuses.
    Connection.objects.filter(name="status-service").update(name="status.attacker.example")
    refused(status_capture(connection="status.attacker.example"), "changed since it was approved, not approved")
    # The lifecycle service, given the row, sends it back to proposed so a reviewer can approve it again.
    connection = Connection.objects.get(name="status.attacker.example")
    assert connection_change(connection=connection, user=None) == "proposed"


def test_an_approval_of_a_connection_changed_meanwhile_is_refused(role_user):
    connection = Connection.objects.get(name="status-service")
    connection.reaches = "sandbox"
    connection_change(connection=connection, user=role_user("reviewer", "changer"))
    seen = Connection.objects.get(pk=connection.pk)  # what the approver read
    Connection.objects.filter(pk=connection.pk).update(name="status.attacker.example")
    with pytest.raises(ConnectionRefused, match="changed meanwhile"):
        connection_approve(connection=seen, user=role_user("reviewer", "approver"))
    assert Connection.objects.get(pk=connection.pk).state == "proposed"
