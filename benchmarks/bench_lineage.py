"""Budget (DESIGN §9): lineage check, 100,000 events in under 2 s, linear in events.

In process: the events of the generated bundle are parsed and validated from its file first (not timed),
then `LineageGraph.add` for every event plus `findings()` is timed, five times at 10,000, 50,000 and
100,000 events. Linearity is the ratio time(100k) / time(10k): 10 for a linear checker, 100 for a
quadratic one; the budget counts it linear up to 15 (per-event cost at most 1.5x that at 10k).

Second figure: `runs.selectors.run_lineage_check` re-checking the 100,000-event run from the database
(SQLite, imported first in a fresh process; the query, the JSON decoding and the checker are all timed).
"""

from __future__ import annotations

import gc
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from n17q_engine.lineage import LineageGraph

from . import synth
from .common import Config, median, row, run_child

NAME = "lineage"
TIME_BUDGET_S = 2.0
# Linear: the time ratio may exceed the size ratio by at most this factor (per-event cost at most 1.5x).
LINEAR_SLACK = 1.5
DEFAULT_REPEAT = 5


def time_check(run_meta: dict[str, Any], events: list[dict[str, Any]], repeat: int) -> dict[str, Any]:
    totals, adds, finds = [], [], []
    findings = -1
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        graph = LineageGraph(run_meta)
        for event in events:
            graph.add(event)
        added = time.perf_counter()
        found = graph.findings()
        done = time.perf_counter()
        totals.append(done - started)
        adds.append(added - started)
        finds.append(done - added)
        findings = len(found)
        del graph, found
    return {
        "events": len(events),
        "median_s": median(totals),
        "runs_s": totals,
        "add_s": adds,
        "findings_s": finds,
        "findings": findings,
    }


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    sizes = sorted({max(1000, n // 10), max(1000, n // 2), n})
    by_size: dict[int, dict[str, Any]] = {}
    for size in sizes:
        folder, info = synth.bundle_of(size)
        run_meta, events = synth.read_events(folder)
        result = time_check(run_meta, events, repeat)
        result["bundle_sha256"] = info["events_sha256"]
        by_size[size] = result
        del events
        gc.collect()

    small, big = by_size[sizes[0]], by_size[n]
    ratio = big["median_s"] / small["median_s"]
    scale = n / sizes[0]
    slope = math.log(ratio) / math.log(scale) if scale > 1 else float("nan")
    rows = [
        row(
            f"lineage check, in process, {n:,} events",
            f"< {TIME_BUDGET_S:g} s",
            f"{big['median_s']:.3f} s median ({', '.join(f'{t:.3f}' for t in big['runs_s'])} s; "
            f"{n / big['median_s']:,.0f} events/s; {big['findings']} findings)",
            big["median_s"] < TIME_BUDGET_S,
            config,
        ),
        row(
            f"lineage check linear in events ({sizes[0]:,} -> {n:,})",
            f"ratio <= {LINEAR_SLACK * scale:g} (linear: {scale:g})",
            f"ratio {ratio:.2f} (log-log slope {slope:.2f}; "
            + ", ".join(f"{s:,}: {by_size[s]['median_s']:.3f} s" for s in sizes)
            + ")",
            ratio <= LINEAR_SLACK * scale,
            config,
        ),
    ]

    # The console's re-check of a stored run: stream the events from the database into the checker.
    folder, _info = synth.bundle_of(n)
    data_dir = Path(tempfile.mkdtemp(prefix="data-lineage-", dir=synth.session_dir()))
    try:
        run_child(["migrate"], data_dir=data_dir, database_url=None)
        db = run_child(["lineage-db", str(folder), str(repeat)], data_dir=data_dir, database_url=None)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    db_median = median(db["runs"])
    rows.append(
        row(
            f"run_lineage_check from the database, SQLite, {n:,} events",
            f"< {TIME_BUDGET_S:g} s",
            f"{db_median:.3f} s median ({', '.join(f'{t:.3f}' for t in db['runs'])} s; {db['findings']} findings)",
            db_median < TIME_BUDGET_S,
            config,
        )
    )
    details = {
        "repeat": repeat,
        "in_process": {str(s): by_size[s] for s in sizes},
        "ratio": ratio,
        "log_log_slope": slope,
        "from_database_sqlite": {"median_s": db_median, **db},
    }
    notes = [
        "in process, add / findings split (median s): "
        + "; ".join(
            f"{s:,}: {median(by_size[s]['add_s']):.3f} / {median(by_size[s]['findings_s']):.3f}" for s in sizes
        ),
    ]
    return {"rows": rows, "details": details, "notes": notes}
