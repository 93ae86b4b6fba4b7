"""Harness tokens and the audit log, moved here from `runs` with their tables (runs_harnesstoken, runs_auditentry).

State only: the tables, their indexes and the audit log's append-only trigger were made by runs' migrations
0001-0006 and stay as they are; this migration tells Django the models now belong to `accounts`.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('runs', '0008_replay_claims_and_progress'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AuditEntry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('at', models.DateTimeField(db_index=True)),
                        ('actor', models.CharField(blank=True, default='', max_length=150)),
                        ('actor_user_id', models.BigIntegerField(blank=True, null=True)),
                        ('via', models.CharField(max_length=60)),
                        ('action', models.CharField(db_index=True, max_length=60)),
                        ('target', models.CharField(blank=True, default='', max_length=300)),
                        ('detail', models.JSONField(blank=True, default=dict)),
                        ('ip', models.GenericIPAddressField(blank=True, null=True)),
                    ],
                    options={
                        'verbose_name_plural': 'audit entries',
                        'db_table': 'runs_auditentry',
                        'ordering': ['-at', '-id'],
                        'indexes': [models.Index(fields=['actor', 'at'], name='runs_audite_actor_965b72_idx')],
                    },
                ),
                migrations.CreateModel(
                    name='HarnessToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=200)),
                        ('key_digest', models.CharField(max_length=64, unique=True)),
                        ('prefix', models.CharField(max_length=12)),
                        ('scopes', models.JSONField(default=list)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('created_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='harness_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'runs_harnesstoken',
                    },
                ),
    
            ],
            database_operations=[],
        ),
    ]
