"""Which tests the PostgreSQL pass runs (tests/conftest.py `uses_database`, N17Q_TEST_DATABASE_ONLY=1): the tests that
open a database connection, less those marked `database_incidental`; the SQLite pass runs every test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = "tests/runs/test_lineage_picture.py"
INCIDENTAL = "test_it_places_no_label_over_another_or_over_a_node_in_a_dense_run"


def _collected(database_only: bool) -> set[str]:
    env = {**os.environ, "N17Q_TEST_DATABASE_ONLY": "1" if database_only else "0"}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", MODULE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line.split("::", 1)[1] for line in out.stdout.splitlines() if line.startswith(MODULE + "::")}


def test_the_database_pass_leaves_out_a_test_whose_rows_are_incidental_and_keeps_the_others():
    everything = _collected(database_only=False)
    database_pass = _collected(database_only=True)
    assert INCIDENTAL in everything and INCIDENTAL not in database_pass
    assert database_pass and database_pass < everything  # the module's other tests touch the database: kept
