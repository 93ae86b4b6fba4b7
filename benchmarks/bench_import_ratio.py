"""Budget (issue 31): the bundle import through its command costs at most 8x a bare JSON parse of the same events,
the lineage check through its command at most 4x, Django's start included; both databases within 5 s at 100,000.

Three figures for the same run and the same file, each in a fresh interpreter (median of the repeats):
- the bare parse: `json.loads` of every line of events.jsonl, and nothing else (the floor any reader pays);
- `python manage.py import_run FOLDER --json` into an empty, migrated database (SQLite in a new data folder; the
  scratch PostgreSQL database of bench_import, created afresh for each import), wall time of the whole process;
- `python manage.py lineage RUN --json` on that database (the stored run read back and checked), wall time.

Before measuring, the project's modules are compiled to bytecode once (`compileall`): a deployed console has its
bytecode, while a machine with PYTHONDONTWRITEBYTECODE set (this one has) would otherwise compile about 160 modules
again at every start, which no user pays. See docs/benchmarks.md.
"""

from __future__ import annotations

import compileall
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import synth
from .bench_import import Postgres, postgres_admin_url
from .common import REPO, Config, child_env, median, row, run_child

NAME = "import_ratio"
IMPORT_RATIO_BUDGET = 8.0
LINEAGE_RATIO_BUDGET = 4.0
TIME_BUDGET_S = 5.0
DEFAULT_REPEAT = 5
PROJECT_PACKAGES = (
    "n17q_engine",
    "n17q_secrets",
    "n17q_site",
    "console",
    "accounts",
    "runs",
    "fixtures_review",
    "replays",
    "otlp_receiver",
    "n17q_demo",
)

_BARE_PARSE = """
import json, sys, time
start = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    for line in fh:
        json.loads(line)
print(time.perf_counter() - start)
"""


def _compile_project() -> None:
    for package in PROJECT_PACKAGES:
        compileall.compile_dir(REPO / package, quiet=1)
    compileall.compile_file(REPO / "manage.py", quiet=1)


def bare_parse_s(events: Path) -> float:
    """json.loads of every line, timed inside a fresh interpreter (its own start is not the parse's)."""
    out = subprocess.run([sys.executable, "-c", _BARE_PARSE, str(events)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _command_s(args: list[str], *, data_dir: Path, database_url: str | None) -> tuple[float, dict[str, Any]]:
    """Wall time of `python manage.py ARGS --json`, the whole process, and its JSON answer."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "manage.py", *args, "--json"],
        cwd=REPO,
        env=child_env(data_dir, database_url),
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return seconds, json.loads(proc.stdout)


def measure(folder: Path, *, backend: str, pg: Postgres | None, work: Path, lineage_repeat: int) -> dict[str, Any]:
    """One import through the command into an empty database, then the lineage command on it `lineage_repeat` times."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"ratio-{backend}-", dir=work))
    try:
        url = None
        if backend == "postgresql":
            assert pg is not None
            pg.fresh()
            url = pg.url
        run_child(["migrate"], data_dir=data_dir, database_url=url)
        import_s, answer = _command_s(["import_run", str(folder)], data_dir=data_dir, database_url=url)
        lineage = [
            _command_s(["lineage", answer["run"]], data_dir=data_dir, database_url=url) for _ in range(lineage_repeat)
        ]
        if any(result["findings"] != answer["findings"] for _, result in lineage):
            raise AssertionError("the lineage command and the import disagree on the run's findings")
        return {"import_s": import_s, "events": answer["events"], "lineage_s": [s for s, _ in lineage]}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    folder, info = synth.bundle_of(n)
    work = synth.session_dir()
    _compile_project()
    events = folder / "events.jsonl"
    parses = [bare_parse_s(events) for _ in range(repeat)]
    parse = median(parses)
    details: dict[str, Any] = {"events": n, "repeat": repeat, "bundle": info, "bare_parse_s": parses, "backends": {}}
    rows: list[dict[str, Any]] = []
    notes = [
        f"bare parse (json.loads of each line, {info['events_bytes'] / 2**20:.0f} MB): {parse:.3f} s median "
        f"({', '.join(f'{p:.3f}' for p in parses)} s)"
    ]

    backends: list[tuple[str, Postgres | None]] = [("sqlite", None)]
    pg = Postgres(postgres_admin_url())
    why_not = pg.reachable()
    if why_not is None:
        backends.append(("postgresql", pg))
    else:
        rows.append(row("import command, PostgreSQL", f"< {TIME_BUDGET_S:g} s", f"skipped: {why_not}", None, config))
    for backend, server in backends:
        label = "SQLite" if backend == "sqlite" else "PostgreSQL"
        try:
            runs = [measure(folder, backend=backend, pg=server, work=work, lineage_repeat=1) for _ in range(repeat)]
        finally:
            if server is not None:
                server.drop()
        if any(r["events"] != n for r in runs):
            raise AssertionError(f"{label}: the import command stored {[r['events'] for r in runs]} events, not {n}")
        imports = [r["import_s"] for r in runs]
        lineages = [s for r in runs for s in r["lineage_s"]]
        imp, lin = median(imports), median(lineages)
        details["backends"][backend] = {"import_s": imports, "lineage_s": lineages}
        listed = ", ".join(f"{s:.2f}" for s in imports)
        rows.append(
            row(
                f"import command / bare parse, {label}",
                f"<= {IMPORT_RATIO_BUDGET:g}x",
                f"{imp / parse:.1f}x ({imp:.2f} s median: {listed} s; parse {parse:.3f} s)",
                imp / parse <= IMPORT_RATIO_BUDGET,
                config,
            )
        )
        rows.append(
            row(
                f"import command, {label}",
                f"< {TIME_BUDGET_S:g} s",
                f"{imp:.2f} s median, Django's start included",
                imp < TIME_BUDGET_S,
                config,
            )
        )
        rows.append(
            row(
                f"lineage command / bare parse, {label}",
                f"<= {LINEAGE_RATIO_BUDGET:g}x",
                f"{lin / parse:.1f}x ({lin:.2f} s median: {', '.join(f'{s:.2f}' for s in lineages)} s)",
                lin / parse <= LINEAGE_RATIO_BUDGET,
                config,
            )
        )
    return {"rows": rows, "details": details, "notes": notes}
