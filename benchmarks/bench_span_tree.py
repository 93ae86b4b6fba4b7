"""Budget (issue 38, DESIGN §9): the run page of a 10,000-span OpenTelemetry trace, in the list and as a tree and
timeline (`?view=tree`, runs/span_tree.py), in under 300 ms server time with as many queries as a small trace's.

The spans are made by the OpenTelemetry SDK itself (benchmarks/bench_otlp.py `make_spans`: one `invoke_agent` root,
then chat and `execute_tool` spans under it, GenAI conventions), encoded by the exporter's own encoder into one
OTLP protobuf file per trace: a 10,000-span trace (at the default scale: events / 10) and a 100-span one. A fresh
process imports both through the import door (runs.import_formats), then requests each page (the list, the tree's
first window, one in the middle of the trace and its last) 30 times through Django's test client, as
bench_run_page does, and reports p50 and p95 with the queries of one request, the small and the large side by side.

The tree of the 1,000,000-event run is measured by bench_run_page (its "tree view" rows).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from . import synth
from .bench_otlp import make_spans
from .bench_run_page import BUDGET_S, DEFAULT_REPEAT, _pct
from .common import Config, row, run_child

NAME = "span_tree"
SMALL_SPANS = 100


def _write_trace(path: Path, n: int) -> Path:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    path.write_bytes(encode_spans(make_spans(n, n)).SerializeToString())
    return path


def run(config: Config) -> dict[str, Any]:
    spans = max(SMALL_SPANS * 2, config.events // 10)
    repeat = config.repeat or DEFAULT_REPEAT
    work = Path(tempfile.mkdtemp(prefix="span-tree-", dir=synth.session_dir()))
    try:
        small = _write_trace(work / "small.otlp.pb", SMALL_SPANS)
        large = _write_trace(work / "large.otlp.pb", spans)
        data_dir = work / "data"
        data_dir.mkdir()
        run_child(["migrate"], data_dir=data_dir, database_url=None)
        result = run_child(["span-tree", str(repeat), str(small), str(large)], data_dir=data_dir, database_url=None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    little_events = result["small_events"]
    for name, entry in result["pages"].items():
        little = entry[str(little_events)]
        for events in result["large_events"]:
            big = entry[str(events)]
            p50, p95 = _pct(big["times_s"], 0.5), _pct(big["times_s"], 0.95)
            rows.append(
                row(
                    f"{name}, a {spans:,}-span OTLP trace ({events:,} events)",
                    f"p50 < {BUDGET_S * 1000:.0f} ms, queries flat",
                    f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms; {big['queries']} queries "
                    f"({little['queries']} for {SMALL_SPANS} spans; p50 {_pct(little['times_s'], 0.5) * 1000:.0f} ms); "
                    f"{big['bytes'] // 1024} KiB",
                    p50 < BUDGET_S and big["queries"] == little["queries"],
                    config,
                )
            )
    notes = [f"imported {int(events):,} events in {secs:.1f} s (SQLite)" for events, secs in result["import_s"].items()]
    return {"rows": rows, "details": {"repeat": repeat, "spans": spans, **result}, "notes": notes}
