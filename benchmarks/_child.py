"""The measured side of the database benchmarks: one fresh interpreter per measurement.

    python -m benchmarks._child migrate
    python -m benchmarks._child import BUNDLE_FOLDER
    python -m benchmarks._child lineage-db BUNDLE_FOLDER REPEAT

The parent (bench_import / bench_lineage) sets N17Q_DATA_DIR and DATABASE_URL and reads the one line
starting with N17Q-BENCH-RESULT. `migrate` runs in a process of its own first, so that a migration's
memory never counts in the import's peak; the measuring child then runs `migrate` again (a no-op on the
migrated database, as a long-running worker would have done at start) before it takes its baseline.
Peak memory is `getrusage(RUSAGE_SELF).ru_maxrss`, the process's high-water mark.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RESULT_MARK


def _maxrss_mb() -> float:
    # Linux reports kilobytes, macOS bytes.
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return raw / (1024 * 1024) if sys.platform == "darwin" else raw / 1024


def _rss_now_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _setup(*, migrate: bool) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
    from django.db import connection

    connection.ensure_connection()


def _emit(result: dict[str, Any]) -> None:
    print(RESULT_MARK + json.dumps(result), flush=True)


def cmd_migrate() -> dict[str, Any]:
    started = time.perf_counter()
    _setup(migrate=True)
    return {"seconds": time.perf_counter() - started}


def _counts(run: Any) -> dict[str, int]:
    from runs.models import Edge, Event, Finding, RunObject

    return {
        "events": Event.objects.filter(run=run).count(),
        "edges": Edge.objects.filter(run=run).count(),
        "dangling_edges": Edge.objects.filter(run=run, target_event__isnull=True).count(),
        "objects": RunObject.objects.filter(run=run).count(),
        "findings": Finding.objects.filter(run=run).count(),
    }


def _database() -> dict[str, Any]:
    from django.db import connection

    info: dict[str, Any] = {"vendor": connection.vendor}
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("select version()")
            info["version"] = cur.fetchone()[0].split(" on ")[0]
            for name in ("fsync", "synchronous_commit", "shared_buffers", "wal_level"):
                cur.execute(f"show {name}")
                info[name] = cur.fetchone()[0]
        else:
            cur.execute("select sqlite_version()")
            info["version"] = cur.fetchone()[0]
            for name in ("journal_mode", "synchronous"):
                cur.execute(f"pragma {name}")
                info[name] = cur.fetchone()[0]
    return info


def cmd_import(folder: str) -> dict[str, Any]:
    _setup(migrate=True)
    from runs.importer import run_import_from_path

    gc.collect()
    baseline = _maxrss_mb()
    baseline_now = _rss_now_mb()
    cpu0 = _cpu_s()
    started = time.perf_counter()
    result = run_import_from_path(Path(folder))
    seconds = time.perf_counter() - started
    cpu = _cpu_s() - cpu0
    peak = _maxrss_mb()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "events": result.events,
        "findings": len(result.findings),
        "baseline_rss_mb": baseline,
        "baseline_rss_now_mb": baseline_now,
        "peak_rss_mb": peak,
        "import_rss_mb": peak - baseline,
        "stored": _counts(result.run),
        "database": _database(),
    }


def cmd_lineage_db(folder: str, repeat: str) -> dict[str, Any]:
    _setup(migrate=True)
    from runs.importer import run_import_from_path
    from runs.selectors import run_lineage_check

    imported = run_import_from_path(Path(folder))
    run = imported.run
    times: list[float] = []
    findings = -1
    for _ in range(int(repeat)):
        gc.collect()
        started = time.perf_counter()
        found = run_lineage_check(run)
        times.append(time.perf_counter() - started)
        findings = len(found)
    return {
        "runs": times,
        "events": imported.events,
        "findings": findings,
        "import_findings": len(imported.findings),
        "peak_rss_mb": _maxrss_mb(),
        "database": _database(),
    }


def main(argv: list[str]) -> int:
    commands = {"migrate": cmd_migrate, "import": cmd_import, "lineage-db": cmd_lineage_db}
    if not argv or argv[0] not in commands:
        print(f"usage: python -m benchmarks._child {{{'|'.join(commands)}}} ...", file=sys.stderr)
        return 2
    _emit(commands[argv[0]](*argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
