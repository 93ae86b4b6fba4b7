"""Refuse UPDATE and DELETE on history at the database itself (PostgreSQL).

The models already refuse; this makes raw SQL and other clients refuse too. TRUNCATE is left alone:
it is what test databases use to reset, and no application path issues it. SQLite keeps the model-level
guard only, because Django's test flush on SQLite deletes rows one table at a time.
"""

from django.db import migrations

TABLES = ["runs_event", "runs_edge", "runs_runobject", "runs_finding", "runs_runblob"]

FUNCTION = """
CREATE OR REPLACE FUNCTION n17q_refuse_history_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'N17Q history is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'raise_exception';
END;
$$ LANGUAGE plpgsql;
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)
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
    schema_editor.execute("DROP FUNCTION IF EXISTS n17q_refuse_history_change()")


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]
    operations = [migrations.RunPython(install, uninstall)]
