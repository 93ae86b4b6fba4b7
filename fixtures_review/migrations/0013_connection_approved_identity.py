from django.db import migrations, models

from n17q_engine import canonical

# Connection.IDENTITY_FIELDS when this migration was written (a historical model has no methods).
IDENTITY_FIELDS = (
    "name",
    "kind",
    "reaches",
    "source_classes",
    "capabilities",
    "account_scopes",
    "capture_result_classes",
    "default_result_class",
    "endpoint_scheme",
    "endpoint_host",
    "endpoint_port",
    "endpoint_path_prefix",
    "credential_name",
)


def approved_as_they_are(apps, schema_editor):
    """A connection approved before the approval kept its identity was approved as it stands now: keep that."""
    Connection = apps.get_model("fixtures_review", "Connection")
    for connection in Connection.objects.filter(state="approved"):
        digest = canonical.digest_json({field: getattr(connection, field) for field in IDENTITY_FIELDS})
        Connection.objects.filter(pk=connection.pk).update(approved_identity=digest)


class Migration(migrations.Migration):
    dependencies = [
        ("fixtures_review", "0012_model_endpoints"),
    ]

    operations = [
        migrations.AddField(
            model_name="connection",
            name="approved_identity",
            field=models.CharField(blank=True, default="", editable=False, max_length=71),
        ),
        migrations.RunPython(approved_as_they_are, migrations.RunPython.noop),
    ]
