"""A staged recording's own hold on its bodies (docs/retention.md, issue 33): when it runs out.

Until now a recording's hold ended only with the bytes' removal, so a recording whose class ran out kept serving its
body for as long as a run or another recording held the same bytes. `hold_expires_at` is when the recording's hold
runs out; the sweep ends it then with a deletion record of its own. Recordings staged before this are given it from
what they were staged with: their class, counted from their `captured_at` under the classes declared now
(N17Q_RETENTION_CLASSES). A recording none of whose bodies is still held (its bodies' removal ended them all, or it
has none), or whose class keeps forever or is not declared, gets none.
"""

from datetime import timedelta

from django.conf import settings
from django.db import migrations, models


def _expiry(captured_at, name):
    declared = settings.N17Q_RETENTION_CLASSES.get(name)
    if declared is None or declared[0] is None:
        return None  # kept indefinitely, or a class not declared (kept: removal cannot be undone)
    return captured_at + timedelta(seconds=declared[0])


def holds_of_staged_recordings(apps, schema_editor):
    recording_model = apps.get_model("fixtures_review", "StagedRecording")
    rows = recording_model.objects.order_by("id").values_list(
        "id", "body_blobs", "expired_bodies", "retention_class", "captured_at"
    )
    for pk, body_blobs, expired_bodies, name, captured_at in rows.iterator(chunk_size=2000):
        held = [where for where in (body_blobs or {}) if where not in (expired_bodies or {})]
        expires = _expiry(captured_at, name) if held and name else None
        if expires is not None:
            recording_model.objects.filter(pk=pk).update(hold_expires_at=expires)


class Migration(migrations.Migration):
    dependencies = [
        ("fixtures_review", "0014_recording_no_change"),
    ]

    operations = [
        migrations.AddField(
            model_name="stagedrecording",
            name="hold_expires_at",
            field=models.DateTimeField(blank=True, db_index=True, null=True),
        ),
        migrations.RunPython(holds_of_staged_recordings, migrations.RunPython.noop),
    ]
