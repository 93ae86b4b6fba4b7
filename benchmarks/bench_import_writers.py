"""Budget (issue 31, point 4): on SQLite, writers never wait more than 1 s behind an import.

A 100,000-event bundle (`benchmarks.synth.bundle_of`) is imported into a freshly migrated SQLite database by the
real importer in a fresh interpreter (`benchmarks._child import`, production settings: N17Q_DEBUG=0), while another
fresh interpreter (`benchmarks._writers_child`) goes round four writes against the same database file: a bare write
(BEGIN IMMEDIATE; COMMIT: the lock wait alone), a capture through the API, a sign-in through the login view and a
review action (a reviewer rejects the recording the capture staged). Each write's wait is its time beyond the same
write's median time on the idle database (the writers' process times IDLE_ROUNDS rounds before the import starts),
for the writes that overlapped the import. The budget: every wait at most 1 s, and every write answered as it
would be on an idle database (no 503, no "database is locked").

Also measured, each in a fresh database: the import alone with its sliced commits (the default) and in one
transaction (N17Q_IMPORT_SLICES=0), alternated, and the writers' waits behind a one-transaction import, once, as
the picture before. See docs/benchmarks.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import synth
from .common import REPO, RESULT_MARK, Config, child_env, median, row, run_child

NAME = "import_writers"
WAIT_BUDGET_S = 1.0
DEFAULT_REPEAT = 3
IDLE_ROUNDS = 10
ACTIONS = ("lock", "capture", "sign-in", "review")
EXPECTED = {"lock": "ok", "capture": "201", "sign-in": "302", "review": "ok"}
WHAT = {
    "lock": "a bare write (BEGIN IMMEDIATE; COMMIT)",
    "capture": "a capture (POST /api/v1/captures/)",
    "sign-in": "a sign-in (POST /login/)",
    "review": "a review action (reject)",
}
SLICED = {"N17Q_IMPORT_SLICES": "1"}
ONE_TRANSACTION = {"N17Q_IMPORT_SLICES": "0"}


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] if ordered else float("nan")


def _fresh(work: Path, label: str) -> Path:
    data_dir = Path(tempfile.mkdtemp(prefix=f"data-writers-{label}-", dir=work))
    run_child(["migrate"], data_dir=data_dir, database_url=None)
    return data_dir


def import_alone(folder: Path, *, extra: dict[str, str], work: Path) -> dict[str, Any]:
    data_dir = _fresh(work, "alone")
    try:
        return run_child(["import", str(folder)], data_dir=data_dir, database_url=None, extra_env=extra)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def with_writers(folder: Path, *, extra: dict[str, str], work: Path) -> dict[str, Any]:
    """One import while the writers' process goes round; returns the import's result, the writers' rounds, and per
    action the waits of the writes that overlapped the import."""
    data_dir = _fresh(work, "busy")
    stop = data_dir / "stop-writers"
    errors = open(data_dir / "writers.stderr", "w+")  # noqa: SIM115 (closed below; a pipe could fill and stall it)
    writers = subprocess.Popen(
        [sys.executable, "-m", "benchmarks._writers_child", str(stop), str(IDLE_ROUNDS)],
        cwd=REPO,
        env=child_env(data_dir, None, extra=extra),
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    try:
        assert writers.stdout is not None
        line = writers.stdout.readline()
        if line.strip() != "ready":
            errors.seek(0)
            tail = "\n".join(errors.read().strip().splitlines()[-15:])
            raise RuntimeError(f"the writers' process did not start (exit {writers.poll()}):\n{tail}")
        imported = run_child(["import", str(folder)], data_dir=data_dir, database_url=None, extra_env=extra)
        time.sleep(0.5)  # a round that began as the import ended, finished
        stop.touch()
        out, _ = writers.communicate(timeout=600)
    finally:
        if writers.poll() is None:
            writers.kill()
            writers.wait()
        errors.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    rounds = next(
        (json.loads(line[len(RESULT_MARK) :]) for line in out.splitlines() if line.startswith(RESULT_MARK)), None
    )
    if rounds is None:
        raise RuntimeError(f"the writers' process printed no result (exit {writers.returncode})")
    start, end = imported["started_at"], imported["ended_at"]
    actions: dict[str, Any] = {}
    for name in ACTIONS:
        idle = median(rounds["idle"][name])
        during = [
            (at, seconds, answer) for at, seconds, answer in rounds["busy"][name] if at < end and at + seconds > start
        ]
        waits = [max(0.0, seconds - idle) for _at, seconds, _answer in during]
        refused = [answer for _at, _seconds, answer in during if answer != EXPECTED[name]]
        actions[name] = {
            "idle_median_s": idle,
            "idle_answers": rounds["idle_answers"][name],
            "writes": len(during),
            "waits_s": waits,
            "median_s": median(waits) if waits else float("nan"),
            "p95_s": _pct(waits, 0.95),
            "max_s": max(waits) if waits else float("nan"),
            "refused": refused,
        }
    return {"import": imported, "actions": actions, "idle_rounds": IDLE_ROUNDS}


def _pooled(runs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    waits = [w for r in runs for w in r["actions"][name]["waits_s"]]
    refused = [a for r in runs for a in r["actions"][name]["refused"]]
    return {
        "writes": len(waits),
        "median_s": median(waits) if waits else float("nan"),
        "p95_s": _pct(waits, 0.95),
        "max_s": max(waits) if waits else float("nan"),
        "refused": refused,
        "idle_median_s": median([r["actions"][name]["idle_median_s"] for r in runs]),
    }


def _describe(s: dict[str, Any]) -> str:
    refused = f"; {len(s['refused'])} answered otherwise: {sorted(set(s['refused']))[:3]}" if s["refused"] else ""
    return (
        f"wait median {s['median_s']:.2f} s, p95 {s['p95_s']:.2f} s, max {s['max_s']:.2f} s over {s['writes']} "
        f"writes (idle {s['idle_median_s'] * 1000:.0f} ms each){refused}"
    )


def run(config: Config) -> dict[str, Any]:
    n = config.events
    repeat = config.repeat or DEFAULT_REPEAT
    folder, info = synth.bundle_of(n)
    work = synth.session_dir()
    rows: list[dict[str, Any]] = []
    notes: list[str] = []

    alone: dict[str, list[dict[str, Any]]] = {"sliced": [], "one transaction": []}
    for _ in range(repeat):  # alternated, so that a machine's load drifting over the run falls on both
        alone["sliced"].append(import_alone(folder, extra=SLICED, work=work))
        alone["one transaction"].append(import_alone(folder, extra=ONE_TRANSACTION, work=work))
    busy = [with_writers(folder, extra=SLICED, work=work) for _ in range(repeat)]
    before = with_writers(folder, extra=ONE_TRANSACTION, work=work)
    for r in [*alone["sliced"], *alone["one transaction"], *(b["import"] for b in busy), before["import"]]:
        if r["events"] != n or r["stored"]["events"] != n:
            raise AssertionError(f"imported {r['events']} events, stored {r['stored']['events']}")

    pooled = {name: _pooled(busy, name) for name in ACTIONS}
    for name in ACTIONS:
        s = pooled[name]
        ok = s["writes"] > 0 and s["max_s"] <= WAIT_BUDGET_S and not s["refused"]
        rows.append(
            row(
                f"{WHAT[name]} during a {n:,}-event import, SQLite",
                f"≤ {WAIT_BUDGET_S:g} s wait",
                _describe(s),
                ok,
                config,
            )
        )
    for mode, runs in alone.items():
        seconds = [r["seconds"] for r in runs]
        rows.append(
            row(
                f"the import alone, {mode}, SQLite",
                "(compared)",
                f"{median(seconds):.2f} s median ({', '.join(f'{v:.2f}' for v in seconds)} s); peak "
                f"{max(r['peak_rss_mb'] for r in runs):.0f} MB",
                None,
                config,
            )
        )
    busy_seconds = [b["import"]["seconds"] for b in busy]
    rows.append(
        row(
            "the import with the writers going round, sliced, SQLite",
            "(compared)",
            f"{median(busy_seconds):.2f} s median ({', '.join(f'{v:.2f}' for v in busy_seconds)} s)",
            None,
            config,
        )
    )
    for name in ACTIONS:
        s = _pooled([before], name)
        rows.append(
            row(f"{WHAT[name]} during a one-transaction import (before)", "(compared)", _describe(s), None, config)
        )
    notes.append(
        f"the one-transaction import with the writers going round took {before['import']['seconds']:.2f} s; "
        "its writers' waits are the picture before issue 31 (the busy timeout is 20 s: past it, a 503)"
    )
    details = {
        "events": n,
        "repeat": repeat,
        "bundle": info,
        "idle_rounds": IDLE_ROUNDS,
        "alone": alone,
        "with_writers": busy,
        "with_writers_pooled": pooled,
        "before_one_transaction": before,
    }
    return {"rows": rows, "details": details, "notes": notes}
