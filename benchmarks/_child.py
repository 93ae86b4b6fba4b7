"""The measured side of the database benchmarks: one fresh interpreter per measurement.

    python -m benchmarks._child migrate
    python -m benchmarks._child import BUNDLE_FOLDER
    python -m benchmarks._child lineage-db BUNDLE_FOLDER REPEAT

The parent (bench_import / bench_lineage) sets N17Q_DATA_DIR and DATABASE_URL and reads the one line
starting with N17Q-BENCH-RESULT. `migrate` runs in a process of its own first, so that a migration's
memory never counts in the import's peak; the measuring child then runs `migrate` again (a no-op on the
migrated database, as a long-running worker would have done at start) before it takes its baseline.
Peak memory is the process's high-water mark of resident memory: `VmHWM` in /proc/self/status on Linux, else
`getrusage(RUSAGE_SELF).ru_maxrss`. Not ru_maxrss on Linux: it carries over the RSS the parent had when it forked
this child (the kernel keeps the pre-exec high-water mark), so after other benchmarks had grown the parent to
600 MB, every child "peaked" at 600 MB before it had done anything.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import RESULT_MARK


def _proc_status_mb(field: str) -> float | None:
    """A memory figure of /proc/self/status (`VmHWM`, `VmRSS`) in MB, or None where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _maxrss_mb() -> float:
    peak = _proc_status_mb("VmHWM")
    if peak is not None:
        return peak
    # Linux reports kilobytes, macOS bytes.
    raw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return raw / (1024 * 1024) if sys.platform == "darwin" else raw / 1024


def _rss_now_mb() -> float | None:
    return _proc_status_mb("VmRSS")


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
    started_at = time.time()
    started = time.perf_counter()
    result = run_import_from_path(Path(folder))
    seconds = time.perf_counter() - started
    ended_at = time.time()
    cpu = _cpu_s() - cpu0
    peak = _maxrss_mb()
    return {
        "seconds": seconds,
        # When the import ran, in epoch seconds: what another process's writes overlapped (bench_import_writers).
        "started_at": started_at,
        "ended_at": ended_at,
        "cpu_seconds": cpu,
        "events": result.events,
        "findings": result.finding_count,
        # The import's answer as the API and `import_run --json` give it: bounded whatever the findings (issue 20).
        "answer_bytes": len(json.dumps(result.to_json())),
        "answer_findings": len(result.findings),
        "baseline_rss_mb": baseline,
        "baseline_rss_now_mb": baseline_now,
        "peak_rss_mb": peak,
        "import_rss_mb": peak - baseline,
        "stored": _counts(result.run),
        "database": _database(),
    }


def cmd_import_file(path: str) -> dict[str, Any]:
    """A trace or log file through the import door (`runs.import_formats`): recognised, converted, imported."""
    _setup(migrate=True)
    from runs.import_formats import runs_import_from_path
    from runs.models import Run

    gc.collect()
    baseline = _maxrss_mb()
    cpu0 = _cpu_s()
    started = time.perf_counter()
    result = runs_import_from_path(Path(path))
    seconds = time.perf_counter() - started
    answer = result.to_json()
    run = Run.objects.get(run_id=answer["run"])
    return {
        "seconds": seconds,
        "cpu_seconds": _cpu_s() - cpu0,
        "runs": len(answer.get("runs") or [answer]),
        "events": answer["events"],
        "conversion": answer.get("conversion"),
        "baseline_rss_mb": baseline,
        "peak_rss_mb": _maxrss_mb(),
        # The converting process (runs.import_formats starts one per file): its own peak, reported beside ours.
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "stored": _counts(run),
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


def cmd_run_page(small_folder: str, repeat: str, *large_folders: str) -> dict[str, Any]:
    """Server time of the run page and its detail panel for a small run and each large one, and the queries each
    request issues.

    Requests go through Django's test client: the whole request path (middleware, session, view, query,
    template) without a socket, which is what "server time" means here.
    """
    # Production serves hashed, collected static files: collect them into this run's data folder.
    os.environ["N17Q_STATIC_ROOT"] = os.path.join(os.environ["N17Q_DATA_DIR"], "static")
    _setup(migrate=True)
    from django.core.management import call_command

    call_command("collectstatic", "--noinput", verbosity=0)
    from runs.importer import run_import_from_path
    from runs.models import Event

    small = run_import_from_path(Path(small_folder)).run
    larges = []
    import_s = {}
    for folder in large_folders:
        started = time.perf_counter()
        run = run_import_from_path(Path(folder)).run
        import_s[run.event_count] = time.perf_counter() - started
        larges.append(run)
    client = _bench_client()

    def last(run: Any, kind: str) -> str:
        return Event.objects.filter(run=run, kind=kind).order_by("-seq").values_list("event_id", flat=True)[0]

    # The last tool result and the last intent: the deepest events of the run, with a blob and a neighbourhood.
    pages = {
        "run page": lambda run: f"/runs/{run.run_id}/",
        "run page, focused on the last intent": lambda run: f"/runs/{run.run_id}/?focus={last(run, 'effect.intent')}",
        "run page, focus narrowed (hide)": lambda run: (
            f"/runs/{run.run_id}/?focus={last(run, 'effect.intent')}&narrow=hide"
        ),
        "run page, the last result in the detail panel": lambda run: (
            f"/runs/{run.run_id}/?event={last(run, 'tool.result')}"
        ),
        "detail panel (htmx), the last result": lambda run: f"/runs/{run.run_id}/events/{last(run, 'tool.result')}/",
        "trace window in the middle of the run": lambda run: f"/runs/{run.run_id}/?trace_from={run.event_count // 2}",
        "trace, two facets, middle of the run": lambda run: (
            f"/runs/{run.run_id}/?facet=evidence&facet=effects&trace_from={run.event_count // 2}"
        ),
        "trace search with no match": lambda run: f"/runs/{run.run_id}/?q=no-such-text-anywhere",
        # The trace as a tree (runs/span_tree.py): the first window, and one deep in the run with its context path.
        # Seq 301 lies before the generated runs' first attempt switch (40% of the smallest), so the small and the
        # large run's windows there have the same shape and their query counts compare.
        "tree view": lambda run: f"/runs/{run.run_id}/?view=tree",
        "tree view, a window at seq 301 with its context": lambda run: f"/runs/{run.run_id}/?view=tree&trace_from=301",
        "tree view, middle of the run": lambda run: f"/runs/{run.run_id}/?view=tree&trace_from={run.event_count // 2}",
    }
    htmx = {"detail panel (htmx), the last result"}
    out = _measure_pages(client, pages, [small, *larges], int(repeat), htmx)
    return {
        "pages": out,
        "small_events": small.event_count,
        "large_events": [run.event_count for run in larges],
        "import_s": import_s,
    }


def _measure_pages(
    client: Any, pages: dict[str, Callable[[Any], str]], runs: list[Any], repeat: int, htmx: set[str]
) -> dict[str, Any]:
    """Each page of each run: the queries of one request (after a warming one) and the times of `repeat` more."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    out: dict[str, Any] = {}
    for name, url_of in pages.items():
        headers: dict[str, Any] = {"HTTP_HX_REQUEST": "true"} if name in htmx else {}
        entry: dict[str, Any] = {}
        for run in runs:
            url = url_of(run)
            client.get(url, **headers)  # warm: template loading, the first connection
            connection.queries_log.clear()  # a full log (it keeps 9,000) would make the count read 0
            with CaptureQueriesContext(connection) as ctx:
                response = client.get(url, **headers)
            assert response.status_code == 200, (url, response.status_code)
            # Read now: each later request's request_started signal empties the query log.
            queries = len(ctx.captured_queries)
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                client.get(url, **headers)
                times.append(time.perf_counter() - started)
            entry[str(run.event_count)] = {
                "url": url,
                "queries": queries,
                "times_s": times,
                "bytes": len(response.content),
            }
        out[name] = entry
    return out


def _bench_client() -> Any:
    """A signed-in viewer's test client under production settings (collected static files, no HTTPS redirect)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    user = get_user_model().objects.create_user("bench-viewer", password="bench-password-1")
    user.groups.add(Group.objects.get(name="viewer"))
    # Production settings, but the requests come from no proxy: the host must be allowed, and the HTTPS
    # redirect (a proxy's business in production) is off so that the page itself is measured.
    settings.ALLOWED_HOSTS = ["localhost"]
    settings.SECURE_SSL_REDIRECT = False
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def cmd_span_tree(repeat: str, small_file: str, *large_files: str) -> dict[str, Any]:
    """The run page of OTLP traces imported from files (a small one and large ones), in the list and as a tree:
    queries and server time, as cmd_run_page measures them."""
    os.environ["N17Q_STATIC_ROOT"] = os.path.join(os.environ["N17Q_DATA_DIR"], "static")
    _setup(migrate=True)
    from django.core.management import call_command

    call_command("collectstatic", "--noinput", verbosity=0)
    from runs.import_formats import runs_import_from_path
    from runs.models import Run

    runs = []
    import_s = {}
    for path in (small_file, *large_files):
        started = time.perf_counter()
        answer = runs_import_from_path(Path(path)).to_json()
        run = Run.objects.get(run_id=answer["run"])
        import_s[run.event_count] = time.perf_counter() - started
        runs.append(run)
    client = _bench_client()
    pages: dict[str, Callable[[Any], str]] = {
        "trace list": lambda run: f"/runs/{run.run_id}/",
        "tree view": lambda run: f"/runs/{run.run_id}/?view=tree",
        "tree view, middle of the trace": lambda run: (
            f"/runs/{run.run_id}/?view=tree&trace_from={run.event_count // 2}"
        ),
        "tree view, last window": lambda run: (
            f"/runs/{run.run_id}/?view=tree&trace_from={max(0, run.event_count - 60)}"
        ),
    }
    out = _measure_pages(client, pages, runs, int(repeat), set())
    return {
        "pages": out,
        "small_events": runs[0].event_count,
        "large_events": [run.event_count for run in runs[1:]],
        "import_s": import_s,
    }


def cmd_run_search(runs: str, repeat: str) -> dict[str, Any]:
    """Server time and queries of the cross-run search (benchmarks/bench_run_search.py) over `runs` runs: the demo's
    stories imported, the rest synthesized in bulk (a Run row and its RunSummary each)."""
    import random
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    os.environ["N17Q_STATIC_ROOT"] = os.path.join(os.environ["N17Q_DATA_DIR"], "static")
    _setup(migrate=True)
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from n17q_engine.run_summary import lines
    from runs.models import Run, RunSummary

    call_command("collectstatic", "--noinput", verbosity=0)
    call_command("load_demo", verbosity=0)
    real = list(Run.objects.order_by("id").values_list("run_id", flat=True))
    total, small = int(runs), 100
    tools = [f"tool.{name}" for name in ("search", "read_file", "apply_patch", "shell", "email_send", "http_get")]
    models = ["gpt-4o-mini-2024-07-18", "gpt-4o", "claude-3-5-sonnet", "llama-3.1-70b"]
    codes = ["LIN001", "LIN003", "LIN005", "LIN007", "LIN011", "LIN012", "LIN014"]
    rng = random.Random(38)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    middle = (start + timedelta(minutes=5 * total // 2)).date().isoformat()

    def synthesize(first: int, last: int) -> None:
        for lo in range(first, last, 5000):
            hi = min(last, lo + 5000)
            batch = []
            for i in range(lo, hi):
                created = start + timedelta(minutes=5 * i + rng.randrange(5))
                batch.append(
                    Run(
                        run_id=f"run-synth-{i:07d}",
                        title=f"Synthetic run {i} of the search benchmark",
                        task_id=f"task-{i % 300}",
                        task_revision="r1",
                        environment="live" if i % 3 else "fixture",
                        mode="recorded" if i % 4 else "rerun",
                        model_name=models[i % len(models)],
                        model_version="1",
                        policy_revision="bench-policy@1",
                        created_at=created,
                        manifest_run={},
                        bundle_digest="sha256:" + "0" * 64,
                        finding_count=(i % 7 == 0) * 2,
                        error_count=(i % 14 == 0),
                        final_state=("completed", "failed", "interrupted")[i % 3],
                        event_count=0,
                    )
                )
            with transaction.atomic():
                made = Run.objects.bulk_create(batch)
                summaries = []
                for i, run in zip(range(lo, hi), made, strict=True):
                    used = sorted({tools[(i + k) % len(tools)] for k in range(1 + i % 4)})
                    model = models[i % len(models)]
                    found = [codes[(i // 7) % len(codes)]] if run.finding_count else []
                    tin, tout = 200 + (i * 37) % 20000, 50 + (i * 11) % 4000
                    priced = not model.startswith("llama")
                    summaries.append(
                        RunSummary(
                            run=run,
                            created_at=run.created_at,
                            started_at=run.created_at + timedelta(seconds=3),
                            kind=("recorded", "recorded", "replay", "imported")[i % 4],
                            outcome="errors" if run.error_count else "warnings" if run.finding_count else "clean",
                            final_state=run.final_state,
                            scenario="",
                            tools=lines(used),
                            model_names=lines([model]),
                            codes=lines(found),
                            model_calls=1 + i % 9,
                            tokens=tin + tout,
                            tokens_in=tin,
                            tokens_out=tout,
                            cost=(Decimal(tin) * Decimal("0.15") + Decimal(tout) * Decimal("0.6")) / 1_000_000
                            if priced
                            else None,
                            currency="USD" if priced else "",
                            usage={},
                            text="\n".join([run.run_id, run.title, run.task_id, *used, model, *found]).lower(),
                        )
                    )
                RunSummary.objects.bulk_create(summaries)

    user = get_user_model().objects.create_user("bench-viewer", password="bench-password-1")
    user.groups.add(Group.objects.get(name="viewer"))
    settings.ALLOWED_HOSTS = ["localhost"]
    settings.SECURE_SSL_REDIRECT = False
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)

    def cursor_page() -> str:
        """The second page of the model filter: after the cursor of its 50th run (the link the first page gives)."""
        from urllib.parse import quote

        from runs.search import cursor_of, summaries_filtered

        rows = summaries_filtered({"model": "gpt-4o"}).order_by("-created_at", "-run_id")
        return f"/?model=gpt-4o&after={quote(cursor_of(rows[min(49, rows.count() - 1)]))}"

    pages: dict[str, Any] = {
        "run list, text search (rare: one run)": lambda: f"/?q=synthetic+run+{total // 2}+of",
        "run list, text search (none)": lambda: "/?q=no-such-text-anywhere",
        "run list, tool": lambda: "/?tool=tool.email",
        "run list, model": lambda: "/?model=claude",
        "run list, finding code": lambda: "/?code=LIN012",
        "run list, kind": lambda: "/?kind=imported",
        "run list, outcome": lambda: "/?outcome=errors",
        "run list, final state": lambda: "/?state=interrupted",
        "run list, created range (a day in the middle)": lambda: f"/?created_from={middle}&created_to={middle}",
        "run list, started range (a day in the middle)": lambda: f"/?started_from={middle}&started_to={middle}",
        "run list, tokens range": lambda: "/?tokens_min=20000&tokens_max=21000",
        "run list, cost range (with the not-evaluated count)": lambda: "/?cost_min=0.003&cost_max=0.0031",
        "run list, five filters": lambda: "/?model=gpt&tool=tool.shell&outcome=warnings&kind=recorded&tokens_min=100",
        "run list, next page by cursor": cursor_page,
        "API, model and tokens": lambda: "/api/v1/runs/?model=gpt-4o&tokens_min=10000",
        "event search, tool": lambda: "/search/events/?tool=email",
        "compare two runs": lambda: f"/compare/?run={real[0]}&run={real[1]}",
    }
    started = time.perf_counter()
    synthesize(0, small - len(real))
    small_counts: dict[str, int] = {}
    for name, url_of in pages.items():
        url = url_of()
        client.get(url)
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        small_counts[name] = len(ctx.captured_queries)
    synthesize(small - len(real), total - len(real))
    synth_s = time.perf_counter() - started
    connection.cursor().execute("ANALYZE")
    out: dict[str, Any] = {}
    for name, url_of in pages.items():
        url = url_of()
        client.get(url)
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        queries = len(ctx.captured_queries)
        body = response.content.decode()
        times = []
        for _ in range(int(repeat)):
            t = time.perf_counter()
            client.get(url)
            times.append(time.perf_counter() - t)
        out[name] = {
            "url": url,
            "queries": queries,
            "queries_small": small_counts[name],
            "times_s": times,
            "listed": body.count('class="run-name"') + body.count('"id":"run-') + body.count("#detail"),
        }
    return {"pages": out, "runs": Run.objects.count(), "small_runs": small, "synth_s": synth_s}


def main(argv: list[str]) -> int:
    commands: dict[str, Callable[..., dict[str, Any]]] = {
        "migrate": cmd_migrate,
        "import": cmd_import,
        "import-file": cmd_import_file,
        "lineage-db": cmd_lineage_db,
        "run-page": cmd_run_page,
        "span-tree": cmd_span_tree,
        "run-search": cmd_run_search,
    }
    if not argv or argv[0] not in commands:
        print(f"usage: python -m benchmarks._child {{{'|'.join(commands)}}} ...", file=sys.stderr)
        return 2
    _emit(commands[argv[0]](*argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
