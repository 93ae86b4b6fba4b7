"""Forged replay results (issue 14, first attack): a replay's child run is made only by the worker holding that
replay's claim. On 775880e a harness token with `runs:import` could import a run under a replay's child id ahead
of it, and the worker adopted it as the replay's log: a replay that should stop as an incomplete test world showed
"completed" with forged events."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from accounts.models import HarnessToken
from n17q_engine.bundle import BundleError
from replays import services as replays
from runs.importer import run_import_from_path
from runs.models import Run
from tests import bundles
from tests.runs.test_api import token_for, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


def _bundle_named(tmp_path, run_id: str):
    manifest, events, blobs = bundles.example_parts()
    manifest["run"]["id"] = run_id
    return bundles.write_folder(tmp_path / "forged", manifest, events, blobs)


def test_a_harness_cannot_import_a_run_under_a_replays_name_ahead_of_it(demo, client, role_user, tmp_path):
    replay = replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    folder = _bundle_named(tmp_path, replay.run_id_for)
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.IMPORT_RUNS)
    response = upload(
        client, bundles.zip_folder(folder, tmp_path / "f.zip").read_bytes(), HTTP_AUTHORIZATION=f"Token {key}"
    )
    assert response.status_code == 400 and "reserved" in response.json()["error"]
    with pytest.raises(BundleError, match="reserved"):
        run_import_from_path(folder)
    assert not Run.objects.filter(run_id=replay.run_id_for).exists()
    # The replay then makes its own child run and reports what really happened.
    done = replays.replay_execute(replay.pk)
    assert replays.replay_json(done)["state"] == "incomplete_test_world" and done.run.made_by_replay == replay.pk


def test_a_run_under_a_replays_name_that_it_did_not_make_is_never_adopted(demo, tmp_path):
    replay = replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    # As if written before the namespace was reserved, or by another replay: not this replay's.
    run_import_from_path(_bundle_named(tmp_path, replay.run_id_for), made_by_replay=replay.pk + 1000)
    done = replays.replay_execute(replay.pk)
    assert done.state == "failed" and "did not make" in done.error and done.run is None


def test_an_ordinary_run_id_still_imports(client, role_user, tmp_path):
    client.force_login(role_user("operator"))
    archive = bundles.zip_folder(_bundle_named(tmp_path, "run-2026-07-01.a_b"), tmp_path / "o.zip")
    response = upload(client, archive.read_bytes())
    assert response.status_code == 201 and Run.objects.get().made_by_replay is None
