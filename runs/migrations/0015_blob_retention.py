"""Retention and sensitivity classes on blobs, and the append-only record of every removal (docs/retention.md).

The deletion record refuses UPDATE and DELETE at the database too (the trigger function of 0002). Blobs stored
before this migration have no class and are kept: their class was never computed, and removal cannot be undone.
"""

import django.db.models.deletion
from django.db import migrations, models



def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "CREATE TRIGGER runs_blobdeletion_append_only BEFORE UPDATE OR DELETE ON runs_blobdeletion "
        "FOR EACH ROW EXECUTE FUNCTION n17q_refuse_history_change()"
    )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP TRIGGER IF EXISTS runs_blobdeletion_append_only ON runs_blobdeletion")


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0014_run_unevaluated'),
    ]

    operations = [
        migrations.CreateModel(
            name='BlobDeletion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(max_length=71)),
                ('size', models.BigIntegerField()),
                ('retention_class', models.CharField(max_length=100)),
                ('sensitivity', models.CharField(blank=True, default='', max_length=20)),
                ('expired_at', models.DateTimeField()),
                ('removed_at', models.DateTimeField()),
                ('removed_by', models.CharField(max_length=200)),
                ('reason', models.TextField()),
                ('holders', models.JSONField(default=list)),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.AddField(
            model_name='blob',
            name='bytes_removed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='blob',
            name='expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='blob',
            name='retention_class',
            field=models.CharField(blank=True, default='', max_length=100),
        ),
        migrations.AddField(
            model_name='blob',
            name='sensitivity',
            field=models.CharField(blank=True, default='', max_length=20),
        ),
        migrations.AddIndex(
            model_name='blob',
            index=models.Index(condition=models.Q(('bytes_removed_at__isnull', True)), fields=['expires_at'], name='blob_due_for_expiry'),
        ),
        migrations.AddField(
            model_name='blobdeletion',
            name='blob',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deletions', to='runs.blob'),
        ),
        migrations.AddIndex(
            model_name='blobdeletion',
            index=models.Index(fields=['digest'], name='runs_blobde_digest_a0a0ec_idx'),
        ),
        migrations.RunPython(install, uninstall),
    ]
