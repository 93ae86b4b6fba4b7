"""Runs imported before retention was per holder get their holds (runs migration 0019): ended by their blob's
removal when they were imported before it; live, with the blob given back its bytes and that hold, when a run
imported after the removal stored the bytes again (which, before, were never swept)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from runs.models import Blob, RunBlobHold
from runs.retention import retention_sweep
from tests.migrations_at import apps_at, migrate_to

BEFORE = [("runs", "0018_masked_secret_received")]
RECORDED = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
STORED_AGAIN = "sha256:" + "a" * 64
GONE = "sha256:" + "b" * 64
KEPT = "sha256:" + "c" * 64


@pytest.mark.django_db(transaction=True)
def test_it_writes_the_holds_of_runs_imported_before_it():
    migrate_to(BEFORE)
    store = storages["blobs"]
    try:
        apps = apps_at(BEFORE)
        run_model, blob_model = apps.get_model("runs", "Run"), apps.get_model("runs", "Blob")
        run_blob_model, deletion_model = apps.get_model("runs", "RunBlob"), apps.get_model("runs", "BlobDeletion")

        def run(run_id: str, created_at: datetime):
            row = run_model.objects.create(
                run_id=run_id,
                task_id="t",
                task_revision="r1",
                environment="live",
                mode="recorded",
                model_name="m",
                model_version="1",
                policy_revision="p",
                created_at=created_at,
                bundle_digest="sha256:" + "0" * 64,
                manifest_run={"id": run_id},
            )
            return row

        early = run("run-early", RECORDED)
        removed_at = datetime.now(UTC) + timedelta(seconds=1)  # after run-early's import, before run-later's
        later_created = RECORDED + timedelta(days=30)
        blobs = {}
        for digest, cls in ((STORED_AGAIN, "sensitive"), (GONE, "sensitive"), (KEPT, "standard")):
            blobs[digest] = blob_model.objects.create(digest=digest, size=3, retention_class=cls)
            run_blob_model.objects.create(
                run=early, blob=blobs[digest], media_type="text/plain", role="r", retention=cls
            )
        for digest in (STORED_AGAIN, GONE):
            blob_model.objects.filter(pk=blobs[digest].pk).update(bytes_removed_at=removed_at)
            deletion_model.objects.create(
                blob=blobs[digest],
                digest=digest,
                size=3,
                retention_class="sensitive",
                expired_at=RECORDED + timedelta(days=7),
                removed_at=removed_at,
                removed_by="retention sweep (test)",
                reason="test",
            )
        later = run("run-later", later_created)
        run_model.objects.filter(pk=later.pk).update(imported_at=removed_at + timedelta(days=1))
        for digest in (STORED_AGAIN, GONE):
            run_blob_model.objects.create(
                run=later, blob=blobs[digest], media_type="text/plain", role="r", retention="sensitive"
            )
        store.save("sha256/" + "a" * 64, ContentFile(b"abc"))  # run-later stored these bytes again
    finally:
        migrate_to()

    holds = {
        (h.run_blob.run.run_id, h.blob.digest): h for h in RunBlobHold.objects.select_related("run_blob__run", "blob")
    }
    assert len(holds) == 5
    assert holds[("run-early", STORED_AGAIN)].removed_by is not None
    assert holds[("run-early", GONE)].removed_by is not None
    assert holds[("run-later", GONE)].removed_by is not None  # the store does not hold them: nothing came back
    live = holds[("run-later", STORED_AGAIN)]
    assert live.removed_by is None and live.expires_at == later_created + timedelta(days=7)
    assert holds[("run-early", KEPT)].removed_by is None and holds[("run-early", KEPT)].expires_at is None
    blob = Blob.objects.get(digest=STORED_AGAIN)
    assert (blob.bytes_removed_at, blob.retention_class, blob.expires_at) == (None, "sensitive", live.expires_at)
    assert Blob.objects.get(digest=GONE).bytes_removed_at is not None
    # The copy stored again is swept at its own expiry now.
    assert retention_sweep(now=later_created + timedelta(days=8)).removed == [STORED_AGAIN]
    assert not store.exists("sha256/" + "a" * 64)
