"""Content addressing that checks content, and retention per holder (issue 33; docs/retention.md).

A digest is a claim on bytes: a bundle proves it with the bytes, even when the store holds the digest already. A
removal stays true for every run whose hold it ended; bytes stored again are a new hold with their own class and
clock; reading bytes (a reconstruction) never restarts a clock; the sweep removes the bytes when the last hold ends.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.files.storage import storages
from django.core.management import call_command

from n17q_engine.bundle import BundleError
from runs.importer import run_import_from_path
from runs.models import Blob, BlobDeletion, Run, blob_storage_name
from runs.retention import retention_sweep
from tests.bundles import clone, example_parts, write_folder

pytestmark = pytest.mark.django_db

RECORDED = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)  # the example bundle's run.created_at
RESULT_DIGEST = "sha256:e27d186caef5f985753e164829fd65c267f9bbcc653735c24b88c8da4708a90f"  # e-res1's blob, 78 bytes


def _bundle(tmp_path, run_id: str, *, retention: str = "sensitive", recorded: datetime = RECORDED, data=None):
    """The example run as `run_id`, recorded at `recorded`, its tool result's blob under `retention` (its bytes
    replaced by `data` when given, listed under the same digest and size)."""
    manifest, events, blobs = example_parts()
    manifest = clone(manifest)
    manifest["run"]["id"] = run_id
    manifest["run"]["created_at"] = recorded.isoformat().replace("+00:00", "Z")
    manifest["blobs"][RESULT_DIGEST]["retention"] = retention
    if data is not None:
        blobs = {**blobs, RESULT_DIGEST: data}
    return write_folder(tmp_path / run_id, manifest, events, blobs)


def _import(tmp_path, run_id: str, **kwargs) -> Run:
    return run_import_from_path(_bundle(tmp_path, run_id, **kwargs)).run


def _download(client, run_id: str):
    return client.get(f"/runs/{run_id}/blobs/{RESULT_DIGEST}/")


def _in_store() -> bool:
    return storages["blobs"].exists(blob_storage_name(RESULT_DIGEST))


@pytest.fixture
def viewer(client, role_user):
    client.force_login(role_user("viewer"))
    return client


# --- a digest is proved by its bytes -------------------------------------------------------------------------------


def test_junk_bytes_of_the_right_size_cannot_claim_a_blob_the_store_holds(tmp_path, viewer):
    _import(tmp_path, "run-owner")
    original = storages["blobs"].open(blob_storage_name(RESULT_DIGEST)).read()
    junk = b"x" * len(original)

    with pytest.raises(BundleError) as refused:
        _import(tmp_path, "run-claimant", retention="standard", data=junk)

    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"blobs/sha256/{RESULT_DIGEST.removeprefix('sha256:')}: bad digest: content hashes to")
    assert not Run.objects.filter(run_id="run-claimant").exists()
    assert _download(viewer, "run-claimant").status_code == 404
    # Its "standard" hold pins nothing: the owner's sensitive bytes still go at their own expiry.
    assert retention_sweep(now=RECORDED + timedelta(days=8)).removed == [RESULT_DIGEST]


def test_the_right_bytes_for_a_digest_the_store_holds_import_and_share_the_stored_file(tmp_path, viewer):
    _import(tmp_path, "run-first")
    _import(tmp_path, "run-second")

    first, second = _download(viewer, "run-first"), _download(viewer, "run-second")
    assert first.status_code == second.status_code == 200
    assert b"".join(first.streaming_content) == b"".join(second.streaming_content)
    assert Blob.objects.filter(digest=RESULT_DIGEST).count() == 1
    assert storages["blobs"].listdir("sha256")[1].count(RESULT_DIGEST.removeprefix("sha256:")) == 1


# --- retention per holder --------------------------------------------------------------------------------------------


def test_a_later_run_storing_the_same_bytes_does_not_bring_them_back_for_an_earlier_run(tmp_path, viewer):
    _import(tmp_path, "run-early")
    assert retention_sweep(now=RECORDED + timedelta(days=8)).removed == [RESULT_DIGEST]
    removal = BlobDeletion.objects.get()

    later = RECORDED + timedelta(days=30)
    _import(tmp_path, "run-later", recorded=later)

    early = _download(viewer, "run-early")
    assert early.status_code == 410
    assert f"(deletion record {removal.pk})" in early.content.decode()
    assert _download(viewer, "run-later").status_code == 200  # the later run's own copy
    # The earlier run's page and its replay package say so too: the bytes stay gone for it.
    result = Run.objects.get(run_id="run-early").events.get(event_id="e-res1")
    page = viewer.get(f"/runs/run-early/?event={result.event_id}").content.decode()
    assert "Expired: expired under retention class &#x27;sensitive&#x27;" in page


def test_bytes_stored_again_are_swept_at_their_own_expiry(tmp_path, viewer):
    _import(tmp_path, "run-early")
    retention_sweep(now=RECORDED + timedelta(days=8))
    later = RECORDED + timedelta(days=30)
    _import(tmp_path, "run-later", recorded=later)
    assert _in_store()

    assert retention_sweep(now=later + timedelta(days=6)).removed == []
    assert retention_sweep(now=later + timedelta(days=8)).removed == [RESULT_DIGEST]

    assert not _in_store()
    first, second = BlobDeletion.objects.order_by("id")
    assert second.holders == ["run run-later"] and second.expired_at == later + timedelta(days=7)
    assert f"(deletion record {second.pk})" in _download(viewer, "run-later").content.decode()
    assert f"(deletion record {first.pk})" in _download(viewer, "run-early").content.decode()


def test_the_sweep_keeps_shared_bytes_while_any_hold_is_live_then_ends_them_all(tmp_path, viewer):
    _import(tmp_path, "run-july")
    august = RECORDED + timedelta(days=31)
    _import(tmp_path, "run-august", recorded=august)

    assert retention_sweep(now=RECORDED + timedelta(days=8)).removed == []  # august's hold is live: the bytes stay
    assert _in_store()
    assert retention_sweep(now=august + timedelta(days=8)).removed == [RESULT_DIGEST]

    july_ended, removal = BlobDeletion.objects.order_by("id")
    assert july_ended.holders == ["run run-july"] and not july_ended.bytes_removed
    assert removal.holders == ["run run-august"] and removal.bytes_removed
    for run_id, record in (("run-july", july_ended), ("run-august", removal)):
        response = _download(viewer, run_id)
        assert response.status_code == 410 and f"(deletion record {record.pk})" in response.content.decode()


def test_an_expired_hold_answers_as_deleted_for_its_run_while_another_run_still_serves_the_bytes(
    tmp_path, capsys, viewer
):
    """Run A's hold runs out while run B still holds the same bytes: the sweep keeps the bytes for B but ends A's hold
    with a deletion record of its own, and everything that serves A's blob (the download, the event's preview, a
    replay's package) answers as deleted for A, as it would had the bytes gone; B's still serves."""
    _import(tmp_path, "run-july")
    august = RECORDED + timedelta(days=31)
    _import(tmp_path, "run-august", recorded=august)

    swept = retention_sweep(now=RECORDED + timedelta(days=8))

    assert swept.removed == [] and swept.holds_ended == [RESULT_DIGEST] and _in_store()
    record = BlobDeletion.objects.get()
    assert record.holders == ["run run-july"] and record.expired_at == RECORDED + timedelta(days=7)
    assert record.retention_class == "sensitive" and not record.bytes_removed
    july = _download(viewer, "run-july")
    assert july.status_code == 410
    assert f"(deletion record {record.pk})" in july.content.decode()
    assert "expired under retention class 'sensitive'" in july.content.decode()
    assert _download(viewer, "run-august").status_code == 200
    july_page = viewer.get("/runs/run-july/?event=e-res1").content.decode()
    assert "Expired: expired under retention class &#x27;sensitive&#x27;" in july_page
    august_page = viewer.get("/runs/run-august/?event=e-res1").content.decode()
    assert "Expired:" not in august_page
    # A replay of A is packaged without the bytes and says why; its run holds nothing of them.
    out = _reconstruct(capsys, "run-july")
    child = Run.objects.get(run_id=out["run"])
    (scope,) = child.events.filter(kind="replay.scope").values_list("body", flat=True)
    assert any(RESULT_DIGEST in line and "expired under retention class" in line for line in scope["uncovered"])
    assert _download(viewer, child.run_id).status_code == 410
    # A second sweep finds nothing more to do; B's own expiry removes the bytes.
    again = retention_sweep(now=RECORDED + timedelta(days=8))
    assert (again.removed, again.holds_ended) == ([], []) and BlobDeletion.objects.count() == 1
    assert retention_sweep(now=august + timedelta(days=8)).removed == [RESULT_DIGEST] and not _in_store()
    assert f"(deletion record {record.pk})" in _download(viewer, "run-july").content.decode()


def _reconstruct(capsys, run_id: str) -> dict:
    call_command("replay", run_id, "--mode", "reconstruction", "--inline", "--json")
    return json.loads(capsys.readouterr().out)


def test_a_reconstruction_reads_the_bytes_without_restarting_their_clock(tmp_path, capsys, viewer):
    _import(tmp_path, "run-read")
    out = _reconstruct(capsys, "run-read")
    assert out["state"] == "completed"
    assert _download(viewer, out["run"]).status_code == 200  # the reconstruction holds the bytes it read...

    # ...under the recorded run's clock: seven days from when the material was recorded, not from the replay.
    assert retention_sweep(now=RECORDED + timedelta(days=8)).removed == [RESULT_DIGEST]
    record = BlobDeletion.objects.get()
    assert record.expired_at == RECORDED + timedelta(days=7)
    for run_id in ("run-read", out["run"]):
        assert _download(viewer, run_id).status_code == 410


def test_a_reconstruction_of_a_run_whose_bytes_expired_lists_them_expired_even_if_stored_again(
    tmp_path, capsys, viewer
):
    _import(tmp_path, "run-gone")
    retention_sweep(now=RECORDED + timedelta(days=8))
    _import(tmp_path, "run-again", recorded=RECORDED + timedelta(days=30))

    out = _reconstruct(capsys, "run-gone")

    assert out["state"] == "completed"
    child = Run.objects.get(run_id=out["run"])
    (scope,) = child.events.filter(kind="replay.scope").values_list("body", flat=True)
    assert any(
        RESULT_DIGEST in line and "expired under retention class 'sensitive'" in line for line in scope["uncovered"]
    )
    assert _download(viewer, child.run_id).status_code == 410
    assert _download(viewer, "run-again").status_code == 200
