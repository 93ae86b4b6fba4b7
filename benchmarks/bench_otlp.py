"""Budget (DESIGN §9, OTLP ingest): a 100,000-span OTLP file imported in under 10 s; the receiver sustaining at
least 5,000 spans/s from the real OTel exporter in batches of 512, with bounded memory.

The spans are made by the OpenTelemetry SDK itself (GenAI conventions: one `invoke_agent` root per trace, then
`chat` and `execute_tool` children with token usage, tool arguments and results), so what is measured is what a
harness's exporter sends, not a file written by hand.

1. **File**: the spans encoded by the exporter's own encoder (`encode_spans`) into one OTLP protobuf file,
   imported through the import door (`runs.import_formats.runs_import_from_path`: recognised by content,
   converted, one run per trace, all or nothing) in a fresh interpreter against an empty, migrated SQLite
   database (production settings). Seconds, peak RSS, runs and events stored.
2. **Receiver**: gunicorn (docker/gunicorn.conf.py, two sync workers, production settings, SQLite) on loopback;
   the real `OTLPSpanExporter` (protobuf over HTTP, with the harness token in its headers) exports the same
   spans in batches of 512, one batch after the other, as the SDK's BatchSpanProcessor does from its one thread.
   Spans per second over the whole export, every batch answered SUCCESS, the spans stored counted afterwards,
   and the web workers' resident memory before and after (bounded: it must not grow with the spans received).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .common import REPO, Config, child_env, median, row, run_child

NAME = "otlp"
SPANS = 100_000
SPANS_PER_TRACE = 10_000
FILE_BUDGET_S = 10.0
RECEIVER_BUDGET_SPANS_S = 5000.0
BATCH = 512
DEFAULT_REPEAT = 3
WEB_PORT = 18781


def make_spans(n: int, per_trace: int) -> list[Any]:
    """`n` finished spans from the real SDK, in traces of `per_trace` spans (a root and its children)."""
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-bench")
    made = 0
    trace_no = 0
    while made < n:
        trace_no += 1
        size = min(per_trace, n - made)
        with tracer.start_as_current_span(
            "invoke_agent bench", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench"}
        ):
            for i in range(size - 1):
                if i % 2 == 0:
                    with tracer.start_as_current_span(
                        "chat bench-model",
                        attributes={
                            "gen_ai.operation.name": "chat",
                            "gen_ai.request.model": "bench-model",
                            "gen_ai.usage.input_tokens": 120 + i % 7,
                            "gen_ai.usage.output_tokens": 30 + i % 5,
                        },
                    ):
                        pass
                else:
                    with tracer.start_as_current_span(
                        "execute_tool search",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": "search",
                            "gen_ai.tool.call.id": f"call-{trace_no}-{i}",
                            "gen_ai.tool.call.arguments": json.dumps({"q": f"query {i % 97}"}),
                            "gen_ai.tool.call.result": json.dumps({"hits": [f"doc-{i % 13}"]}),
                        },
                    ) as span:
                        if i % 50 == 1:
                            span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, "tool failed"))
        made += size
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    assert len(spans) == n, (len(spans), n)
    return spans


def _file_import(spans: list[Any], work: Path, repeat: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    path = work / "spans.otlp.pb"
    path.write_bytes(encode_spans(spans).SerializeToString())
    runs = []
    for _ in range(repeat):
        data_dir = Path(tempfile.mkdtemp(prefix="otlp-file-", dir=work))
        try:
            run_child(["migrate"], data_dir=data_dir, database_url=None)
            runs.append(run_child(["import-file", str(path)], data_dir=data_dir, database_url=None))
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
    return {"file_bytes": path.stat().st_size, "runs": runs}


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {args[0]} failed: {done.stderr.strip()[-800:]}")
    return done.stdout


def receiver_site(
    data_dir: Path, work: Path, port: int, log: Path, **settings: str
) -> tuple[dict[str, str], str, subprocess.Popen[bytes]]:
    """A migrated console in `data_dir` with production settings (and `settings`), a harness token of scope
    runs:import, and gunicorn serving it on 127.0.0.1:`port` (docker/gunicorn.conf.py, two workers), its output in
    `log`: (its environment, the token, the gunicorn process). The caller waits for it and stops it."""
    env = child_env(data_dir, None)
    env.update(
        N17Q_ALLOWED_HOSTS="127.0.0.1,localhost",
        N17Q_SSL_REDIRECT="0",
        N17Q_SECURE_COOKIES="0",
        N17Q_STATIC_ROOT=str(work / "static"),
        WEB_CONCURRENCY="2",
    )
    env.pop("REDIS_URL", None)
    env.update(settings)
    _manage(env, "migrate", "--noinput")
    _manage(
        env,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; from django.contrib.auth.models import Group; "
        "u = get_user_model().objects.create_user('bench-harness', password='bench-password-1'); "
        "u.groups.add(Group.objects.get(name='operator'))",
    )
    token = json.loads(
        _manage(env, "issue_token", "bench-harness", "--name", "bench", "--scope", "runs:import", "--json")
    )["token"]
    with open(log, "wb") as out:
        web = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("gunicorn")),
                "--config",
                "docker/gunicorn.conf.py",
                "--bind",
                f"127.0.0.1:{port}",
                "n17q_site.wsgi:application",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return env, token, web


def _rss_mb(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _receiver(spans: list[Any], work: Path) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    data_dir = work / "receiver-data"
    log = work / "gunicorn.log"
    # Measure receiving, not finalising: no trace falls quiet during the run (finalising is the file import).
    env, token, web = receiver_site(data_dir, work, WEB_PORT, log, N17Q_OTLP_QUIET_SECONDS="3600")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{WEB_PORT}/health/?check=database", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or web.poll() is not None:
                raise RuntimeError("gunicorn did not start: " + log.read_text()[-2000:])
            time.sleep(0.3)
        workers = _children(web.pid)
        exporter = OTLPSpanExporter(
            endpoint=f"http://127.0.0.1:{WEB_PORT}/v1/traces", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        # One small batch first (connection, first request in each worker), then the measured export.
        if exporter.export(spans[:BATCH]) is not SpanExportResult.SUCCESS:
            raise RuntimeError("the warm-up batch was refused: " + log.read_text()[-2000:])
        rss_before = _rss_mb(workers)
        measured = spans[BATCH:]
        failures = 0
        started = time.perf_counter()
        for i in range(0, len(measured), BATCH):
            if exporter.export(measured[i : i + BATCH]) is not SpanExportResult.SUCCESS:
                failures += 1
        seconds = time.perf_counter() - started
        rss_after = _rss_mb(workers)
        exporter.shutdown()
        stored = json.loads(
            _manage(
                env,
                "shell",
                "-c",
                "import json; from django.db.models import Sum; from otlp_receiver.models import ReceivedTrace; "
                "print(json.dumps({'traces': ReceivedTrace.objects.count(), "
                "'spans': ReceivedTrace.objects.aggregate(n=Sum('span_count'))['n']}))",
            )
            .strip()
            .splitlines()[-1]
        )
        return {
            "spans": len(measured),
            "seconds": seconds,
            "spans_per_s": len(measured) / seconds,
            "failed_batches": failures,
            "batches": -(-len(measured) // BATCH),
            "web_workers": len(workers),
            "workers_rss_before_mb": rss_before,
            "workers_rss_after_mb": rss_after,
            "stored": stored,
        }
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(web.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            web.wait(timeout=20)


def run(config: Config) -> dict[str, Any]:
    n = SPANS if config.at_budget_scale else max(1000, config.events)
    repeat = config.repeat or DEFAULT_REPEAT
    work = Path(tempfile.mkdtemp(prefix="n17q-bench-otlp-"))
    try:
        made = time.perf_counter()
        spans = make_spans(n, SPANS_PER_TRACE)
        made_s = time.perf_counter() - made
        file_result = _file_import(spans, work, repeat)
        receiver = _receiver(spans, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    imports = file_result["runs"]
    seconds = [r["seconds"] for r in imports]
    med = median(seconds)
    events = imports[-1]["events"]
    for r in imports:
        if r["runs"] != -(-n // SPANS_PER_TRACE):
            raise AssertionError(f"the file became {r['runs']} runs, not one per trace")
    rows = [
        row(
            f"OTLP file import ({n:,} spans, SQLite)",
            f"< {FILE_BUDGET_S:g} s",
            f"{med:.2f} s median ({', '.join(f'{s:.2f}' for s in seconds)} s; {imports[-1]['runs']} runs; "
            f"{file_result['file_bytes'] / 2**20:.1f} MB protobuf; peak RSS "
            f"{max(r['peak_rss_mb'] for r in imports):.0f} MB, its converting process "
            f"{max(r.get('worker_peak_rss_mb', 0) for r in imports):.0f} MB)",
            med < FILE_BUDGET_S,
            config,
        ),
        row(
            "OTLP receiver, real exporter, batches of 512 (SQLite, 2 gunicorn workers)",
            f">= {RECEIVER_BUDGET_SPANS_S:,.0f} spans/s",
            f"{receiver['spans_per_s']:,.0f} spans/s ({receiver['spans']:,} spans in {receiver['seconds']:.2f} s, "
            f"{receiver['failed_batches']} of {receiver['batches']} batches refused; workers' RSS "
            f"{receiver['workers_rss_before_mb']:.0f} -> {receiver['workers_rss_after_mb']:.0f} MB)",
            receiver["spans_per_s"] >= RECEIVER_BUDGET_SPANS_S and receiver["failed_batches"] == 0,
            config,
        ),
    ]
    return {
        "rows": rows,
        "details": {
            "spans": n,
            "spans_per_trace": SPANS_PER_TRACE,
            "sdk_seconds_to_make_spans": made_s,
            "file": file_result,
            "file_events_per_run_total": events,
            "receiver": receiver,
        },
        "notes": [
            f"file import: {events:,} events in the first run; each run's conversion report is in the details",
            f"receiver: stored {receiver['stored']} after the export (every span of every batch, the warm-up too)",
        ],
    }
