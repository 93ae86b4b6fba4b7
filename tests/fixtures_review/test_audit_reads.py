"""The audit log sees who downloaded a captured body (the raw bytes are only ever a download)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from accounts.models import AuditEntry
from fixtures_review.services import capture_stage

from .conftest import search_capture

pytestmark = pytest.mark.django_db


def test_a_body_download_is_recorded_with_who_and_which_part(client, role_user, seed_scenarios):
    recording = capture_stage(raw=json.dumps(search_capture()).encode()).recording
    client.force_login(role_user("reviewer", "rita"))
    response = client.get(reverse("fixtures:body", args=[recording.public_id, "response"]))
    assert response.status_code == 200
    (entry,) = AuditEntry.objects.filter(action="recording.download_body")
    assert (entry.actor, entry.via, entry.target, entry.detail["part"]) == (
        "rita",
        "web",
        recording.public_id,
        "response",
    )
    # A refused download (no such body) records nothing.
    assert client.get(reverse("fixtures:body", args=[recording.public_id, "request"])).status_code == 404
    assert AuditEntry.objects.filter(action="recording.download_body").count() == 1
