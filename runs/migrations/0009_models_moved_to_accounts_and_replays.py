"""Tokens and the audit log moved to `accounts`, replays and worker heartbeats to `replays`, with their tables.

State only for the models (the tables keep their names and rows). The content types of the moved models follow
them, so the permissions that point at them (and any admin log entry) keep pointing at the same rows.
"""

from django.db import migrations


MOVED = {"harnesstoken": "accounts", "auditentry": "accounts", "replay": "replays", "workerheartbeat": "replays"}


def content_types_follow(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        ContentType.objects.filter(app_label="runs", model=model).update(app_label=app_label)


def content_types_return(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model, app_label in MOVED.items():
        ContentType.objects.filter(app_label=app_label, model=model).update(app_label="runs")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('accounts', '0001_initial'),
        ('fixtures_review', '0005_token_is_an_accounts_model'),
        ('runs', '0008_replay_claims_and_progress'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='AuditEntry',
                ),
                migrations.RemoveField(
                    model_name='harnesstoken',
                    name='created_by',
                ),
                migrations.RemoveField(
                    model_name='harnesstoken',
                    name='user',
                ),
                migrations.RemoveField(
                    model_name='replay',
                    name='created_by',
                ),
                migrations.RemoveField(
                    model_name='replay',
                    name='run',
                ),
                migrations.RemoveField(
                    model_name='replay',
                    name='scenario_version',
                ),
                migrations.RemoveField(
                    model_name='replay',
                    name='source_run',
                ),
                migrations.DeleteModel(
                    name='WorkerHeartbeat',
                ),
                migrations.DeleteModel(
                    name='HarnessToken',
                ),
                migrations.DeleteModel(
                    name='Replay',
                ),
    
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_follow, content_types_return),
    ]
