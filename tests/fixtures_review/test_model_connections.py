"""Issue 33: a model endpoint (a connection of kind `model`, the live relay's) is no connection record mode captures
through, even approved: a capture naming one is refused as unregistered, and leaves its safe observation."""

from __future__ import annotations

import pytest

from fixtures_review.connections import CaptureRefused
from fixtures_review.models import StagedRecording
from fixtures_review.services import capture_stage
from tests.fixtures_review.conftest import status_capture
from tests.replays.model_connections import approve_model_connection

pytestmark = pytest.mark.django_db


def test_record_mode_never_captures_through_an_approved_model_connection():
    approve_model_connection("status-model", port=443, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    with pytest.raises(CaptureRefused, match="connection status-model: not a reviewed connection"):
        capture_stage(raw=status_capture(connection="status-model"))
    assert not StagedRecording.objects.exists()
