"""The OTLP receiver end to end (issue 31): spans in from the real exporter, runs out of a real Celery worker.

gunicorn (docker/gunicorn.conf.py, two sync workers, production settings, SQLite) and one `celery worker`
(prefork, two processes), once on Redis (N17Q_BENCH_REDIS_URL, default redis://127.0.0.1:6379/15, a queue of its
own) and once on the embedded default, the file broker (no REDIS_URL: `make demo`'s set-up, polled once a second);
and the file door (`manage.py import_run` of the same spans as one OTLP file, bench_otlp's measurement) in the same
run, so the receiver's end-to-end time is reported beside the file door's on the same spans.
The real `OTLPSpanExporter` sends 100,000 SDK spans in 1,000 traces of 100 (batches of 512, one after the other);
then the benchmark waits until every trace is a run. Measured:

1. **Exactly once**: how many traces the finalisation tasks carried, from each task's answer in the worker's log
   (its traces by state): every trace must be in exactly one task (issue 31: 28% duplicates at 1,000,000 spans
   before). Also the number of tasks (batches of up to 50) and the time from the last span sent to the last run,
   over the quiet period (N17Q_BENCH_OTLP_QUIET_S, default 30, the production default).
2. **Queryable**: one more trace sent to the idle receiver: the seconds from its last span's arrival to its run
   (DESIGN §9: within its quiet window + 2 s), as the database records them (finalized_at - last_received_at).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from .bench_otlp import BATCH, make_spans, receiver_site
from .common import REPO, Config, row

NAME = "otlp_live"
SPANS = 100_000
SPANS_PER_TRACE = 100
WEB_PORT = 18783
QUERYABLE_SLACK_S = 2.0
_DONE = re.compile(r"Task otlp_receiver\.finalize_traces\[[^\]]+\] succeeded in [0-9.e-]+s: (\{.*\})\s*$")


def _wait(what: str, ready: Any, deadline_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {deadline_s:.0f} s" + (": " + log.read_text()[-2000:] if log else ""))
        time.sleep(0.2)


def _http_up() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{WEB_PORT}/health/?check=database", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _db(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{data_dir / 'n17q.sqlite3'}?mode=ro", uri=True, timeout=30)


def _states(data_dir: Path) -> Counter[str]:
    with contextlib.closing(_db(data_dir)) as db:
        return Counter(dict(db.execute("SELECT state, count(*) FROM otlp_receiver_receivedtrace GROUP BY state")))


def _latencies(data_dir: Path, trace_ids: list[str] | None = None) -> list[float]:
    """Seconds from each finalized trace's last span to its run, as the database recorded them."""
    sql = "SELECT last_received_at, finalized_at, trace_id FROM otlp_receiver_receivedtrace WHERE state = 'finalized'"
    with contextlib.closing(_db(data_dir)) as db:
        rows = db.execute(sql).fetchall()
    return [
        (datetime.fromisoformat(done) - datetime.fromisoformat(last)).total_seconds()
        for last, done, trace_id in rows
        if trace_ids is None or trace_id in trace_ids
    ]


def _finalize_rate(data_dir: Path) -> float | None:
    """Runs made per second, from the first run to the last."""
    sql = "SELECT min(finalized_at), max(finalized_at), count(*) FROM otlp_receiver_receivedtrace"
    with contextlib.closing(_db(data_dir)) as db:
        first, last, n = db.execute(sql + " WHERE state = 'finalized'").fetchone()
    if not first or n < 2:
        return None
    seconds = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    return (n - 1) / seconds if seconds > 0 else None


def _task_answer(line: str) -> dict[str, list[int]] | None:
    """A finalize_traces task's answer from its worker's log line: JSON (production logging) or Celery's text."""
    if line.startswith("{"):
        with contextlib.suppress(ValueError):
            data = json.loads(line).get("data") or {}
            if data.get("name") == "otlp_receiver.finalize_traces" and "return_value" in data:
                return ast.literal_eval(data["return_value"])
        return None
    m = _DONE.search(line)
    return ast.literal_eval(m.group(1)) if m else None


def _traces_in_tasks(log: Path) -> tuple[int, Counter[int]]:
    tasks, sent = 0, Counter[int]()
    for line in log.read_text(errors="replace").splitlines():
        answer = _task_answer(line)
        if answer is not None:
            tasks += 1
            for pks in answer.values():
                sent.update(pks)
    return tasks, sent


def _disk_bytes(data_dir: Path) -> int:
    """What the receiver left on disk for these spans: the database (and its WAL) and the blob store, as the file
    system holds them (the figure set beside Phoenix's working directory, measured the same way)."""
    return sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file() and "broker" not in p.parts)


def _disk(data_dir: Path) -> dict[str, Any]:
    """`_disk_bytes` taken apart: the database file(s), the pages SQLite has in use and free (a removed chunk's pages
    are free until later writes reuse them; the file does not shrink without a VACUUM: docs/benchmarks.md), the
    largest tables, and the blob store."""
    from .otlp_disk import blob_disk, sqlite_disk

    try:
        database: dict[str, Any] | None = sqlite_disk(data_dir / "n17q.sqlite3")
    except sqlite3.Error as exc:  # left locked or half-written by a process that did not stop cleanly
        database = {"error": str(exc)}
    if database is not None and "tables" in database:
        database["tables"] = dict(list(database["tables"].items())[:8])
    return {"database": database, "blob_store": blob_disk(data_dir / "blobs")}


def _export(exporter: Any, spans: list[Any]) -> int:
    from opentelemetry.sdk.trace.export import SpanExportResult

    failures = 0
    for i in range(0, len(spans), BATCH):
        if exporter.export(spans[i : i + BATCH]) is not SpanExportResult.SUCCESS:
            failures += 1
    return failures


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def _queued(broker: str | None, queue: str, data_dir: Path) -> int:
    """Messages still waiting in the broker for the benchmark's queue."""
    if broker is None:  # kombu's filesystem transport: one file per message, named after its queue
        folder = data_dir / "broker" / "queue"
        return sum(1 for _ in folder.glob(f"*.{queue}.msg")) if folder.is_dir() else 0
    import redis

    return int(redis.Redis.from_url(broker).llen(queue))


def _live(spans: list[Any], lone: list[Any], work: Path, quiet: int, broker: str | None) -> dict[str, Any]:
    """One end-to-end measurement; `broker` None is the embedded file broker."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    queue = f"n17q-bench-otlp-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix=f"live-{'file' if broker is None else 'redis'}-", dir=work))
    data_dir = work / "data"
    web_log, worker_log = work / "gunicorn.log", work / "worker.log"
    bin_dir = Path(sys.executable).parent
    settings = {"N17Q_OTLP_QUIET_SECONDS": str(quiet), "N17Q_OTLP_QUEUE": queue}
    if broker is not None:
        settings["REDIS_URL"] = broker
    env, token, web = receiver_site(data_dir, work, WEB_PORT, web_log, **settings)
    with open(worker_log, "wb") as out:
        worker = subprocess.Popen(
            [
                str(bin_dir / "celery"),
                *("-A", "n17q_site", "worker", "--pool=prefork", "--concurrency=2", "--loglevel=INFO"),
                *("-Q", queue, "-n", f"bench-{queue}@{socket.gethostname()}", "--without-gossip", "--without-mingle"),
            ],
            cwd=REPO,
            env={**env, "N17Q_LOG_LEVEL": "INFO"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait("gunicorn did not start", _http_up, 60, web_log)
        _wait("the worker was not ready", lambda: b"ready." in worker_log.read_bytes(), 120, worker_log)
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{WEB_PORT}/v1/traces", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        traces = len({s.context.trace_id for s in spans})
        started = time.perf_counter()
        failures = _export(exporter, spans)
        exported = time.perf_counter()
        _wait(
            "not every trace became a run",
            lambda: _states(data_dir).get("finalized", 0) + _states(data_dir).get("refused", 0) >= traces,
            quiet + 1800,
            worker_log,
        )
        all_runs = time.perf_counter()
        bulk_latencies = sorted(_latencies(data_dir))
        bulk_rate = _finalize_rate(data_dir)
        # One more trace, to an idle receiver: how soon after its last span is it a run?
        lone_id = format(lone[0].context.trace_id, "032x")
        failures += _export(exporter, lone)
        _wait("the lone trace did not become a run", lambda: bool(_latencies(data_dir, [lone_id])), quiet + 120)
        (lone_latency,) = _latencies(data_dir, [lone_id])
        exporter.shutdown()

        # Anything still queued (a duplicate would be) runs before the count.
        def drained() -> bool:
            text = worker_log.read_text(errors="replace")
            return not _queued(broker, queue, data_dir) and text.count("] received") == text.count("] succeeded")

        _wait("the queue did not drain", drained, 600, worker_log)
        tasks, sent = _traces_in_tasks(worker_log)
        if broker is not None:
            import redis

            redis.Redis.from_url(broker).delete(queue)
    finally:
        _stop(worker)
        _stop(web)
    states = _states(data_dir)
    return {
        "broker": "file" if broker is None else "redis",
        "disk_bytes": _disk_bytes(data_dir),
        "disk": _disk(data_dir),
        "spans": len(spans),
        "traces": traces,
        "failed_batches": failures,
        "export_seconds": exported - started,
        "last_span_to_all_runs_s": all_runs - exported,
        "quiet_s": quiet,
        "states": dict(states),
        "tasks": tasks,
        "traces_in_tasks": sum(sent.values()),
        "traces_sent_more_than_once": sum(1 for n in sent.values() if n > 1),
        "distinct_traces_sent": len(sent),
        "bulk_latency_s": {
            "min": bulk_latencies[0],
            "median": bulk_latencies[len(bulk_latencies) // 2],
            "max": bulk_latencies[-1],
        },
        "finalize_runs_per_s": bulk_rate,
        "lone_trace_latency_s": lone_latency,
    }


def _in_use(live: dict[str, Any]) -> str:
    """The database's free pages, when it has any worth saying: the file holds them, its rows do not."""
    database = (live.get("disk") or {}).get("database") or {}
    if not database.get("free_pages"):
        return ""
    return f" ({database['free_pages'] * database['page_size']:,} B of it free database pages)"


def _live_rows(live: dict[str, Any], n: int, quiet: int, config: Config) -> list[dict[str, Any]]:
    traces = live["traces"] + 1  # the lone one too
    once = live["traces_in_tasks"] == live["distinct_traces_sent"] == traces and live["failed_batches"] == 0
    broker = "Redis" if live["broker"] == "redis" else "the file broker"
    return [
        row(
            f"OTLP receiver to runs on {broker}, real exporter and worker ({n:,} spans in {live['traces']:,} traces)",
            "finalize tasks carry each trace once",
            f"{live['traces_in_tasks']:,} traces in {live['tasks']:,} tasks for {traces:,} traces "
            f"({live['traces_sent_more_than_once']} sent twice); all runs {live['last_span_to_all_runs_s']:.1f} s "
            f"after the last span (quiet {quiet} s); last span to run {live['bulk_latency_s']['min']:.1f}-"
            f"{live['bulk_latency_s']['max']:.1f} s; {live['finalize_runs_per_s'] or 0:.1f} runs/s; "
            f"{live['disk_bytes'] / max(1, live['spans'] + 100):,.0f} bytes on disk per span{_in_use(live)}",
            once,
            config,
        ),
        row(
            f"OTLP receiver on {broker}, one trace to an idle worker: last span to run",
            f"<= quiet + {QUERYABLE_SLACK_S:g} s ({quiet + QUERYABLE_SLACK_S:g} s)",
            f"{live['lone_trace_latency_s']:.2f} s",
            live["lone_trace_latency_s"] <= quiet + QUERYABLE_SLACK_S,
            config,
        ),
    ]


def run(config: Config) -> dict[str, Any]:
    from .bench_otlp import _file_import

    n = SPANS if config.at_budget_scale else max(1000, config.events)
    quiet = int(os.environ.get("N17Q_BENCH_OTLP_QUIET_S", "30"))
    redis_url = os.environ.get("N17Q_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
    work = Path(tempfile.mkdtemp(prefix="n17q-bench-otlp-live-"))
    try:
        spans = make_spans(n, SPANS_PER_TRACE)
        lone = make_spans(SPANS_PER_TRACE, SPANS_PER_TRACE)
        lives = [_live(spans, lone, work, quiet, broker) for broker in (redis_url, None)]
        door = _file_import(spans, work, 1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [r for live in lives for r in _live_rows(live, n, quiet, config)]
    door_s = float(door["runs"][0]["seconds"])
    for live in lives:
        # End to end, the receiver's time past the quiet period (the wait a trace must have) against the file door's
        # whole import of the same spans: issue 31 asks for at most 1.5x.
        worked = live["export_seconds"] + max(0.0, live["last_span_to_all_runs_s"] - quiet)
        ratio = worked / door_s if door_s else float("inf")
        rows.append(
            row(
                f"OTLP receiver on {'Redis' if live['broker'] == 'redis' else 'the file broker'} against the file "
                f"door, same {n:,} spans: export + finalisation past the quiet period / file import",
                "<= 1.5x",
                f"{ratio:.1f}x ({worked:.1f} s against {door_s:.1f} s)",
                ratio <= 1.5,
                config,
            )
        )
    return {
        "rows": rows,
        "details": {"spans_per_trace": SPANS_PER_TRACE, "live": lives, "file_door": door},
        "notes": [f"receiver to runs on {live['broker']}: trace states at the end {live['states']}" for live in lives],
    }
