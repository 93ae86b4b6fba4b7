"""Contract revisions a migration may move a scenario to (append-only, refused at the database on PostgreSQL as the
other history tables are, 0003), and recordings staged by a contract migration (docs/contract-migration.md)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TABLE = "fixtures_review_contractrevision"


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
        "FOR EACH ROW EXECUTE FUNCTION n17q_refuse_history_change()"
    )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("fixtures_review", "0008_staged_recording_run_result"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="stagedrecording",
            name="migration",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="stagedrecording",
            name="origin",
            field=models.CharField(
                choices=[
                    ("capture", "Capture"),
                    ("copy-similar", "Copy Similar"),
                    ("copy-recorded", "Copy Recorded"),
                    ("run-result", "Run Result"),
                    ("contract-migration", "Contract Migration"),
                ],
                default="capture",
                max_length=20,
            ),
        ),
        migrations.CreateModel(
            name="ContractRevision",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("tool", models.CharField(max_length=200)),
                ("revision", models.PositiveIntegerField()),
                ("digest", models.CharField(max_length=71, unique=True)),
                ("contract", models.JSONField()),
                ("declared_at", models.DateTimeField(auto_now_add=True)),
                (
                    "declared_by",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["tool", "revision"],
                "constraints": [models.UniqueConstraint(fields=("tool", "revision"), name="contract_revision_unique")],
            },
        ),
        migrations.RunPython(install, uninstall),
    ]
