"""Where the OTLP receiver's disk goes, per span and per table, and what a trace's finalisation costs (issue 31).

    .venv/bin/python -m benchmarks.otlp_disk [--spans 2000] [--per-trace 100] [--json]

A small real run, in a fresh interpreter against an empty, migrated SQLite database with production settings: the
same SDK spans as bench_otlp_live (`bench_otlp.make_spans`), encoded by the exporter's own encoder in batches of 512,
posted to `POST /v1/traces` through Django's test client with a harness token (the receiver's view, its
authentication, `wire.split_request`, `services.spans_receive`), then every trace finalised in this process
(`services.trace_finalize`, as the worker's task calls it; each timed). Then, the connections closed:

- the database file (and its WAL) as the file system sees it, and the pages SQLite has in use and free
  (`PRAGMA page_count`, `freelist_count`): a deleted row's pages go to the free list, which SQLite reuses for later
  writes but does not give back to the file system unless the database is vacuumed (docs/benchmarks.md);
- the pages in use per table, its indexes included (SQLite's `dbstat` virtual table), largest first;
- the blob store: its files' bytes, and the bytes of the runs' blobs by role (`source-otlp`, `source-trace`, ...).

It is not part of `make bench` and judges nothing: it measures. Not a timing benchmark either, but the median
finalisation time per trace is printed as a rough figure (`time.perf_counter` around each `trace_finalize`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .bench_otlp import BATCH, make_spans
from .common import REPO, RESULT_MARK, child_env


def sqlite_disk(db_path: Path) -> dict[str, Any]:
    """The database's bytes as the file system holds them and as SQLite uses them, and per table (its indexes
    counted with it), from a read-only connection. `dbstat` is compiled into the sqlite3 of CPython's usual builds;
    without it the per-table figures are left out."""
    files = {p.name: p.stat().st_size for p in db_path.parent.glob(db_path.name + "*") if p.is_file()}
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        auto_vacuum = db.execute("PRAGMA auto_vacuum").fetchone()[0]
        owner = dict(db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table', 'index')"))
        tables: dict[str, dict[str, int]] = {}
        try:
            rows = db.execute("SELECT name, SUM(pgsize), SUM(payload), COUNT(*) FROM dbstat GROUP BY name").fetchall()
        except sqlite3.OperationalError:
            rows = []
        for name, size, payload, n_pages in rows:
            table = owner.get(name, name)
            entry = tables.setdefault(table, {"bytes": 0, "payload": 0, "index_bytes": 0, "pages": 0})
            entry["bytes"] += size
            entry["payload"] += payload
            entry["pages"] += n_pages
            if name != table:
                entry["index_bytes"] += size
        for table in list(tables):
            with contextlib.suppress(sqlite3.OperationalError):
                tables[table]["rows"] = db.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]
    return {
        "files": files,
        "file_bytes": sum(files.values()),
        "page_size": page_size,
        "pages": pages,
        "free_pages": free,
        "in_use_bytes": (pages - free) * page_size,
        "auto_vacuum": {0: "none", 1: "full", 2: "incremental"}.get(auto_vacuum, str(auto_vacuum)),
        "tables": dict(sorted(tables.items(), key=lambda kv: -kv[1]["bytes"])),
    }


def blob_disk(blob_dir: Path) -> dict[str, int]:
    sizes = [p.stat() for p in blob_dir.rglob("*") if p.is_file()] if blob_dir.is_dir() else []
    return {
        "files": len(sizes),
        "bytes": sum(s.st_size for s in sizes),
        "allocated_bytes": sum(s.st_blocks * 512 for s in sizes),
    }


def _child(work: Path) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connections
    from django.db.models import Sum
    from django.test import Client

    from accounts.models import HarnessToken
    from otlp_receiver import services
    from otlp_receiver.models import ReceivedTrace
    from runs.models import Event, RunBlob

    user = get_user_model().objects.create_user("disk-harness", password="disk-password-1")
    user.groups.add(Group.objects.get(name="operator"))
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="disk",
        user=user,
        key_digest=HarnessToken.digest_key(key),
        prefix=key[:9],
        scopes=[HarnessToken.Scope.IMPORT_RUNS],
    )
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    batches = sorted(work.glob("batch-*.pb"))
    for path in batches:
        answer = client.post("/v1/traces", path.read_bytes(), content_type="application/x-protobuf")
        if answer.status_code != 200:
            raise RuntimeError(f"{path.name}: {answer.status_code} {answer.content[:300]!r}")
    received = ReceivedTrace.objects.aggregate(spans=Sum("span_count"))["spans"] or 0
    seconds: list[float] = []
    states: dict[str, int] = {}
    for pk in ReceivedTrace.objects.order_by("pk").values_list("pk", flat=True):
        started = time.perf_counter()
        state = services.trace_finalize(trace_pk=pk, force=True).state
        seconds.append(time.perf_counter() - started)
        states[state] = states.get(state, 0) + 1
    by_role = {
        role: {"blobs": n, "bytes": size}
        for role, n, size in RunBlob.objects.values_list("role")
        .annotate(n=django.db.models.Count("blob", distinct=True), size=Sum("blob__size"))
        .values_list("role", "n", "size")
    }
    events = Event.objects.count()
    connections.close_all()
    data_dir = Path(os.environ["N17Q_DATA_DIR"])
    return {
        "spans": received,
        "batches": len(batches),
        "traces": sum(states.values()),
        "states": states,
        "events": events,
        "finalize_s": {
            "median": statistics.median(seconds) if seconds else None,
            "min": min(seconds, default=None),
            "max": max(seconds, default=None),
            "total": sum(seconds),
        },
        "database": sqlite_disk(data_dir / "n17q.sqlite3"),
        "blob_store": blob_disk(data_dir / "blobs"),
        "blobs_by_role": by_role,
    }


def measure(spans: int, per_trace: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    work = Path(tempfile.mkdtemp(prefix="n17q-otlp-disk-"))
    try:
        made = make_spans(spans, per_trace)
        for i in range(0, len(made), BATCH):
            (work / f"batch-{i // BATCH:06d}.pb").write_bytes(encode_spans(made[i : i + BATCH]).SerializeToString())
        env = child_env(work / "data", None)
        env.update(N17Q_ALLOWED_HOSTS="testserver", N17Q_SSL_REDIRECT="0", N17Q_OTLP_QUIET_SECONDS="3600")
        env.pop("REDIS_URL", None)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.otlp_disk", "--child", str(work)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        for line in done.stdout.splitlines():
            if line.startswith(RESULT_MARK):
                return dict(json.loads(line[len(RESULT_MARK) :]))
        raise RuntimeError(f"the measuring process failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(result: dict[str, Any]) -> str:
    spans = max(1, result["spans"])
    db, blobs = result["database"], result["blob_store"]
    lines = [
        f"{result['spans']:,} spans in {result['traces']:,} traces ({result['batches']} requests), "
        f"states {result['states']}, {result['events']:,} events",
        f"finalisation per trace: median {result['finalize_s']['median'] * 1000:.1f} ms "
        f"(min {result['finalize_s']['min'] * 1000:.1f}, max {result['finalize_s']['max'] * 1000:.1f})",
        "",
        f"database file(s) {db['file_bytes']:,} B = {db['file_bytes'] / spans:,.0f} B/span "
        f"(pages in use {db['in_use_bytes']:,} B = {db['in_use_bytes'] / spans:,.0f} B/span; "
        f"{db['free_pages']:,} of {db['pages']:,} pages free; auto_vacuum {db['auto_vacuum']})",
        f"blob store {blobs['bytes']:,} B in {blobs['files']} files = {blobs['bytes'] / spans:,.0f} B/span "
        f"(allocated {blobs['allocated_bytes']:,} B)",
        f"total (files) {(db['file_bytes'] + blobs['bytes']) / spans:,.0f} B/span; "
        f"total (pages in use) {(db['in_use_bytes'] + blobs['bytes']) / spans:,.0f} B/span",
        "",
        f"{'table':40} {'rows':>8} {'bytes':>11} {'B/span':>8} {'of which indexes':>17}",
    ]
    for table, t in db["tables"].items():
        if t["bytes"] < 8192 and table != "otlp_receiver_tracechunk":
            continue
        lines.append(
            f"{table:40} {t.get('rows', 0):>8,} {t['bytes']:>11,} {t['bytes'] / spans:>8,.0f} {t['index_bytes']:>17,}"
        )
    lines += ["", f"{'blob role':40} {'blobs':>8} {'bytes':>11} {'B/span':>8}"]
    for role, b in sorted(result["blobs_by_role"].items()):
        lines.append(f"{role:40} {b['blobs']:>8,} {b['bytes']:>11,} {b['bytes'] / spans:>8,.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=2000)
    parser.add_argument("--per-trace", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(RESULT_MARK + json.dumps(_child(Path(args.child))), flush=True)
        return 0
    result = measure(args.spans, args.per_trace)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
