"""Refuse UPDATE and DELETE of review events and fixture versions at the database itself (PostgreSQL).

The same trigger function as runs' history (runs/migrations/0002): the models refuse already, this makes raw
SQL refuse too. Scenario versions are immutable the same way.
"""

from django.db import migrations

TABLES = ["fixtures_review_reviewevent", "fixtures_review_fixtureversion", "fixtures_review_scenarioversion"]


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION n17q_refuse_history_change()"
        )


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")


class Migration(migrations.Migration):
    dependencies = [("fixtures_review", "0002_review"), ("runs", "0002_append_only_triggers")]
    operations = [migrations.RunPython(install, uninstall)]
