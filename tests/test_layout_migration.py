"""The models that moved out of `runs` (tokens and the audit log to `accounts`, replays and worker heartbeats to
`replays`) kept their tables and their rows: a database written before the move reads the same after it, the
permissions follow their models, and on PostgreSQL the audit log's trigger still refuses an UPDATE.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError

from tests.migrations_at import apps_at, migrate_to

# The latest migration of each app before the move (contenttypes and auth are named so that the historical
# models are their latest; nothing of theirs follows, so they are not rolled back).
APPLIED_BEFORE_THE_MOVE: list[tuple[str, str]] = [
    ("runs", "0008_replay_claims_and_progress"),
    ("fixtures_review", "0004_history_names_its_people"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
]
BEFORE_THE_MOVE: list[tuple[str, str | None]] = [*APPLIED_BEFORE_THE_MOVE, ("accounts", None), ("replays", None)]
T0 = datetime(2026, 6, 10, 14, 0, tzinfo=UTC)


def _write_before_the_move() -> dict[str, int]:
    apps = apps_at(APPLIED_BEFORE_THE_MOVE)
    user = apps.get_model("auth", "User").objects.create(username="moved-owner")
    token = apps.get_model("runs", "HarnessToken").objects.create(
        name="ci harness", user=user, key_digest="d" * 64, prefix="n17q_abc", scopes=["runs:import"]
    )
    run = apps.get_model("runs", "Run").objects.create(
        run_id="run-before-move",
        task_id="task",
        environment="recorded",
        mode="recorded",
        model_name="m",
        model_version="1",
        policy_revision="p1",
        created_at=T0,
        manifest_run={},
        bundle_digest="sha256:" + "0" * 64,
    )
    replay = apps.get_model("runs", "Replay").objects.create(source_run=run, mode="replay", state="finished")
    audit = apps.get_model("runs", "AuditEntry").objects.create(at=T0, actor="moved-owner", via="web", action="x.y")
    beat = apps.get_model("runs", "WorkerHeartbeat").objects.create(
        hostname="celery@before", pid=1, started_at=T0, last_seen_at=T0
    )
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    ct, _ = content_type.objects.get_or_create(app_label="runs", model="replay")
    perm, _ = permission.objects.get_or_create(content_type=ct, codename="view_replay", defaults={"name": "x"})
    return {"token": token.pk, "replay": replay.pk, "audit": audit.pk, "beat": beat.pk, "perm": perm.pk}


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_read_the_same_after_it() -> None:
    migrate_to(BEFORE_THE_MOVE)
    try:
        ids = _write_before_the_move()
    finally:
        migrate_to()

    from django.contrib.auth.models import Permission

    from accounts.models import AuditEntry, HarnessToken
    from replays.models import Replay, WorkerHeartbeat

    token = HarnessToken.objects.get(pk=ids["token"])
    assert (token.name, token.user.username, token.scopes) == ("ci harness", "moved-owner", ["runs:import"])
    replay = Replay.objects.get(pk=ids["replay"])
    assert (replay.source_run.run_id, replay.state) == ("run-before-move", "finished")
    assert AuditEntry.objects.get(pk=ids["audit"]).action == "x.y"
    assert WorkerHeartbeat.objects.get(pk=ids["beat"]).hostname == "celery@before"
    # The permission row is the same row, now under the model's new app.
    perm = Permission.objects.get(pk=ids["perm"])
    assert (perm.content_type.app_label, perm.content_type.model) == ("replays", "replay")
    assert [t._meta.db_table for t in (HarnessToken, AuditEntry, Replay, WorkerHeartbeat)] == [
        "runs_harnesstoken",
        "runs_auditentry",
        "runs_replay",
        "runs_workerheartbeat",
    ]

    if connection.vendor == "postgresql":
        refused = pytest.raises(DatabaseError, match="append-only: UPDATE on runs_auditentry refused")
        with refused, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE runs_auditentry SET action = 'rewritten' WHERE id = %s", [ids["audit"]])
    assert AuditEntry.objects.get(pk=ids["audit"]).action == "x.y"
