"""`make test`: every check CI runs, each one run even when an earlier one failed, then one summary.

A failing lint step must not hide a failing PostgreSQL pass (the append-only triggers and the approval race
run only there), so nothing here stops early. The exit status is non-zero when any step failed. The last line
is the tests' total in the plain form CI reads ("tests: N passed, N failed, N skipped").

Run as `python scripts/run_checks.py` from the repository root (the Makefile does); PG_URL and
REDIS_TEST_URL come from the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("VENV", ROOT / ".venv")) / "bin"
PG_URL = os.environ.get("PG_URL", "postgres://postgres@127.0.0.1:5432/test")
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
# Each pass runs on pytest-xdist workers (one test database, blob store and port range each; tests/conftest.py).
# More workers than the machine's two cores: a good share of the suite waits on a Celery worker, a sandbox, a
# browser or a subprocess rather than computing, and worksteal keeps the workers busy to the end.
TEST_WORKERS = os.environ.get("N17Q_TEST_WORKERS", "3")
PARALLEL = ["-n", TEST_WORKERS, "--dist", "worksteal"]


@dataclass
class Step:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    junit: Path | None = None
    returncode: int | None = None
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)


def _data_dir() -> str:
    return tempfile.mkdtemp(prefix="n17q-check-")


def _pytest(name: str, extra: list[str], env: dict[str, str], reports: Path) -> Step:
    junit = reports / f"{name}.xml"
    argv = [str(BIN / "pytest"), "-q", "--durations=15", f"--junitxml={junit}", *PARALLEL, *extra]
    return Step(name, argv, env, junit)


def steps(reports: Path) -> list[Step]:
    django = {"N17Q_DATA_DIR": _data_dir()}
    return [
        Step("ruff check", [str(BIN / "ruff"), "check", "."]),
        Step("ruff format", [str(BIN / "ruff"), "format", "--check", "."]),
        Step("import contracts", [str(BIN / "lint-imports")]),
        # issue 32: no write path of the product's code goes around the storage gate (n17q_secrets.gate).
        Step("storage gate", [str(BIN / "python"), "scripts/check_storage_gate.py"]),
        Step("mypy", [str(BIN / "mypy")], django),
        Step("django check", [str(BIN / "python"), "manage.py", "check"], django),
        Step("migrations", [str(BIN / "python"), "manage.py", "makemigrations", "--check", "--dry-run"], django),
        # The browser tests run once, in the SQLite pass: what they show does not depend on the database. So do the
        # engine's (tests/engine): the engine has no database (an import contract), and its sandboxed agents' tests
        # are the slowest of the suite. So does every other test that never opens a database connection
        # (N17Q_TEST_DATABASE_ONLY, tests/conftest.py): the PostgreSQL pass runs the tests that touch the database.
        _pytest("tests on SQLite", [], {"N17Q_DATA_DIR": _data_dir(), "REDIS_TEST_URL": REDIS_TEST_URL}, reports),
        _pytest(
            "tests on PostgreSQL",
            ["-m", "not browser", "--ignore=tests/engine"],
            {
                "N17Q_DATA_DIR": _data_dir(),
                "DATABASE_URL": PG_URL,
                "N17Q_TEST_POSTGRES": "1",
                "N17Q_TEST_DATABASE_ONLY": "1",
                "REDIS_TEST_URL": REDIS_TEST_URL,
                "N17Q_TEST_DATABASE_NAME": f"test_n17q_{os.getpid()}",
            },
            reports,
        ),
    ]


def junit_counts(path: Path) -> dict[str, int]:
    """passed / failed / skipped from pytest's JUnit XML (errors count as failed)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in suites:
        for key in total:
            total[key] += int(suite.get(key, 0))
    failed = total["failures"] + total["errors"]
    return {"passed": total["tests"] - failed - total["skipped"], "failed": failed, "skipped": total["skipped"]}


def run(step: Step) -> None:
    print(f"\n===== {step.name}: {' '.join(step.argv[:1] + step.argv[1:4])}", flush=True)
    started = time.monotonic()
    try:
        step.returncode = subprocess.call(step.argv, cwd=ROOT, env={**os.environ, **step.env})
    except OSError as exc:
        print(f"{step.name}: could not start: {exc}", file=sys.stderr)
        step.returncode = 127
    step.seconds = time.monotonic() - started
    if step.junit is not None:
        step.counts = junit_counts(step.junit)
        # pytest exits 5 when it collected nothing: a pass that ran no test is a failure here.
        if step.returncode == 0 and not step.counts.get("passed"):
            print(f"{step.name}: no test passed", file=sys.stderr)
            step.returncode = 5


def summary(done: list[Step]) -> int:
    print("\n===== summary")
    width = max(len(s.name) for s in done)
    for s in done:
        verdict = "ok" if s.returncode == 0 else f"FAILED (exit {s.returncode})"
        counts = ", ".join(f"{v} {k}" for k, v in s.counts.items()) if s.counts else ""
        print(f"  {s.name:<{width}}  {verdict:<18} {s.seconds:7.1f} s  {counts}")
    failed_steps = [s.name for s in done if s.returncode != 0]
    print(
        f"  {len(done) - len(failed_steps)} of {len(done)} steps ok"
        + (f"; failed: {', '.join(failed_steps)}" if failed_steps else "")
    )
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for s in done:
        for key in totals:
            totals[key] += s.counts.get(key, 0)
    print(f"tests: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if failed_steps else 0


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="n17q-reports-") as tmp:
        plan = steps(Path(tmp))
        for step in plan:
            run(step)
        return summary(plan)


if __name__ == "__main__":
    sys.exit(main())
