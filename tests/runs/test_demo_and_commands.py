"""load_demo and the lineage command, with the shapes other programs depend on (DESIGN §8)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from django.contrib.auth import authenticate
from django.core.management import CommandError, call_command

from n17q_demo import stories
from runs.models import Finding, Run

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def run_json(capsys, *args) -> dict:
    call_command(*args, "--json")
    return json.loads(capsys.readouterr().out)


def test_it_loads_the_three_stories_and_a_user_per_role(capsys):
    demo = run_json(capsys, "load_demo")
    assert {r["story"] for r in demo["runs"]} == {
        "000_fbd054b208c5f58c",
        "001_c6aee59ec1eb4bb8",
        "003_1dab681921caa907",
    }
    assert all(set(r) >= {"id", "story", "title"} and r["title"] for r in demo["runs"])
    assert [u["role"] for u in demo["users"]] == ["viewer", "operator", "reviewer", "admin"]
    for user in demo["users"]:
        assert set(user) >= {"username", "role", "password"}
        signed_in = authenticate(username=user["username"], password=user["password"])
        assert signed_in is not None and user["role"] in {g.name for g in signed_in.groups.all()}
    assert Run.objects.count() == len(demo["runs"])


def test_it_stores_the_findings_each_story_must_show(capsys):
    run_json(capsys, "load_demo")
    for story in stories.demo_bundles():
        run_id = story.manifest["run"]["id"]
        stored = set(Finding.objects.filter(run__run_id=run_id).values_list("code", flat=True))
        assert stored == story.expected_codes, run_id


def test_it_shows_lin001_on_the_review_request_of_story_003(capsys):
    run_json(capsys, "load_demo")
    run_id = next(b.manifest["run"]["id"] for b in stories.demo_bundles() if b.story.startswith("003"))
    result = run_json(capsys, "lineage", run_id)
    assert result["run"] == run_id
    lin001 = [f for f in result["findings"] if f["code"] == "LIN001"]
    assert lin001 and all(set(f) == {"code", "severity", "from", "to", "message"} for f in result["findings"])
    assert any("ws-1" in f["message"] and "ws-2" in f["message"] for f in lin001)


def test_it_loads_the_demo_twice_without_duplicating_runs(capsys):
    first = run_json(capsys, "load_demo")
    second = run_json(capsys, "load_demo")
    assert [r["id"] for r in first["runs"]] == [r["id"] for r in second["runs"]]
    assert Run.objects.count() == len(first["runs"])
    # Passwords are fresh on every load: the old one no longer signs in.
    assert authenticate(username="viewer", password=first["users"][0]["password"]) is None


def test_it_refuses_an_unknown_run_in_the_lineage_command():
    with pytest.raises(CommandError, match="no run 'nope'"):
        call_command("lineage", "nope", "--json")


@pytest.fixture(scope="module")
def migrated_cli_database(tmp_path_factory) -> Path:
    """A SQLite database file migrated by `manage.py migrate` in a process of its own, once for the module's CLI tests
    (each works on a copy)."""
    folder = tmp_path_factory.mktemp("cli")
    env = {**os.environ, "N17Q_DATA_DIR": str(folder), "DATABASE_URL": f"sqlite:///{folder}/cli.sqlite3"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    database = folder / "cli.sqlite3"
    with closing(sqlite3.connect(database)) as connection:  # everything in the main file, none in a WAL beside it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return database


@pytest.mark.database_incidental  # its own SQLite file, in a process of its own: not the pass's database
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["import_run", "/nonexistent/bundle.zip", "--json"], "does not exist"),
        (["lineage", "nope", "--json"], "no run 'nope'"),
    ],
)
def test_it_exits_non_zero_with_one_line_on_stderr(migrated_cli_database, tmp_path, args, expected):
    shutil.copy(migrated_cli_database, tmp_path / "cli.sqlite3")
    env = {**os.environ, "N17Q_DATA_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/cli.sqlite3"}
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0]
