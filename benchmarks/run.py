"""Run the benchmarks: `python -m benchmarks.run [NAME ...] [--strict] [--events N] [--repeat K]`.

Every module `benchmarks/bench_<name>.py` is a benchmark; with no NAME all of them run, in name order.
A module defines `run(config: benchmarks.common.Config) -> dict` returning
`{"rows": [benchmarks.common.row(...), ...], "details": {...}, "notes": [str, ...]}`.

Each benchmark's result is written to `bench-results/<name>.json` (with the machine it ran on) and the
budgets are printed as one table. The exit status is 1 when a benchmark could not run; with --strict, also
when a budget was missed. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time
import traceback
from datetime import UTC, datetime
from typing import Any

import benchmarks

from . import synth
from .common import BUDGET_EVENTS, REPO, Config, machine, machine_line

RESULTS_DIR = REPO / "bench-results"


def available() -> list[str]:
    return sorted(
        m.name.removeprefix("bench_") for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")
    )


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("benchmark", "what", "budget", "measured", "result")
    cells = [header] + [
        (
            r["benchmark"],
            r["what"],
            r["budget"],
            r["measured"],
            "PASS" if r["ok"] is True else "FAIL" if r["ok"] is False else "-",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    # The "measured" column can be long; keep the table readable by letting only it run on.
    lines = []
    for i, c in enumerate(cells):
        lines.append(
            "  ".join(
                c[j].ljust(widths[j]) if j != 3 else c[j].ljust(min(widths[j], 120)) for j in range(len(header))
            ).rstrip()
        )
        if i == 0:
            lines.append("  ".join("-" * (w if j != 3 else min(w, 120)) for j, w in enumerate(widths)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = available()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run (default: all of {names})")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a budget is missed")
    parser.add_argument(
        "--events",
        type=int,
        default=BUDGET_EVENTS,
        help=f"run size (default {BUDGET_EVENTS:,}, the budgets' scale; other sizes are not judged)",
    )
    parser.add_argument("--repeat", type=int, default=None, help="measurements per figure (default: per benchmark)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in names]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(names)}")
    selected = args.names or names
    config = Config(events=args.events, repeat=args.repeat)

    RESULTS_DIR.mkdir(exist_ok=True)
    host = machine(synth.session_dir())
    print(machine_line(host), flush=True)
    all_rows: list[dict[str, Any]] = []
    notes: list[str] = []
    crashed = False
    for name in selected:
        print(f"running {name} ...", flush=True)
        started = time.perf_counter()
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            module = importlib.import_module(f"benchmarks.bench_{name}")
            result = module.run(config)
        except Exception:
            crashed = True
            error = traceback.format_exc()
            print(error, file=sys.stderr)
            result = {
                "rows": [
                    {"what": "(did not run)", "budget": "", "measured": error.strip().splitlines()[-1], "ok": False}
                ],
                "details": {"error": error},
                "notes": [],
            }
        duration = time.perf_counter() - started
        for r in result["rows"]:
            all_rows.append({"benchmark": name, **r})
        notes.extend(f"{name}: {note}" for note in result.get("notes", []))
        record = {
            "benchmark": name,
            "started_at": started_at,
            "duration_s": round(duration, 2),
            "config": {"events": config.events, "repeat": config.repeat},
            "machine": {**host, "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
            "budgets": result["rows"],
            "notes": result.get("notes", []),
            "details": result["details"],
        }
        out = RESULTS_DIR / f"{name}.json"
        out.write_text(json.dumps(record, indent=2, default=str) + "\n")
        print(f"  {name}: {duration:.1f} s, wrote {out.relative_to(REPO)}", flush=True)

    print()
    print(_table(all_rows))
    for note in notes:
        print(f"  {note}")
    print(machine_line(host))
    missed = any(r["ok"] is False for r in all_rows)
    if crashed:
        return 1
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
