"""Append-only in the database: every append-only table refuses UPDATE and DELETE by trigger on PostgreSQL.

The list is not written down here: it is every model built on `runs.models.AppendOnlyModel` (history, the audit
log, review events, fixture and scenario versions, and whatever another app adds that way), so a new table that
the model guards but no migration protects fails this test.
"""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.db import DatabaseError, connection, transaction

from accounts.audit import audit_record
from console.append_only import AppendOnlyModel
from runs.importer import run_import_from_path
from tests import bundles

pytestmark = pytest.mark.django_db


def append_only_tables() -> list[str]:
    return sorted(m._meta.db_table for m in apps.get_models() if issubclass(m, AppendOnlyModel))


def test_the_append_only_models_include_history_and_the_audit_log():
    tables = append_only_tables()
    assert {"runs_event", "runs_edge", "runs_runobject", "runs_finding", "runs_runblob", "runs_auditentry"} <= set(
        tables
    )


def test_every_append_only_table_has_a_refusing_trigger_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("the triggers are PostgreSQL's; SQLite keeps the model-level guard")
    missing = []
    with connection.cursor() as cursor:
        for table in append_only_tables():
            cursor.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgenabled <> 'D'",
                [table],
            )
            definitions = [row[0] for row in cursor.fetchall()]
            # PostgreSQL spells it back as "BEFORE DELETE OR UPDATE ON public.<table> FOR EACH ROW ...".
            if not any(
                re.search(r"\bBEFORE (UPDATE OR DELETE|DELETE OR UPDATE) ON \S+ FOR EACH ROW\b", d)
                and "EXECUTE FUNCTION n17q_refuse_history_change()" in d
                for d in definitions
            ):
                missing.append(table)
    assert missing == []


def test_raw_sql_cannot_change_any_row_of_history_or_the_audit_log_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("the triggers are PostgreSQL's; SQLite keeps the model-level guard")
    run_import_from_path(bundles.EXAMPLE)
    audit_record(actor=None, action="auth.sign_in_refused", target="mallory")
    refused = []
    with_rows = []
    with connection.cursor() as cursor:
        for table in append_only_tables():
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")
            if cursor.fetchone()[0] == 0:
                continue  # nothing to change in this test's data (the catalog test covers the table)
            with_rows.append(table)
            for statement in (f"UPDATE {table} SET id = id", f"DELETE FROM {table}"):
                try:
                    with transaction.atomic(), connection.cursor() as inner:
                        inner.execute(statement)
                except DatabaseError as exc:
                    assert "append-only" in str(exc), (statement, exc)
                    refused.append(statement.split()[0] + " " + table)
    assert {"UPDATE runs_event", "DELETE runs_event", "UPDATE runs_auditentry", "DELETE runs_auditentry"} <= set(
        refused
    )
    # Both statements refused on every table that had a row, and nothing else was tried.
    assert sorted(refused) == sorted(f"{verb} {table}" for table in with_rows for verb in ("UPDATE", "DELETE"))
