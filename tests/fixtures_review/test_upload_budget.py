"""The capture door's upload budget (issue 35, point 3): a capture, HAR file or cassette whose reading takes more than
N17Q_UPLOAD_CPU_S CPU seconds (here zero: the first checkpoint refuses) is a 422 in one line, and nothing is staged;
the same document with the default budget is staged (the control)."""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from tests.runs.test_api import token_for
from tests.test_identifiers import CAPTURE

pytestmark = pytest.mark.django_db


def _capture_key(role_user) -> str:
    return token_for(role_user("operator", f"capturer-{uuid.uuid4().hex[:6]}"), HarnessToken.Scope.CAPTURE)


HAR = {
    "log": {
        "version": "1.2",
        "creator": {"name": "test", "version": "1"},
        "entries": [
            {
                "startedDateTime": "2026-01-01T00:00:00Z",
                "request": {"method": "GET", "url": "https://status.example/v1/status", "headers": []},
                "response": {
                    "status": 200,
                    "headers": [{"name": "Content-Type", "value": "application/json"}],
                    "content": {"mimeType": "application/json", "text": '{"ok": true}'},
                },
            }
        ],
    }
}


@pytest.mark.parametrize("document", ["capture", "har"])
def test_a_capture_past_its_budget_is_a_422_and_stages_nothing(
    client, role_user, reviewed_connections, seed_scenarios, settings, document
):
    key = _capture_key(role_user)
    body = json.dumps(CAPTURE if document == "capture" else HAR)
    query = "" if document == "capture" else "?scenario=docs-research&tool=status.lookup&contract_revision=2"
    query += "" if document == "capture" else "&effect_class=read&connection=status.example"

    def send():
        return client.post(
            f"{reverse('api-captures')}{query}",
            data=body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {key}",
        )

    settings.N17Q_UPLOAD_CPU_S = 0
    refused = send()
    assert refused.status_code == 422, refused.content[:300]
    error = refused.json()["error"]
    assert "the capture took more than" in error and "nothing was stored" in error and "\n" not in error
    assert StagedRecording.objects.count() == 0
    settings.N17Q_UPLOAD_CPU_S = 120
    taken = send()
    assert taken.status_code == 201, taken.content[:300]
    assert StagedRecording.objects.count() == 1
