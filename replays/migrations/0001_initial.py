"""Replays and worker heartbeats, moved here from `runs` with their tables (runs_replay, runs_workerheartbeat).

State only: the tables and indexes were made by runs' migrations 0005-0008 and stay as they are.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('fixtures_review', '0005_token_is_an_accounts_model'),
        ('runs', '0009_models_moved_to_accounts_and_replays'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='WorkerHeartbeat',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('hostname', models.CharField(max_length=200, unique=True)),
                        ('pid', models.IntegerField()),
                        ('started_at', models.DateTimeField()),
                        ('last_seen_at', models.DateTimeField()),
                        ('stopped_at', models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        'db_table': 'runs_workerheartbeat',
                    },
                ),
                migrations.CreateModel(
                    name='Replay',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('mode', models.CharField(choices=[('recorded', 'Recorded'), ('reconstruction', 'Reconstruction'), ('rerun', 'Rerun'), ('counterfactual', 'Counterfactual'), ('regression', 'Regression')], max_length=20)),
                        ('vary', models.JSONField(default=dict)),
                        ('decider', models.CharField(default='recorded', max_length=50)),
                        ('checkpoint', models.CharField(default='start', max_length=200)),
                        ('environment', models.JSONField(default=dict)),
                        ('state', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('finished', 'Finished'), ('refused', 'Refused'), ('failed', 'Failed'), ('interrupted', 'Interrupted')], default='queued', max_length=20)),
                        ('isolation', models.CharField(blank=True, default='', max_length=20)),
                        ('package_digest', models.CharField(blank=True, default='', max_length=71)),
                        ('missing', models.JSONField(default=list)),
                        ('violations', models.JSONField(default=list)),
                        ('error', models.TextField(blank=True, default='')),
                        ('wall_s', models.FloatField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('enqueued_at', models.DateTimeField(blank=True, null=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('claim_token', models.CharField(blank=True, default='', max_length=32)),
                        ('claimed_by', models.CharField(blank=True, default='', max_length=300)),
                        ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('progress_events', models.PositiveIntegerField(default=0)),
                        ('progress_logical', models.CharField(blank=True, default='', max_length=40)),
                        ('progress_checkpoint', models.CharField(blank=True, default='', max_length=200)),
                        ('created_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('run', models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='replay_of', to='runs.run')),
                        ('scenario_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='fixtures_review.scenarioversion')),
                        ('source_run', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='runs.run')),
                    ],
                    options={
                        'db_table': 'runs_replay',
                        'ordering': ['-created_at', '-id'],
                        'indexes': [models.Index(fields=['state', 'lease_expires_at'], name='runs_replay_state_13313c_idx')],
                    },
                ),
    
            ],
            database_operations=[],
        ),
    ]
