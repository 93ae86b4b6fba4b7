"""A capture's effect class is its contract's (issue 33): on 89ef8a5 a live mutation labelled `read` passed the record
policy (a live connection may record reads) and was stored, though the answer itself said the contract is a
mutation. Now it is refused in one line, HTTP 400 from the API, and nothing of it is stored."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.intake import CaptureError
from fixtures_review.models import ContractRevision, ReviewEvent, StagedRecording
from fixtures_review.services import capture_stage
from tests.fixtures_review.conftest import status_capture
from tests.fixtures_review.test_intake import token
from tests.fixtures_review.test_mutation_promotion import TRANSITION, send_capture

pytestmark = pytest.mark.django_db

SAID = (
    "effect_class: email.send revision 3 is a mutation (the contract scenario email-delivery pins), the capture "
    "says read"
)


def live_send_labelled_read() -> dict:
    """seed 001's send, made through the live status connection (which may record reads only), called a read."""
    return {**send_capture(body={"message_id": "m-1"}), "connection": "status-service", "effect_class": "read"}


def test_a_live_mutation_labelled_read_is_refused_and_nothing_stored(seed_scenarios):
    with pytest.raises(CaptureError, match=re.escape(SAID)):
        capture_stage(raw=live_send_labelled_read())
    assert not StagedRecording.objects.exists() and not ReviewEvent.objects.exists()


def test_the_api_refuses_it_with_a_400_in_one_line(client, role_user, seed_scenarios):
    key = token(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    response = client.post(reverse("api-captures"), data=json.dumps(live_send_labelled_read()),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}")  # fmt: skip
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith(SAID) and "\n" not in error
    assert not StagedRecording.objects.exists()


def test_the_contract_declared_to_the_console_decides_when_no_scenario_version_pins_it():
    declared = {"tool": "email.send", "revision": 3, "effect_class": "mutation"}
    ContractRevision.objects.create(tool="email.send", revision=3, digest="sha256:" + "0" * 64, contract=declared)
    with pytest.raises(CaptureError, match="is a mutation \\(the contract declared to the console\\)"):
        capture_stage(raw=live_send_labelled_read())
    assert not StagedRecording.objects.exists()


def test_captures_agreeing_with_their_contracts_are_stored(seed_scenarios):
    # The positive controls: a mutation on the sandbox, and the example read, both as their contracts say.
    send = capture_stage(raw=send_capture(body={"message_id": "m-1"}, transition=TRANSITION)).recording
    read = capture_stage(raw=status_capture()).recording
    assert (send.effect_class, read.effect_class) == ("mutation", "read")


def test_a_capture_with_no_contract_to_disagree_with_is_still_staged():
    # No scenario version and no declared contract: nothing says what the tool is (it cannot be promoted until
    # something does, as before).
    assert capture_stage(raw=live_send_labelled_read()).recording.effect_class == "read"
