"""Retention of captured material (fixtures_review/retention.py, docs/retention.md): a capture's class, the sweep
removing its body's bytes and the inline copy with them, and the recording page and download saying so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fixtures_review.intake import CaptureError
from fixtures_review.models import StagedRecording
from fixtures_review.services import capture_stage
from runs.models import BlobDeletion
from runs.retention import retention_sweep
from tests.fixtures_review.conftest import status_capture

pytestmark = pytest.mark.django_db

CAPTURED = datetime(2026, 7, 1, 9, 0, 5, tzinfo=UTC)  # the example capture's captured_at


def test_a_capture_is_kept_under_the_class_it_names_or_the_default(role_user):
    operator = role_user("operator")
    named = capture_stage(raw=status_capture(retention="sensitive"), user=operator).recording
    default = capture_stage(raw=status_capture(world_revision=5), user=operator).recording

    assert (named.retention_class, default.retention_class) == ("sensitive", "standard")
    with pytest.raises(CaptureError, match=r"^retention: 'forever-and-a-day' is not a declared retention class"):
        capture_stage(raw=status_capture(retention="forever-and-a-day", world_revision=6), user=operator)


def test_the_sweep_removes_a_captured_body_and_its_inline_copy_and_the_page_says_so(role_user, client):
    recording = capture_stage(raw=status_capture(retention="sensitive"), user=role_user("operator")).recording
    digest = recording.body_blobs["response.body"]
    client.force_login(role_user("reviewer"))
    before = client.get(f"/review/{recording.public_id}/").content.decode()
    assert "&quot;error&quot;" in before and "Expired" not in before and "sensitive (7 days, sensitive)" in before

    assert retention_sweep(now=CAPTURED + timedelta(days=6)).removed == []
    assert retention_sweep(now=CAPTURED + timedelta(days=8)).removed == [digest]
    assert retention_sweep(now=CAPTURED + timedelta(days=8)).removed == []

    recording = StagedRecording.objects.get(pk=recording.pk)
    record = BlobDeletion.objects.get(digest=digest)
    assert recording.response["body"] is None and recording.expired_bodies == {"response.body": record.pk}
    assert record.holders == [f"recording {recording.public_id}"] and record.retention_class == "sensitive"
    page = client.get(f"/review/{recording.public_id}/").content.decode()
    assert "Expired: expired under retention class &#x27;sensitive&#x27;, sensitivity sensitive" in page
    assert f"deletion record {record.pk}" in page and "&quot;error&quot;" not in page
    assert "Download the response body" not in page
    download = client.get(f"/review/{recording.public_id}/body/response/")
    assert download.status_code == 410 and f"deletion record {record.pk}" in download.content.decode()


def test_a_body_captured_again_after_its_removal_is_a_new_hold_of_its_own(role_user, client):
    """Retention per holder (issue 33): the earlier recording's body stays removed, the later one's copy is served
    and then removed at its own expiry."""
    operator = role_user("operator")
    early = capture_stage(raw=status_capture(retention="sensitive"), user=operator).recording
    digest = early.body_blobs["response.body"]
    assert retention_sweep(now=CAPTURED + timedelta(days=8)).removed == [digest]
    first = BlobDeletion.objects.get(digest=digest)
    later_at = CAPTURED + timedelta(days=30)
    later = capture_stage(
        raw=status_capture(retention="sensitive", world_revision=5, captured_at=later_at.isoformat()), user=operator
    ).recording
    assert later.body_blobs["response.body"] == digest
    client.force_login(role_user("reviewer"))

    gone = client.get(f"/review/{early.public_id}/body/response/")
    assert gone.status_code == 410 and f"deletion record {first.pk}" in gone.content.decode()
    assert client.get(f"/review/{later.public_id}/body/response/").status_code == 200

    assert retention_sweep(now=later_at + timedelta(days=6)).removed == []
    assert retention_sweep(now=later_at + timedelta(days=8)).removed == [digest]
    second = BlobDeletion.objects.filter(digest=digest).exclude(pk=first.pk).get()
    assert second.holders == [f"recording {later.public_id}"]
    assert StagedRecording.objects.get(pk=early.pk).expired_bodies == {"response.body": first.pk}
    assert StagedRecording.objects.get(pk=later.pk).expired_bodies == {"response.body": second.pk}
