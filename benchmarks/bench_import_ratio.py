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
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import synth
from .bench_import import Postgres, fresh_database, postgres_admin_url
from .common import REPO, Config, child_env, median, row

NAME = "import_ratio"
IMPORT_RATIO_BUDGET = 8.0
LINEAGE_RATIO_BUDGET = 4.0
TIME_BUDGET_S = 5.0
DEFAULT_REPEAT = 5

_BARE_PARSE = """
import json, sys, time
start = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    for line in fh:
        json.loads(line)
print(time.perf_counter() - start)
"""


def _compile_project() -> None:
    """Every package at the project's top level (a folder with an __init__.py) and manage.py, to bytecode."""
    for package in sorted(p for p in REPO.iterdir() if (p / "__init__.py").is_file()):
        compileall.compile_dir(package, quiet=1)
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
    with fresh_database(backend, pg, work) as (data_dir, url):
        import_s, answer = _command_s(["import_run", str(folder)], data_dir=data_dir, database_url=url)
        lineage = [
            _command_s(["lineage", answer["run"]], data_dir=data_dir, database_url=url) for _ in range(lineage_repeat)
        ]
        if any(result["findings"] != answer["findings"] for _, result in lineage):
            raise AssertionError("the lineage command and the import disagree on the run's findings")
        return {"import_s": import_s, "events": answer["events"], "lineage_s": [s for s, _ in lineage]}


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    folder, info = synth.bundle_of(n)
    work = synth.session_dir()
    _compile_project()
    events = folder / "events.jsonl"
    details: dict[str, Any] = {"events": n, "repeat": repeat, "bundle": info, "backends": {}}
    rows: list[dict[str, Any]] = []
    notes: list[str] = []

    backends: list[tuple[str, Postgres | None]] = [("sqlite", None)]
    pg = Postgres(postgres_admin_url())
    why_not = pg.reachable()
    if why_not is None:
        backends.append(("postgresql", pg))
    else:
        rows.append(row("import command, PostgreSQL", f"< {TIME_BUDGET_S:g} s", f"skipped: {why_not}", None, config))
    for backend, server in backends:
        label = "SQLite" if backend == "sqlite" else "PostgreSQL"
        # Turn about: a bare parse right before each import, so that both meet the machine in the same state (on a
        # shared machine the same parse took 0.37 s and 0.86 s an hour apart); each ratio is of one pair.
        parses: list[float] = []
        runs: list[dict[str, Any]] = []
        try:
            for _ in range(repeat):
                parses.append(bare_parse_s(events))
                runs.append(measure(folder, backend=backend, pg=server, work=work, lineage_repeat=1))
        finally:
            if server is not None:
                server.drop()
        if any(r["events"] != n for r in runs):
            raise AssertionError(f"{label}: the import command stored {[r['events'] for r in runs]} events, not {n}")
        imports = [r["import_s"] for r in runs]
        lineages = [r["lineage_s"][0] for r in runs]
        import_ratios = [i / p for i, p in zip(imports, parses, strict=True)]
        lineage_ratios = [li / p for li, p in zip(lineages, parses, strict=True)]
        imp_ratio, lin_ratio = median(import_ratios), median(lineage_ratios)
        details["backends"][backend] = {
            "bare_parse_s": parses,
            "import_s": imports,
            "lineage_s": lineages,
            "import_ratios": import_ratios,
            "lineage_ratios": lineage_ratios,
        }
        rows.append(
            row(
                f"import command / bare parse, {label}",
                f"<= {IMPORT_RATIO_BUDGET:g}x",
                f"{imp_ratio:.1f}x median of pairs ({_listed(import_ratios, 'x')}; import {median(imports):.2f} s, "
                f"parse {median(parses):.3f} s medians)",
                imp_ratio <= IMPORT_RATIO_BUDGET,
                config,
            )
        )
        rows.append(
            row(
                f"import command, {label}",
                f"< {TIME_BUDGET_S:g} s",
                f"{median(imports):.2f} s median ({_listed(imports, ' s')}), Django's start included",
                median(imports) < TIME_BUDGET_S,
                config,
            )
        )
        rows.append(
            row(
                f"lineage command / bare parse, {label}",
                f"<= {LINEAGE_RATIO_BUDGET:g}x",
                f"{lin_ratio:.1f}x median of pairs ({_listed(lineage_ratios, 'x')}; lineage {median(lineages):.2f} s)",
                lin_ratio <= LINEAGE_RATIO_BUDGET,
                config,
            )
        )
        notes.append(
            f"{label}: bare parse (json.loads of each line, {info['events_bytes'] / 2**20:.0f} MB) "
            f"{_listed(parses, ' s')}, one before each import"
        )
    return {"rows": rows, "details": details, "notes": notes}


def _listed(values: list[float], unit: str) -> str:
    return ", ".join(f"{v:.2f}" for v in values) + unit
