"""Runs imported before LIN015 existed say so: their stored findings were made without it, so the check is listed
under `unevaluated` with the reason (runs migration 0016), never shown as passed; a run imported afterwards is judged
at import and carries no such entry."""

from __future__ import annotations

import pytest

from runs.models import Run
from tests import bundles
from tests.migrations_at import apps_at, migrate_to

BEFORE = [("runs", "0015_blob_retention")]


@pytest.mark.django_db(transaction=True)
def test_it_lists_lin015_as_not_evaluated_for_runs_imported_before_it(tmp_path):
    migrate_to(BEFORE)
    try:
        apps = apps_at(BEFORE)
        run_model = apps.get_model("runs", "Run")
        common = {
            "task_id": "t",
            "task_revision": "r1",
            "environment": "live",
            "mode": "recorded",
            "model_name": "m",
            "model_version": "1",
            "policy_revision": "p",
            "created_at": "2026-07-01T09:00:00+00:00",
            "bundle_digest": "sha256:" + "0" * 64,
        }
        run_model.objects.create(
            run_id="run-then",
            manifest_run={"id": "run-then"},
            unevaluated=[{"code": "LIN002", "reason": "the run holds no command receipts"}],
            **common,
        )
        run_model.objects.create(
            run_id="run-then-listed",
            manifest_run={"id": "run-then-listed"},
            unevaluated=[{"code": "LIN015", "reason": "the run holds no artifacts"}],
            **common,
        )
    finally:
        migrate_to()
    then = Run.objects.get(run_id="run-then").unevaluated
    assert [e["code"] for e in then] == ["LIN002", "LIN015"]
    assert "imported before this check existed" in then[1]["reason"] and "lineage" in then[1]["reason"]
    # A run whose LIN015 was already not evaluated keeps its own reason.
    assert Run.objects.get(run_id="run-then-listed").unevaluated == [
        {"code": "LIN015", "reason": "the run holds no artifacts"}
    ]
    # Imported now: judged at import, so no such note.
    from runs.importer import run_import_from_path

    manifest, events, blobs = bundles.example_parts()
    run = run_import_from_path(bundles.write_folder(tmp_path / "now", manifest, events, blobs)).run
    assert all("imported before" not in e["reason"] for e in run.unevaluated)
