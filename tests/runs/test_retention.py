"""Retention and sensitivity classes on blobs (runs/retention.py, docs/retention.md; seed 001 "Retention preserved
the failure"): the sweep removes exactly the expired bytes, once; the deletion record is append-only; pages and
replays disclose what expired."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.core.files.storage import storages
from django.core.management import call_command
from django.db import connection

from console.append_only import HistoryIsAppendOnly
from n17q_engine.bundle import BundleError
from n17q_site.celery import app as celery_app
from n17q_site.env import ConfigurationError, env_retention_classes
from runs.importer import run_import_from_path
from runs.models import Blob, BlobDeletion, Run, blob_storage_name
from runs.retention import HOLD_BATCH, _longest, blobs_hold, retention_class, retention_sweep
from runs.tasks import RETENTION_TASK, retention_sweep_task
from tests.bundles import clone, example_parts, with_blob, write_folder

pytestmark = pytest.mark.django_db

RECORDED = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)  # the example bundle's run.created_at
RESULT_DIGEST = "sha256:e27d186caef5f985753e164829fd65c267f9bbcc653735c24b88c8da4708a90f"  # e-res1's blob


def _import(tmp_path, run_id: str, classes: dict[bytes, str], *, result_class: str = "sensitive"):
    """The example run under `run_id`, its tool result's blob in `result_class`, plus one blob per `classes` entry."""
    manifest, events, blobs = example_parts()
    manifest = clone(manifest)
    manifest["run"]["id"] = run_id
    manifest["blobs"][RESULT_DIGEST]["retention"] = result_class
    digests = {}
    for data, cls in classes.items():
        blobs, digest = with_blob(blobs, data)
        manifest["blobs"][digest] = {"media_type": "text/plain", "size": len(data), "role": "note", "retention": cls}
        digests[data] = digest
    run = run_import_from_path(write_folder(tmp_path / run_id, manifest, events, blobs)).run
    return run, digests


def _held(digest: str) -> bool:
    return storages["blobs"].exists(blob_storage_name(digest))


def test_it_removes_exactly_the_expired_bytes_and_a_second_sweep_changes_nothing(tmp_path):
    _run, d = _import(tmp_path, "run-r1", {b"kept for thirty days": "transient", b"kept forever": "standard"})
    transient, standard = d[b"kept for thirty days"], d[b"kept forever"]
    ten_days_later = RECORDED + timedelta(days=10)

    first = retention_sweep(now=ten_days_later)
    second = retention_sweep(now=ten_days_later)

    assert first.removed == [RESULT_DIGEST] and second.removed == []  # "sensitive" is 7 days
    assert not _held(RESULT_DIGEST) and _held(transient) and _held(standard)
    assert BlobDeletion.objects.count() == 1
    blob = Blob.objects.get(digest=RESULT_DIGEST)
    assert blob.bytes_removed_at == ten_days_later and blob.size == 78  # the digest and its facts stay
    # Thirty days on, the transient one goes too; "standard" never does.
    assert retention_sweep(now=RECORDED + timedelta(days=31)).removed == [transient]
    assert retention_sweep(now=RECORDED + timedelta(days=3650)).removed == []
    assert _held(standard) and BlobDeletion.objects.count() == 2


def test_the_deletion_record_names_digest_class_when_who_and_holders(tmp_path):
    _import(tmp_path, "run-r2", {})
    retention_sweep(now=RECORDED + timedelta(days=8), by="cli tester")

    record = BlobDeletion.objects.get()
    assert (record.digest, record.size, record.retention_class, record.sensitivity) == (
        RESULT_DIGEST,
        78,
        "sensitive",
        "sensitive",
    )
    assert record.expired_at == RECORDED + timedelta(days=7)
    assert record.removed_at == RECORDED + timedelta(days=8)
    assert record.removed_by == "retention sweep (cli tester)"
    assert record.holders == ["run run-r2"]
    assert "'sensitive' (7 days) ran out on 2026-07-08" in record.reason


def test_the_deletion_record_is_append_only(tmp_path):
    _import(tmp_path, "run-r3", {})
    retention_sweep(now=RECORDED + timedelta(days=8))
    record = BlobDeletion.objects.get()

    with pytest.raises(HistoryIsAppendOnly):
        record.save()
    with pytest.raises(HistoryIsAppendOnly):
        BlobDeletion.objects.filter(pk=record.pk).delete()
    if connection.vendor == "postgresql":  # and at the database, past the ORM
        from django.db import DatabaseError, transaction

        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE runs_blobdeletion SET reason = 'rewritten' WHERE id = %s", [record.pk])


def test_shared_bytes_are_kept_as_long_as_the_longest_holder_needs_them(tmp_path):
    _import(tmp_path, "run-short", {}, result_class="sensitive")
    _import(tmp_path, "run-long", {}, result_class="standard")

    assert retention_sweep(now=RECORDED + timedelta(days=3650)).removed == []
    assert _held(RESULT_DIGEST)


def _hold_by_rows(current: tuple[str, datetime | None] | None, name: str, recorded_at: datetime) -> tuple:
    """What `blobs_hold` leaves on one blob, as the row-by-row version decided it: `_longest` of the two holds."""
    cls = retention_class(name)
    return _longest(current, (cls.name, None if cls.period is None else recorded_at + cls.period)) or ("", None)


def test_holds_are_recorded_set_wise_as_the_longest_hold_row_by_row_would_be(django_assert_max_num_queries):
    # Every current hold (none, forever, an earlier, the same and a later expiry, bytes gone) against every class a
    # holder may name (dated, forever, undeclared): each blob ends as `_longest` says, in one UPDATE per class.
    recorded = RECORDED + timedelta(days=2)
    currents: list[tuple[str, datetime | None] | None] = [
        None,
        ("standard", None),
        ("sensitive", RECORDED + timedelta(days=7)),  # ends before a "sensitive" hold from `recorded` would
        ("transient", recorded + timedelta(days=7)),  # ends exactly when it would: the current class stays
        ("transient", RECORDED + timedelta(days=30)),  # ends after it
    ]
    names = ["sensitive", "transient", "standard", "what-the-harness-said"]
    blobs, holds, expected = [], {}, {}
    for i, current in enumerate(currents):
        for j, name in enumerate(names):
            for removed in (False, True):
                digest = f"sha256:{i:02d}{j:02d}{int(removed)}".ljust(71, "0")
                cls, expires = current or ("", None)
                blobs.append(
                    Blob(
                        digest=digest,
                        size=1,
                        retention_class=cls,
                        expires_at=expires,
                        sensitivity=retention_class(cls).sensitivity if cls else "",
                        bytes_removed_at=RECORDED if removed else None,
                    )
                )
                holds[digest] = name
                expected[digest] = (cls, expires) if removed else _hold_by_rows(current, name, recorded)
    Blob.objects.bulk_create(blobs)

    with django_assert_max_num_queries(len(names)):
        blobs_hold(holds, recorded_at=recorded)

    for blob in Blob.objects.filter(digest__in=list(holds)):
        assert (blob.retention_class, blob.expires_at) == expected[blob.digest], (blob.digest, holds[blob.digest])
        assert blob.sensitivity == (retention_class(blob.retention_class).sensitivity if blob.retention_class else "")


def test_holds_on_many_blobs_cost_a_few_queries_not_one_per_blob(django_assert_max_num_queries):
    digests = [f"sha256:{i:064x}" for i in range(1200)]
    Blob.objects.bulk_create([Blob(digest=d, size=1) for d in digests])

    with django_assert_max_num_queries(-(-len(digests) // HOLD_BATCH)):
        blobs_hold(dict.fromkeys(digests, "transient"), recorded_at=RECORDED)

    assert set(Blob.objects.filter(digest__in=digests).values_list("retention_class", "expires_at", "sensitivity")) == {
        ("transient", RECORDED + timedelta(days=30), "internal")
    }


def test_an_undeclared_class_is_kept_never_removed(tmp_path):
    _import(tmp_path, "run-unknown", {}, result_class="whatever-the-harness-said")

    assert retention_sweep(now=RECORDED + timedelta(days=3650)).removed == []
    assert Blob.objects.get(digest=RESULT_DIGEST).expires_at is None


def test_the_detail_panel_and_the_download_disclose_expired_bytes(tmp_path, client, role_user):
    _import(tmp_path, "run-page", {})
    client.force_login(role_user("viewer"))
    before = client.get("/runs/run-page/?event=e-res1").content.decode()
    assert "Expired" not in before and "Download" in before

    retention_sweep(now=RECORDED + timedelta(days=8))
    page = client.get("/runs/run-page/?event=e-res1")
    download = client.get(f"/runs/run-page/blobs/{RESULT_DIGEST}/")

    text = page.content.decode()
    assert page.status_code == 200
    assert "Expired: expired under retention class &#x27;sensitive&#x27;, sensitivity sensitive" in text
    # Said on the page too, not only in the panel (issue 38's tour): the summary, and the row of the event naming it.
    assert "retention removed the bytes of 1 blob this run names (class sensitive)" in text
    rows = re.findall(r'<li class="trace-row.*?</li>', text, re.S)
    marked = [r for r in rows if "bytes expired" in r]
    assert len(marked) == 1 and 'data-event="e-res1"' in marked[0]
    assert "bytes expired" not in before and "retention removed" not in before
    assert f"deletion record {BlobDeletion.objects.get().pk}" in text and "the digest stays" in text
    assert "The blob store does not hold these bytes" not in text  # gone on purpose, not lost
    assert download.status_code == 410
    assert download.content.decode().startswith(f"{RESULT_DIGEST}: expired under retention class 'sensitive'")


def test_the_sweep_task_is_idempotent_and_scheduled_by_beat(tmp_path, monkeypatch):
    # The worker closes its connections after each task; in a test that would close the test's own transaction.
    monkeypatch.setattr("runs.tasks.close_old_connections", lambda: None)
    _import(tmp_path, "run-task", {})
    # The task reads the clock: the example was recorded in 2026, so make its blob due by now whatever today is.
    Blob.objects.filter(digest=RESULT_DIGEST).update(expires_at=datetime.now(UTC) - timedelta(seconds=1))

    assert retention_sweep_task.run() == {"removed": [RESULT_DIGEST], "due_left": False, "holds_ended": []}
    assert retention_sweep_task.run() == {"removed": [], "due_left": False, "holds_ended": []}
    assert BlobDeletion.objects.count() == 1
    entry = celery_app.conf.beat_schedule["retention-sweep"]
    assert entry["task"] == RETENTION_TASK == retention_sweep_task.name
    assert entry["schedule"] == float(settings.N17Q_RETENTION_SWEEP_S)


def test_retention_classes_are_read_from_the_environment_and_refused_loudly(monkeypatch):
    monkeypatch.setenv("N17Q_TEST_CLASSES", "keep=forever:public, short=12h:sensitive,month=30d:internal")
    assert env_retention_classes("N17Q_TEST_CLASSES", "") == {
        "keep": (None, "public"),
        "short": (12 * 3600, "sensitive"),
        "month": (30 * 86400, "internal"),
    }
    for bad in ("short=12m:internal", "a=1d:secret", "a=1d", "a=1d:public,a=2d:public", "", "a=0d:public"):
        monkeypatch.setenv("N17Q_TEST_CLASSES", bad)
        with pytest.raises(ConfigurationError, match="N17Q_TEST_CLASSES"):
            env_retention_classes("N17Q_TEST_CLASSES", "")


def test_the_demo_shows_an_expired_blob_with_its_deletion_record(capsys, client, role_user):
    call_command("load_demo", "--json")
    out = json.loads(capsys.readouterr().out)
    run = Run.objects.get(run_id="run-001-recorded")
    event = run.events.get(kind="tool.result", body__call_id__endswith="call-draft-create")
    digest = event.body["blob"]

    assert digest in out["expired"]
    client.force_login(role_user("viewer"))
    page = client.get(f"/runs/run-001-recorded/?event={event.event_id}").content.decode()
    assert "expired under retention class &#x27;sensitive&#x27;" in page
    assert BlobDeletion.objects.filter(digest=digest, removed_by="retention sweep (demo)").exists()
    # Loading again removes nothing more and records nothing twice.
    call_command("load_demo", "--json")
    assert json.loads(capsys.readouterr().out)["expired"] == []
    assert BlobDeletion.objects.filter(digest=digest).count() == 1


def test_a_bundle_cannot_call_its_own_missing_bytes_expired(tmp_path):
    manifest, events, _blobs = example_parts()
    manifest = clone(manifest)
    manifest["run"]["id"] = "run-claims-expiry"
    manifest["blobs"][RESULT_DIGEST]["expired"] = {"class": "sensitive"}
    folder = write_folder(tmp_path / "b", manifest, events, {})

    with pytest.raises(BundleError, match=r"blobs\.sha256:e27d.*expired: listed as expired, but this console holds no"):
        run_import_from_path(folder)
    assert not Run.objects.filter(run_id="run-claims-expiry").exists()


def test_a_result_whose_body_expired_is_skipped_when_a_run_is_staged_as_recordings(capsys):
    """The trace as the recording (issue 17) meets retention: a result whose bytes were removed cannot become a
    recording; it is skipped with the expiry's own sentence, one line, never a missing-file traceback."""
    call_command("load_demo", "--json")
    capsys.readouterr()
    event = Run.objects.get(run_id="run-001-recorded").events.get(
        kind="tool.result", body__call_id__endswith="call-draft-create"
    )
    call_command(
        "capture_from_run",
        "run-001-recorded",
        *("--event", event.event_id, "--scenario", "email-delivery", "--connection", "mail-provider", "--json"),
    )
    out = json.loads(capsys.readouterr().out)
    assert out["recordings"] == [] and [s["event"] for s in out["skipped"]] == [event.event_id]
    message = out["skipped"][0]["reason"]
    assert "\n" not in message
    assert "expired under retention class 'sensitive'" in message
