"""Budget (issue 38 §3): the cross-run search over 100,000 runs in under 500 ms server time, with a query count that
does not grow (the same as over a hundred runs).

A fresh process imports a few real runs (the demo's stories, with their events and findings), then synthesizes the
rest of the runs in bulk (a Run row and its search summary each: tools, models, finding codes, tokens, cost, spread
over a year of creation times), and requests the run list with each filter and a text search, the API's filtered
list, the next page by cursor, the event search across runs and the compare page, `repeat` times each through
Django's test client (the whole request path), first over a hundred runs (for the query counts) and then over all of
them. `--events N` sets the number of runs (default 100,000, the budget's scale).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import synth
from .common import Config, row, run_child

NAME = "run_search"
BUDGET_S = 0.500
DEFAULT_REPEAT = 20


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


def run(config: Config) -> dict[str, Any]:
    runs = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    data_dir = Path(tempfile.mkdtemp(prefix="data-run-search-", dir=synth.session_dir()))
    try:
        run_child(["migrate"], data_dir=data_dir, database_url=None)
        result = run_child(["run-search", str(runs), str(repeat)], data_dir=data_dir, database_url=None, timeout=3600)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    rows = []
    for name, entry in result["pages"].items():
        p50, p95 = _pct(entry["times_s"], 0.5), _pct(entry["times_s"], 0.95)
        rows.append(
            row(
                f"{name}, {result['runs']:,} runs",
                f"p50 < {BUDGET_S * 1000:.0f} ms, queries flat",
                f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms; {entry['queries']} queries "
                f"({entry['queries_small']} over {result['small_runs']} runs); {entry['listed']} listed",
                p50 < BUDGET_S and entry["queries"] == entry["queries_small"],
                config,
            )
        )
    notes = [f"synthesized {result['runs']:,} runs in {result['synth_s']:.1f} s (SQLite)"]
    return {"rows": rows, "details": {"repeat": repeat, **result}, "notes": notes}
