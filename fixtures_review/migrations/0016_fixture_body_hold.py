"""A promoted fixture's hold on its body's bytes (docs/retention.md, "Promoted fixture bodies"; seed 001).

Additive: a new table. From now on promotion stores the reviewed body in the blob store and the fixture holds its
digest, under a hold of its own (the recording's class from its `captured_at`). Fixture versions minted before keep
their inline bodies: a version is immutable, and rewriting one would change its digest and every scenario version's
that pins it, so nothing is migrated and they get no hold.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('fixtures_review', '0015_recording_hold_expiry'),
        ('runs', '0023_run_summary'),
    ]

    operations = [
        migrations.CreateModel(
            name='FixtureBodyHold',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('fixture_id', models.CharField(max_length=40)),
                ('retention_class', models.CharField(blank=True, default='', max_length=100)),
                ('recorded_at', models.DateTimeField()),
                ('expires_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('blob', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='fixture_holds', to='runs.blob')),
                ('fixture_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='body_holds', to='fixtures_review.fixtureversion')),
                ('recording', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='fixture_body_holds', to='fixtures_review.stagedrecording')),
                ('removed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='ended_fixture_holds', to='runs.blobdeletion')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
    ]
