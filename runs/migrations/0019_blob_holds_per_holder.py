"""Retention per holder (docs/retention.md, issue 33): each run's hold on each of its blobs, with its own class, its
own clock and the deletion record that ended it.

Until now one row per blob held the longest hold, and a removal was the blob's alone: a later run storing the same
bytes made an earlier run's download answer again, and its own copy was never swept (the blob still said "removed").
The holds of runs already imported are written here from what they were imported with: the class their RunBlob
names, counted from the run's `created_at` under the classes declared now (N17Q_RETENTION_CLASSES). A run imported
before its blob's removal had its hold ended by that removal. A run imported after it, while the store holds the
bytes again, recorded them again (the bug above): its hold is live, and the blob is given back its bytes and the
longest of those live holds, so the sweep removes this copy at its own expiry. If the store does not hold them, every
hold on the blob ended with the removal.
"""

from datetime import timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _expiry(created_at, name):
    declared = settings.N17Q_RETENTION_CLASSES.get(name)
    if declared is None or declared[0] is None:
        return None  # kept indefinitely, or a class not declared (kept: removal cannot be undone)
    return created_at + timedelta(seconds=declared[0])


def _longer(current, candidate):
    # As runs.retention._longest: None keeps forever; an equal expiry keeps the current hold.
    if current is None:
        return candidate
    if current[1] is None:
        return current
    if candidate[1] is None or candidate[1] > current[1]:
        return candidate
    return current


def holds_of_imported_runs(apps, schema_editor):
    from django.core.files.storage import storages

    run_blob_model = apps.get_model("runs", "RunBlob")
    hold_model = apps.get_model("runs", "RunBlobHold")
    blob_model = apps.get_model("runs", "Blob")
    deletion_model = apps.get_model("runs", "BlobDeletion")
    latest = {}  # blob pk -> (deletion pk, removed_at): the one removal each blob could have had until now
    for pk, blob_id, removed_at in deletion_model.objects.order_by("id").values_list("id", "blob_id", "removed_at"):
        latest[blob_id] = (pk, removed_at)
    store = storages["blobs"]
    back = {}  # blob pk -> the longest live hold of a blob whose bytes a later run stored again
    batch = []
    rows = run_blob_model.objects.order_by("id").values_list(
        "id", "blob_id", "blob__digest", "blob__bytes_removed_at", "retention", "run__created_at", "run__imported_at"
    )
    for pk, blob_id, digest, removed_at, name, created_at, imported_at in rows.iterator(chunk_size=2000):
        expires = _expiry(created_at, name)
        ended = None
        if removed_at is not None and blob_id in latest:
            deletion_pk, deletion_at = latest[blob_id]
            stored_again = imported_at > deletion_at and store.exists("sha256/" + digest.removeprefix("sha256:"))
            if stored_again:
                back[blob_id] = _longer(back.get(blob_id), (name, expires))
            else:
                ended = deletion_pk
        batch.append(
            hold_model(run_blob_id=pk, blob_id=blob_id, retention_class=name, expires_at=expires, removed_by_id=ended)
        )
        if len(batch) >= 2000:
            hold_model.objects.bulk_create(batch)
            batch.clear()
    hold_model.objects.bulk_create(batch)
    for blob_id, (name, expires) in back.items():
        declared = settings.N17Q_RETENTION_CLASSES.get(name)
        blob_model.objects.filter(pk=blob_id).update(
            bytes_removed_at=None,
            retention_class=name,
            expires_at=expires,
            sensitivity=declared[1] if declared else "",
        )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_masked_secret_received"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunBlobHold",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("retention_class", models.CharField(max_length=100)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                (
                    "blob",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="run_holds", to="runs.blob"
                    ),
                ),
                (
                    "removed_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="ended_holds",
                        to="runs.blobdeletion",
                    ),
                ),
                (
                    "run_blob",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.PROTECT, related_name="hold", to="runs.runblob"
                    ),
                ),
            ],
        ),
        migrations.RunPython(holds_of_imported_runs, migrations.RunPython.noop),
    ]
