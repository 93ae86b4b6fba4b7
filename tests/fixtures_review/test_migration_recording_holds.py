"""Recordings staged before their holds were their own get when their hold runs out (fixtures_review migration
0015): their class from their `captured_at`, under the classes declared now; none when nothing of theirs is still held
or their class keeps forever. The sweep then ends the due one while another holder keeps the bytes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fixtures_review.models import StagedRecording
from runs.models import Blob
from runs.retention import retention_sweep
from tests.migrations_at import apps_at, migrate_to

BEFORE = [("fixtures_review", "0014_recording_no_change")]
CAPTURED = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
SHARED = "sha256:" + "d" * 64


@pytest.mark.django_db(transaction=True)
def test_it_gives_recordings_staged_before_it_their_own_hold():
    migrate_to(BEFORE)
    try:
        apps = apps_at(BEFORE)
        recording_model = apps.get_model("fixtures_review", "StagedRecording")

        def recording(public_id: str, cls: str, **more):
            return recording_model.objects.create(
                public_id=public_id,
                scenario_name="docs-research",
                tool="docs.search",
                contract_revision=1,
                connection="docs-api",
                captured_at=CAPTURED,
                effect_class="read",
                world_revision=1,
                request={"body": None},
                response={"status": 200, "body": {"hits": []}},
                outcome="ok",
                request_digest="sha256:" + "e" * 64,
                original_digest="sha256:" + "f" * 64,
                retention_class=cls,
                **{"body_blobs": {"response.body": SHARED}, **more},
            )

        recording("sr-held", "sensitive")
        recording("sr-kept", "standard")
        recording("sr-ended", "sensitive", expired_bodies={"response.body": 1})
        recording("sr-bodiless", "sensitive", body_blobs={})
    finally:
        migrate_to()

    expiry = dict(StagedRecording.objects.values_list("public_id", "hold_expires_at"))
    assert expiry == {
        "sr-held": CAPTURED + timedelta(days=7),
        "sr-kept": None,
        "sr-ended": None,
        "sr-bodiless": None,
    }
    Blob.objects.create(digest=SHARED, size=3, retention_class="standard")  # a longer holder keeps the bytes
    assert retention_sweep(now=CAPTURED + timedelta(days=8)).holds_ended == [SHARED]
    held = StagedRecording.objects.get(public_id="sr-held")
    assert set(held.expired_bodies) == {"response.body"} and held.response["body"] is None
    assert StagedRecording.objects.get(public_id="sr-kept").expired_bodies == {}
