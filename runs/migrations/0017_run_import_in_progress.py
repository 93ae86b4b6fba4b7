"""The record of an import writing its run in slices on SQLite (runs/import_slices.py, issue 31 point 4): its run id,
the key reserved for its run, who holds it, its heartbeat, the blob files it writes. Not history: deleted when the run
is published or its rows removed."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_lin015_not_judged_for_earlier_runs"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunImport",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("run_id", models.CharField(max_length=200, unique=True)),
                ("run_key", models.BigIntegerField(unique=True)),
                ("holder", models.CharField(max_length=300)),
                ("token", models.CharField(max_length=64)),
                ("started_at", models.DateTimeField()),
                ("heartbeat_at", models.DateTimeField()),
                ("blob_files", models.JSONField(default=list)),
            ],
        ),
    ]
