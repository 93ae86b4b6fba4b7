"""Retention of captured material (fixtures_review/retention.py, docs/retention.md): a capture's class, the sweep
removing its body's bytes and the inline copy with them, and the recording page and download saying so. A
recording's hold is its own (issue 33): when its class runs out it ends, with its own deletion record, even while a
run or another recording keeps the same bytes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.storage import storages

from fixtures_review.intake import CaptureError
from fixtures_review.models import StagedRecording
from fixtures_review.services import capture_stage
from runs.models import BlobDeletion, blob_storage_name
from runs.retention import retention_sweep
from tests.fixtures_review.conftest import search_capture, status_capture
from tests.runs.test_blob_holds import RESULT_DIGEST, _import

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


# --- a recording's hold ends on its own, while another holder keeps the bytes ---------------------------------------

# The example run's tool result (RESULT_DIGEST's 78 bytes) as a captured docs.search body: the same bytes, the same
# digest, held by the run and by the recording.
HITS = {"hits": [{"title": "Rotating signing keys", "url": "https://docs.example/keys"}]}


def _hits_recording(operator, retention: str = "sensitive", **changes) -> StagedRecording:
    recording = capture_stage(raw=search_capture(body=HITS, retention=retention, **changes), user=operator).recording
    assert recording.body_blobs == {"response.body": RESULT_DIGEST}
    return recording


def _page(client, recording: StagedRecording) -> str:
    return client.get(f"/review/{recording.public_id}/").content.decode()


def test_a_recordings_hold_that_runs_out_ends_while_a_run_keeps_the_same_bytes(tmp_path, role_user, client):
    """The recording is sensitive (7 days); a run recorded the same bytes under `standard` (kept). After 7 days the
    bytes stay for the run, but the recording's hold ends with a deletion record of its own: its page and its
    download answer as deleted, its inline copy goes, and the run is still served the bytes."""
    _import(tmp_path, "run-keeper", retention="standard")
    recording = _hits_recording(role_user("operator"))
    client.force_login(role_user("reviewer"))
    assert "Rotating signing keys" in _page(client, recording)  # the positive control: served while held
    assert client.get(f"/review/{recording.public_id}/body/response/").status_code == 200

    early = retention_sweep(now=CAPTURED + timedelta(days=6))
    assert (early.removed, early.holds_ended) == ([], [])
    due = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert (due.removed, due.holds_ended) == ([], [RESULT_DIGEST])
    again = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert (again.removed, again.holds_ended) == ([], [])

    (record,) = BlobDeletion.objects.filter(digest=RESULT_DIGEST)
    assert record.bytes_removed is False and record.holders == [f"recording {recording.public_id}"]
    assert (record.retention_class, record.sensitivity) == ("sensitive", "sensitive")
    assert record.expired_at == CAPTURED + timedelta(days=7)
    recording = StagedRecording.objects.get(pk=recording.pk)
    assert recording.response["body"] is None and recording.expired_bodies == {"response.body": record.pk}
    page = _page(client, recording)
    assert "Expired: expired under retention class &#x27;sensitive&#x27;, sensitivity sensitive" in page
    assert "the bytes were removed for this holder on" in page and f"deletion record {record.pk}" in page
    assert "Rotating signing keys" not in page and "Download the response body" not in page
    download = client.get(f"/review/{recording.public_id}/body/response/")
    assert download.status_code == 410
    said = download.content.decode()
    assert "removed for this holder" in said and f"deletion record {record.pk}" in said
    # The bytes stay for the run, which is still served them.
    assert storages["blobs"].exists(blob_storage_name(RESULT_DIGEST))
    assert client.get(f"/runs/run-keeper/blobs/{RESULT_DIGEST}/").status_code == 200

    # The recording's own record decides, not its row's inline copy: a body written back around the services (an
    # old row, a restore) is not served nor previewed.
    StagedRecording.objects.filter(pk=recording.pk).update(response={**recording.response, "body": HITS})
    page = _page(client, StagedRecording.objects.get(pk=recording.pk))
    assert "Rotating signing keys" not in page and f"deletion record {record.pk}" in page
    assert client.get(f"/review/{recording.public_id}/body/response/").status_code == 410


def test_a_recordings_hold_that_runs_out_ends_while_another_recording_keeps_the_same_bytes(role_user, client):
    operator = role_user("operator")
    short = _hits_recording(operator, "sensitive")
    kept = _hits_recording(operator, "standard", world_revision=5)
    client.force_login(role_user("reviewer"))

    assert retention_sweep(now=CAPTURED + timedelta(days=8)).holds_ended == [RESULT_DIGEST]

    (record,) = BlobDeletion.objects.filter(digest=RESULT_DIGEST)
    assert record.holders == [f"recording {short.public_id}"] and record.bytes_removed is False
    assert StagedRecording.objects.get(pk=short.pk).expired_bodies == {"response.body": record.pk}
    assert client.get(f"/review/{short.public_id}/body/response/").status_code == 410
    assert "Rotating signing keys" not in _page(client, short)
    # The other recording's hold is live: its body is served and previewed, and it expires nothing.
    assert StagedRecording.objects.get(pk=kept.pk).expired_bodies == {}
    assert client.get(f"/review/{kept.public_id}/body/response/").status_code == 200
    assert "Rotating signing keys" in _page(client, kept)
    assert retention_sweep(now=CAPTURED + timedelta(days=3650)).holds_ended == []


def test_a_recording_that_is_the_longest_holder_loses_its_bytes_with_one_record(tmp_path, role_user):
    """When the recording's hold is the last one, its end is the bytes' removal: one record (`bytes_removed`), not
    a hold's record besides it."""
    _import(tmp_path, "run-short", retention="sensitive")  # recorded 2026-07-01 09:00, 7 days
    recording = _hits_recording(role_user("operator"), "transient")  # 30 days
    run_due = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert (run_due.removed, run_due.holds_ended) == ([], [RESULT_DIGEST])  # the run's hold ended, not the recording's
    assert StagedRecording.objects.get(pk=recording.pk).expired_bodies == {}
    done = retention_sweep(now=CAPTURED + timedelta(days=31))
    assert (done.removed, done.holds_ended) == ([RESULT_DIGEST], [])
    removal = BlobDeletion.objects.get(digest=RESULT_DIGEST, bytes_removed=True)
    assert removal.holders == [f"recording {recording.public_id}"]
    assert StagedRecording.objects.get(pk=recording.pk).expired_bodies == {"response.body": removal.pk}


def test_a_recording_whose_body_expired_is_not_promotable(role_user, client):
    """Once a recording's hold on its response body ended, approving it would mint a fixture answering with nothing:
    it is refused in one line naming the deletion record (the positive control: promotable before the sweep)."""
    from fixtures_review.approval import promotion_blockers, recording_approve
    from fixtures_review.services import ReviewRefused

    recording = _hits_recording(role_user("operator"))
    assert not [b for b in promotion_blockers(recording) if "expired" in b]
    retention_sweep(now=CAPTURED + timedelta(days=8))
    recording = StagedRecording.objects.get(pk=recording.pk)
    (record,) = BlobDeletion.objects.filter(digest=RESULT_DIGEST)
    said = f"its response.body expired under retention (deletion record {record.pk})"
    assert said in " ".join(promotion_blockers(recording))
    with pytest.raises(ReviewRefused, match=re.escape(said)):
        recording_approve(recording=recording, user=role_user("reviewer"))
    assert StagedRecording.objects.get(pk=recording.pk).state == StagedRecording.State.STAGED
