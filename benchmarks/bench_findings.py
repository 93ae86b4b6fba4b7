"""Budget (issue 20): a run whose every event carries a dangling reference, 1,000,000 events, imports with peak
memory under 300 MB, and the import's answer stays small.

The bundle is `benchmarks.synth.write_dangling_bundle`: every event a `tool.result` naming a call no event is, so
the run has a LIN011 finding and a dangling edge per event, the shape that used to keep every finding in memory
and return all of them in the answer (336 MB at 100,000 events, 22 MB of answer). Each measurement is the real
importer (`runs.importer.run_import_from_path`) in a fresh interpreter against a freshly migrated SQLite database
(`benchmarks._child import`, production settings), as in bench_import. The run size is ten times `--events`
(1,000,000 at the budget scale); one smaller import (a tenth) shows how memory grows with the run.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import synth
from .common import Config, row, run_child

NAME = "findings"
MEMORY_BUDGET_MB = 300.0
ANSWER_BUDGET_BYTES = 64 * 1024
SCALE = 10


def measure(folder: Path, *, work: Path) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="data-findings-", dir=work))
    try:
        run_child(["migrate"], data_dir=data_dir, database_url=None)
        return run_child(["import", str(folder)], data_dir=data_dir, database_url=None, timeout=3600)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(config: Config) -> dict[str, Any]:
    n = config.events * SCALE
    work = synth.session_dir()
    sizes = sorted({max(1000, n // 10), n})
    results: dict[int, dict[str, Any]] = {}
    for size in sizes:
        folder, info = synth.dangling_bundle_of(size)
        r = measure(folder, work=work)
        if r["events"] != size or r["findings"] != size or r["stored"].get("findings") != size:
            raise AssertionError(
                f"{size:,} events: imported {r['events']}, {r['findings']} findings, stored {r['stored']}"
            )
        r["events_bytes"] = info["events_bytes"]
        results[size] = r
    big = results[n]
    rows = [
        row(
            f"import, a dangling reference per event, peak RSS, SQLite, {n:,} events",
            f"< {MEMORY_BUDGET_MB:g} MB",
            f"{big['peak_rss_mb']:.0f} MB (import's own +{big['import_rss_mb']:.0f} MB over "
            f"{big['baseline_rss_mb']:.0f} MB; {big['seconds']:.1f} s; "
            f"events.jsonl {big['events_bytes'] / 2**20:.0f} MB)",
            big["peak_rss_mb"] < MEMORY_BUDGET_MB,
            config,
        ),
        row(
            f"import answer, {n:,} findings",
            f"< {ANSWER_BUDGET_BYTES // 1024} KB",
            f"{big['answer_bytes'] / 1024:.1f} KB ({big['answer_findings']} findings listed of {big['findings']:,})",
            big["answer_bytes"] < ANSWER_BUDGET_BYTES,
            config,
        ),
    ]
    notes = [
        "scaling (SQLite, one import each): "
        + "; ".join(
            f"{size:,} events {r['seconds']:.1f} s, peak {r['peak_rss_mb']:.0f} MB (+{r['import_rss_mb']:.0f} MB), "
            f"answer {r['answer_bytes'] / 1024:.1f} KB"
            for size, r in sorted(results.items())
        )
    ]
    return {"rows": rows, "details": {"events": n, "runs": {str(k): v for k, v in results.items()}}, "notes": notes}
