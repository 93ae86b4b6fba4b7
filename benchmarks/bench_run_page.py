"""Budget (DESIGN §9): the run page of a 100,000-event run in under 300 ms server time, with a query
count that does not grow (the same as a small run's).

A fresh process imports the generated 100,000-event run and the 10,000-event one into a new SQLite
database, then requests each page 30 times through Django's test client (the whole request path,
middleware to template, without a socket) and reports p50 and p95, with the queries of one request of
each page for both runs side by side.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import synth
from .common import Config, row, run_child

NAME = "run_page"
BUDGET_S = 0.300
DEFAULT_REPEAT = 30


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    large, _ = synth.bundle_of(n)
    small, _ = synth.bundle_of(max(1000, n // 10))
    data_dir = Path(tempfile.mkdtemp(prefix="data-run-page-", dir=synth.session_dir()))
    try:
        run_child(["migrate"], data_dir=data_dir, database_url=None)
        result = run_child(["run-page", str(large), str(small), str(repeat)], data_dir=data_dir, database_url=None)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    rows = []
    for name, entry in result["pages"].items():
        big, little = entry["large"], entry["small"]
        p50, p95 = _pct(big["times_s"], 0.5), _pct(big["times_s"], 0.95)
        rows.append(
            row(
                f"{name}, {result['large_events']:,} events",
                f"< {BUDGET_S * 1000:.0f} ms, queries flat",
                f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms; {big['queries']} queries "
                f"({little['queries']} at {result['small_events']:,} events; small run p50 "
                f"{_pct(little['times_s'], 0.5) * 1000:.0f} ms); {big['bytes'] // 1024} KiB",
                p95 < BUDGET_S and big["queries"] == little["queries"],
                config,
            )
        )
    return {"rows": rows, "details": {"repeat": repeat, **result}, "notes": []}
