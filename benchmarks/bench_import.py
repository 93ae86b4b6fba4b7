"""Budget (DESIGN §9): bundle import, 100,000 events in under 5 s, peak memory under 300 MB (streamed).

Each measurement is the real importer (`runs.importer.run_import_from_path`, a folder bundle) in a fresh
interpreter against a freshly migrated, empty database: SQLite (the embedded default, a database file in a
temporary N17Q_DATA_DIR) and PostgreSQL when a server answers (a scratch database `n17q_bench`, created
for each measurement and dropped at the end). The child runs with production settings (N17Q_DEBUG=0); one
extra SQLite import with N17Q_DEBUG=1 is reported as a note. See docs/benchmarks.md.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from . import synth
from .common import Config, median, row, run_child

NAME = "import"
TIME_BUDGET_S = 5.0
MEMORY_BUDGET_MB = 300.0
DEFAULT_REPEAT = 3
SCRATCH_DB = "n17q_bench"
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/test"


def postgres_admin_url() -> str:
    """The server to use: N17Q_BENCH_PG_URL, else a PostgreSQL DATABASE_URL, else the Makefile's PG_URL."""
    if os.environ.get("N17Q_BENCH_PG_URL"):
        return os.environ["N17Q_BENCH_PG_URL"]
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        return url
    return DEFAULT_PG_URL


def scratch_url(admin_url: str) -> str:
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + SCRATCH_DB, parts.query, parts.fragment))


class Postgres:
    """Create and drop the scratch database through an administrative connection."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.url = scratch_url(admin_url)

    def _execute(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql)

    def reachable(self) -> str | None:
        """None when the server answers, else why not."""
        try:
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=3) as conn:
                conn.execute("select 1")
        except Exception as exc:  # any failure to connect means: skip, and say why
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return None

    def fresh(self) -> None:
        self.drop()
        self._execute(f'CREATE DATABASE "{SCRATCH_DB}"')

    def drop(self) -> None:
        self._execute(f'DROP DATABASE IF EXISTS "{SCRATCH_DB}" WITH (FORCE)')


@contextmanager
def fresh_database(backend: str, pg: Postgres | None, work: Path) -> Iterator[tuple[Path, str | None]]:
    """An empty, migrated database (SQLite in a new data folder, or the scratch PostgreSQL database made afresh):
    its data folder and its URL (None: SQLite), the folder removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"data-{backend}-", dir=work))
    try:
        url = None
        if backend == "postgresql":
            assert pg is not None
            pg.fresh()
            url = pg.url
        run_child(["migrate"], data_dir=data_dir, database_url=url)
        yield data_dir, url
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def measure(folder: Path, *, backend: str, pg: Postgres | None, work: Path, debug: bool = False) -> dict[str, Any]:
    """One import into an empty, migrated database, in a fresh process (production settings unless `debug`)."""
    with fresh_database(backend, pg, work) as (data_dir, url):
        result = run_child(["import", str(folder)], data_dir=data_dir, database_url=url, debug=debug)
        result["debug"] = debug
        sqlite_file = data_dir / "n17q.sqlite3"
        if sqlite_file.exists():
            result["database_file_mb"] = sum(p.stat().st_size for p in data_dir.glob("n17q.sqlite3*")) / (1024 * 1024)
        return result


def _summary(runs: list[dict[str, Any]], n: int) -> dict[str, Any]:
    seconds = [r["seconds"] for r in runs]
    med = median(seconds)
    return {
        "median_s": med,
        "runs_s": seconds,
        "events_per_s": n / med,
        "cpu_s": [r["cpu_seconds"] for r in runs],
        "peak_rss_mb": [r["peak_rss_mb"] for r in runs],
        "baseline_rss_mb": [r["baseline_rss_mb"] for r in runs],
        "import_rss_mb": [r["import_rss_mb"] for r in runs],
        "max_peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "stored": runs[-1]["stored"],
        "database": runs[-1]["database"],
        "runs": runs,
    }


def _fmt_runs(values: list[float], unit: str = "s") -> str:
    return ", ".join(f"{v:.2f}" for v in values) + f" {unit}"


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    folder, info = synth.bundle_of(n)
    work = synth.session_dir()
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {"events": n, "repeat": repeat, "bundle": info, "backends": {}}

    backends: list[tuple[str, Postgres | None]] = [("sqlite", None)]
    pg = Postgres(postgres_admin_url())
    why_not = pg.reachable()
    if why_not is None:
        backends.append(("postgresql", pg))
    else:
        details["backends"]["postgresql"] = {"skipped": why_not, "server": urlsplit(pg.admin_url).netloc}
        rows.append(row("bundle import, PostgreSQL", f"< {TIME_BUDGET_S:g} s", f"skipped: {why_not}", None, config))

    for backend, server in backends:
        label = "SQLite" if backend == "sqlite" else "PostgreSQL"
        try:
            runs = [measure(folder, backend=backend, pg=server, work=work) for _ in range(repeat)]
        finally:
            if server is not None:
                server.drop()
        for r in runs:
            if r["events"] != n or r["stored"]["events"] != n:
                raise AssertionError(f"{label}: imported {r['events']} events, stored {r['stored']['events']}")
        s = _summary(runs, n)
        details["backends"][backend] = s
        rows.append(
            row(
                f"bundle import, {label}",
                f"< {TIME_BUDGET_S:g} s",
                f"{s['median_s']:.2f} s median ({_fmt_runs(s['runs_s'])}; {s['events_per_s']:,.0f} events/s)",
                s["median_s"] < TIME_BUDGET_S,
                config,
            )
        )
        rows.append(
            row(
                f"bundle import peak RSS, {label}",
                f"< {MEMORY_BUDGET_MB:g} MB",
                f"{s['max_peak_rss_mb']:.0f} MB max ({_fmt_runs(s['peak_rss_mb'], 'MB')}; import's own "
                f"+{median(s['import_rss_mb']):.0f} MB over a {median(s['baseline_rss_mb']):.0f} MB baseline; "
                f"events.jsonl is {info['events_bytes'] / 2**20:.0f} MB)",
                s["max_peak_rss_mb"] < MEMORY_BUDGET_MB,
                config,
            )
        )

    # How time and memory grow with the run (SQLite, one import each): streamed means the memory the
    # import adds grows far slower than the file, and time grows in proportion to the events.
    scaling = []
    for size in sorted({max(1000, n // 10), max(1000, n // 2)}):
        if size == n:
            continue
        sub_folder, sub_info = synth.bundle_of(size)
        r = measure(sub_folder, backend="sqlite", pg=None, work=work)
        scaling.append(
            {
                "events": size,
                "seconds": r["seconds"],
                "peak_rss_mb": r["peak_rss_mb"],
                "import_rss_mb": r["import_rss_mb"],
                "events_bytes": sub_info["events_bytes"],
            }
        )
    sqlite = details["backends"]["sqlite"]
    scaling.append(
        {
            "events": n,
            "seconds": sqlite["median_s"],
            "peak_rss_mb": median(sqlite["peak_rss_mb"]),
            "import_rss_mb": median(sqlite["import_rss_mb"]),
            "events_bytes": info["events_bytes"],
        }
    )
    details["scaling_sqlite"] = scaling
    notes = [
        "scaling (SQLite, one import each): "
        + "; ".join(
            f"{s['events']:,} events {s['seconds']:.2f} s, peak {s['peak_rss_mb']:.0f} MB "
            f"(+{s['import_rss_mb']:.0f} MB), file {s['events_bytes'] / 2**20:.0f} MB"
            for s in scaling
        )
    ]

    # The same import under the development default (N17Q_DEBUG=1, what `make demo` runs): not a budget
    # figure, but it shows what Django's debug cursor adds.
    dbg = measure(folder, backend="sqlite", pg=None, work=work, debug=True)
    details["sqlite_debug_on"] = dbg
    notes.append(
        f"with N17Q_DEBUG=1 (development default), SQLite, one import: {dbg['seconds']:.2f} s, peak "
        f"{dbg['peak_rss_mb']:.0f} MB (+{dbg['import_rss_mb']:.0f} MB) (Django's debug cursor on)"
    )
    return {"rows": rows, "details": details, "notes": notes}
