"""Arize Phoenix and N17Q's OTLP receiver on the same spans, turn about (issue 31, point 2).

    .venv/bin/python -m benchmarks.compare_phoenix [--spans N] [--per-trace 100] [--rounds 3]
                                                   [--phoenix-venv PATH] [--quiet-s 30] [--json]

The spans are made once (`bench_otlp.make_spans`: real SDK spans, traces of `--per-trace`) and sent, unchanged, by
the real `OTLPSpanExporter` (batches of 512, one after the other) to each system in turn; round 1 runs Phoenix
first, round 2 N17Q first, and so on.

- **Phoenix**: `phoenix serve` from a venv of its own (`--phoenix-venv`, default `$N17Q_PHOENIX_VENV` or
  `~/.cache/n17q/phoenix-venv`; created with `python3 -m venv` + `pip install arize-phoenix` when missing, never
  part of the project's dependencies), a fresh `PHOENIX_WORKING_DIR` (its SQLite database), free loopback ports
  (`PHOENIX_HOST=127.0.0.1`, `PHOENIX_PORT`, `PHOENIX_GRPC_PORT`) and no telemetry (`PHOENIX_TELEMETRY_ENABLED=false`,
  `PHOENIX_ALLOW_EXTERNAL_RESOURCES=false`). Phoenix binds its gRPC receiver to `[::]` whatever PHOENIX_HOST says
  (phoenix/server/grpc_server.py), so a `sitecustomize` on the server's PYTHONPATH rewrites that one address to
  127.0.0.1, and the run stops if the port is found listening anywhere but loopback.
  **Queryable** = Phoenix's own GraphQL API (`POST /graphql`, `projects { recordCount traceCount }`, the span count its
  UI shows, read from the database; its cache is invalidated on each span insert) counts every span the exporter
  had accepted, polled every 0.25 s near the goal (every second before: the polls run in the measured server);
  then, untimed, the REST API (`GET /v1/projects/default/spans?trace_id=...`) must return every span of the first
  and the last trace. Measured: seconds from the first export to all queryable, the last span to all
  queryable, one more trace sent to the idle server (send to queryable), refused batches and every HTTP answer the
  exporter got (503s are Phoenix's "at capacity", which the exporter retries), the peak RSS and PSS of the server's
  process tree (sampled from /proc every 0.5 s) and the bytes in its working directory once it has stopped.
- **N17Q**: `bench_otlp_live._live` on Redis (N17Q_BENCH_REDIS_URL, default redis://127.0.0.1:6379/15): gunicorn + a
  Celery worker, the time until every trace is a run. Its time to queryable is the export plus
  `last_span_to_all_runs_s`; N17Q waits, by design, for a trace to go quiet (`--quiet-s`) before it is a run, and
  Phoenix has no such wait, so the time past the quiet window (export + max(0, last span to all runs - quiet)) is
  reported too. Peak RSS/PSS are of the gunicorn and Celery process trees (Redis, shared, is not counted).

Ratios are N17Q / Phoenix, of the medians over the rounds (above 1: N17Q takes longer or uses more).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .bench_otlp import BATCH, make_spans
from .bench_otlp_live import _live
from .common import machine, machine_line

PHOENIX_PACKAGE = "arize-phoenix"
PHOENIX_PROJECT = "default"  # where Phoenix puts spans whose resource names no project (phoenix/utilities/project.py)
POLL_S = 0.25
COUNT_POLL_FAR_S = 1.0  # Phoenix's count is polled through its own server: less often while far from the goal
SAMPLE_S = 0.5
STOP_GRACE_S = 20
START_DEADLINE_S = 300
GRAPHQL_COUNTS = "{ projects(first: 100) { edges { node { name recordCount traceCount } } } }"
# Loopback only: Phoenix's gRPC OTLP receiver calls add_insecure_port("[::]:<port>") unconditionally.
_LOOPBACK_SHIM = """\
import grpc.aio._server as _server

_add_insecure_port = _server.Server.add_insecure_port


def _loopback(self, address):
    if address.startswith("[::]:"):
        address = "127.0.0.1:" + address[len("[::]:") :]
    return _add_insecure_port(self, address)


_server.Server.add_insecure_port = _loopback
"""


# ----------------------------------------------------------------------------------------------------------------------
# Processes: trees, memory, stopping


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc/<pid>/stat (the command name may hold spaces and brackets)."""
    found: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                found[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return found


def _descendants(roots: list[int], parents: dict[int, int] | None = None) -> list[int]:
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [r for r in roots if r in parents]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in kB; (0, 0) for a process gone or unreadable."""
    rss = pss = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    return rss, pss


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class PeakMemory:
    """The peak, over samples every SAMPLE_S, of the summed RSS and PSS of the processes `pids()` names."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self._pids = pids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self.rss_kb = self.pss_kb = self.samples = self.max_processes = 0

    def _run(self) -> None:
        while True:
            pids = self._pids()
            if pids:
                sizes = [_memory_kb(pid) for pid in pids]
                self.rss_kb = max(self.rss_kb, sum(r for r, _ in sizes))
                self.pss_kb = max(self.pss_kb, sum(p for _, p in sizes))
                self.max_processes = max(self.max_processes, len(pids))
                self.samples += 1
            if self._stop.wait(SAMPLE_S):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def as_dict(self) -> dict[str, Any]:
        return {
            "peak_rss_mb": self.rss_kb / 1024 if self.samples else None,
            "peak_pss_mb": self.pss_kb / 1024 if self.samples else None,
            "memory_samples": self.samples,
            "max_processes": self.max_processes,
        }


def _n17q_processes() -> list[int]:
    """gunicorn and the Celery worker that `_live` started (children of this process), with their children;
    not its short `manage.py` commands (migrate, issue_token)."""
    parents = _parents()
    me = os.getpid()
    roots = []
    for pid, ppid in parents.items():
        if ppid == me:
            command = _cmdline(pid)
            if ("gunicorn" in command or "celery" in command) and "manage.py" not in command:
                roots.append(pid)
    return _descendants(roots, parents)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, SIGKILL after STOP_GRACE_S."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    # Anything the server left behind in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _disk_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _free_port(taken: set[int]) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            return port


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp* has them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                address, hex_port = fields[1].rsplit(":", 1)
                if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


def _is_loopback(address: str) -> bool:
    if len(address) == 8:  # IPv4, little-endian: 127.x.x.x ends in 7F
        return address.upper().endswith("7F")
    return address.upper() in ("00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def _wait(what: str, ready: Callable[[], bool], deadline_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        if time.monotonic() > deadline:
            tail = ": " + log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} within {deadline_s:.0f} s{tail}")
        time.sleep(POLL_S)


# ----------------------------------------------------------------------------------------------------------------------
# Phoenix: its venv, its server, its API


def default_venv() -> Path:
    return Path(os.environ.get("N17Q_PHOENIX_VENV") or Path.home() / ".cache" / "n17q" / "phoenix-venv")


def ensure_phoenix(venv: Path) -> str:
    """Phoenix's venv, made and filled when missing; the installed arize-phoenix version."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "phoenix").exists():
        print(
            f"Phoenix is not installed in {venv}: creating that venv and pip-installing {PHOENIX_PACKAGE} into it",
            file=sys.stderr,
            flush=True,
        )
        base = shutil.which("python3") or "python3"
        for args, timeout in (
            ([base, "-m", "venv", str(venv)], 300),
            ([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", PHOENIX_PACKAGE], 3600),
        ):
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(args[:4])} failed: {(done.stderr or done.stdout)[-1500:]}")
    version = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({PHOENIX_PACKAGE!r}))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return version.stdout.strip()


def _phoenix_env(working_dir: Path, shim: Path, port: int, grpc_port: int) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_", "N17Q_", "DJANGO_"))}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "REDIS_URL", "DATABASE_URL"):
        keep.pop(name, None)
    keep.update(
        PHOENIX_WORKING_DIR=str(working_dir),
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PYTHONPATH=str(shim),
    )
    return keep


# Loopback only, whatever *_proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    try:
        with _OPENER.open(url, timeout=timeout) as answer:
            return int(answer.status), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except OSError:
        return 0, b""


def phoenix_counts(port: int, timeout: float = 30) -> tuple[int, int]:
    """(spans, traces) in all of Phoenix's projects, from its GraphQL API (Project.recordCount, .traceCount)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": GRAPHQL_COUNTS}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with _OPENER.open(request, timeout=timeout) as answer:
        body = json.load(answer)
    if body.get("errors"):
        raise RuntimeError(f"Phoenix's GraphQL API answered errors: {body['errors']}")
    nodes = [edge["node"] for edge in body["data"]["projects"]["edges"]]
    return sum(int(n["recordCount"]) for n in nodes), sum(int(n["traceCount"]) for n in nodes)


def phoenix_trace_spans(port: int, trace_id: str) -> int:
    """How many spans of one trace Phoenix's REST API returns (GET /v1/projects/{project}/spans?trace_id=)."""
    query = urllib.parse.urlencode({"trace_id": trace_id, "limit": 1000})
    status, body = _get(f"http://127.0.0.1:{port}/v1/projects/{PHOENIX_PROJECT}/spans?{query}", timeout=60)
    if status != 200:
        raise RuntimeError(f"Phoenix's REST span search answered {status}")
    return len(json.loads(body)["data"])


class CountingExport:
    """An OTLPSpanExporter whose session counts every HTTP answer (a retried batch is answered more than once)."""

    def __init__(self, endpoint: str, headers: dict[str, str] | None = None) -> None:
        import requests
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        self.statuses: Counter[int] = Counter()
        session = requests.Session()
        session.trust_env = False  # loopback: no proxy from the environment
        session.hooks["response"].append(self._answered)
        self.exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers, timeout=60, session=session)
        self.batches = self.refused = 0
        self.accepted: Counter[str] = Counter()  # spans in batches the server took, by trace

    def _answered(self, response: Any, *_: Any, **__: Any) -> None:
        self.statuses[int(response.status_code)] += 1

    def send(self, spans: list[Any]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        for i in range(0, len(spans), BATCH):
            self.batches += 1
            batch = spans[i : i + BATCH]
            if self.exporter.export(batch) is SpanExportResult.SUCCESS:
                self.accepted.update(format(s.context.trace_id, "032x") for s in batch)
            else:
                self.refused += 1

    def as_dict(self) -> dict[str, Any]:
        answers = sum(self.statuses.values())
        return {
            "batches": self.batches,
            "failed_batches": self.refused,
            "spans_accepted": sum(self.accepted.values()),
            "http_answers": {str(k): v for k, v in sorted(self.statuses.items())},
            "answers_503": self.statuses.get(503, 0),
            "retries": max(0, answers - self.batches),
        }


@contextlib.contextmanager
def phoenix_server(venv: Path, work: Path) -> Iterator[tuple[int, Path, Path, subprocess.Popen[bytes], PeakMemory]]:
    """`phoenix serve` on fresh loopback ports and a fresh working directory, its memory sampled from its start;
    stopped on the way out."""
    base = Path(tempfile.mkdtemp(prefix="phoenix-", dir=work))
    working_dir, shim, log = base / "working", base / "shim", base / "phoenix.log"
    working_dir.mkdir()
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(_LOOPBACK_SHIM)
    port = _free_port(set())
    grpc_port = _free_port({port})
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "phoenix"), "serve"],
            cwd=base,
            env=_phoenix_env(working_dir, shim, port, grpc_port),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    memory = PeakMemory(lambda: _descendants([proc.pid]))
    try:
        memory.__enter__()

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"phoenix serve exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}"
                )
            return _get(f"http://127.0.0.1:{port}/readyz")[0] == 200

        _wait("phoenix serve did not answer /readyz", ready, START_DEADLINE_S, log)
        _wait("Phoenix's gRPC receiver did not listen", lambda: bool(_listening(grpc_port)), 60, log)
        for p in (port, grpc_port):
            if not all(_is_loopback(a) for a in _listening(p)):
                raise RuntimeError(f"Phoenix listens on port {p} beyond loopback ({_listening(p)}): stopped")
        yield port, working_dir, log, proc, memory
    finally:
        memory.__exit__()
        _stop(proc)


class _Counting:
    """Waits on Phoenix's GraphQL span count; keeps what the polling cost (it runs in the measured server)."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.port, self.proc, self.log = port, proc, log
        self.polls = self.failed = 0
        self.seconds = 0.0

    def until(self, target: int, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"phoenix serve exited ({self.proc.returncode}) while its spans were counted")
            asked = time.perf_counter()
            try:
                n = phoenix_counts(self.port)[0]
            except (OSError, ValueError, KeyError):
                self.failed += 1
                n = -1
            self.polls += 1
            self.seconds += time.perf_counter() - asked
            if n >= target:
                return
            if time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Phoenix counted {n} of {target} spans within {deadline_s:.0f} s: {tail}")
            time.sleep(POLL_S if n >= 0.95 * target else COUNT_POLL_FAR_S)

    def as_dict(self) -> dict[str, Any]:
        return {"count_polls": self.polls, "count_polls_failed": self.failed, "count_poll_seconds": self.seconds}


def phoenix_turn(venv: Path, spans: list[Any], lone: list[Any], work: Path) -> dict[str, Any]:
    traces = len({s.context.trace_id for s in spans})
    load_before = os.getloadavg()[0]
    with phoenix_server(venv, work) as (port, working_dir, log, proc, memory):
        counting = _Counting(port, proc, log)
        export = CountingExport(f"http://127.0.0.1:{port}/v1/traces")
        started = time.perf_counter()
        export.send(spans)
        exported = time.perf_counter()
        # A batch the exporter gave up on (503 "at capacity" past its retries) is not waited for; it is reported.
        bulk = sum(export.accepted.values())
        counting.until(bulk, 600 + len(spans) / 50)
        queryable = time.perf_counter()
        counts_bulk = phoenix_counts(port)
        # One more trace, to the idle server: send to queryable.
        lone_started = time.perf_counter()
        export.send(lone)
        counting.until(sum(export.accepted.values()), 300)
        lone_s = time.perf_counter() - lone_started
        export.exporter.shutdown()
        # Untimed: the spans are there through the REST API too, the first and the last trace whole.
        order = list(dict.fromkeys(format(s.context.trace_id, "032x") for s in spans))
        rest = {t: phoenix_trace_spans(port, t) for t in (order[0], order[-1])}
        if any(n != export.accepted[t] for t, n in rest.items()):
            expected = {t: export.accepted[t] for t in rest}
            raise RuntimeError(f"Phoenix's REST span search returned {rest} spans, expected {expected}")
        counts_end = phoenix_counts(port)
    # The server has stopped here (SQLite closed), as N17Q's disk is measured after its processes stop.
    disk = _disk_bytes(working_dir)
    return {
        "system": "phoenix",
        "spans": len(spans),
        "traces": traces,
        "export_seconds": exported - started,
        "to_queryable_s": queryable - started,
        "past_quiet_s": queryable - started,
        "last_span_to_queryable_s": queryable - exported,
        "lone_trace_s": lone_s,
        "counts_after_bulk": {"spans": counts_bulk[0], "traces": counts_bulk[1]},
        "counts_at_end": {"spans": counts_end[0], "traces": counts_end[1]},
        "rest_spans_of_first_and_last_trace": rest,
        **counting.as_dict(),
        "disk_bytes": disk,
        "disk_bytes_per_span": disk / max(1, sum(export.accepted.values())),
        **export.as_dict(),
        **memory.as_dict(),
        "loadavg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "exit_code": proc.returncode,
    }


# ----------------------------------------------------------------------------------------------------------------------
# N17Q


def n17q_turn(spans: list[Any], lone: list[Any], work: Path, quiet: int, broker: str) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with PeakMemory(_n17q_processes) as memory:
        live = _live(spans, lone, work, quiet, broker)
    last = float(live["last_span_to_all_runs_s"])
    return {
        "system": "n17q",
        "spans": len(spans),
        "traces": live["traces"],
        "export_seconds": live["export_seconds"],
        "to_queryable_s": live["export_seconds"] + last,
        "past_quiet_s": live["export_seconds"] + max(0.0, last - quiet),
        "last_span_to_queryable_s": last,
        "lone_trace_s": live["lone_trace_latency_s"],
        "disk_bytes": live["disk_bytes"],
        "disk_bytes_per_span": live["disk_bytes"] / (len(spans) + len(lone)),
        "failed_batches": live["failed_batches"],
        **memory.as_dict(),
        "loadavg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "live": live,
    }


# ----------------------------------------------------------------------------------------------------------------------
# The comparison

MEASURES = (
    # key, heading, format
    ("export_seconds", "export s", "{:.1f}"),
    ("to_queryable_s", "to queryable s", "{:.1f}"),
    ("past_quiet_s", "past quiet s", "{:.1f}"),
    ("last_span_to_queryable_s", "last span->q s", "{:.1f}"),
    ("lone_trace_s", "lone trace s", "{:.2f}"),
    ("disk_bytes_per_span", "disk B/span", "{:,.0f}"),
    ("peak_rss_mb", "peak RSS MB", "{:,.0f}"),
    ("peak_pss_mb", "peak PSS MB", "{:,.0f}"),
)
RATIOS = (
    ("to_queryable_s", "time to all queryable"),
    ("past_quiet_s", "time past the quiet window"),
    ("disk_bytes_per_span", "disk per span"),
    ("peak_rss_mb", "peak RSS"),
    ("peak_pss_mb", "peak PSS"),
)


def _median(turns: list[dict[str, Any]], key: str) -> float | None:
    values = [float(t[key]) for t in turns if t.get(key) is not None]
    return statistics.median(values) if values else None


def compare(args: argparse.Namespace) -> dict[str, Any]:
    venv = args.phoenix_venv.expanduser()
    version = ensure_phoenix(venv)
    broker = os.environ.get("N17Q_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15")
    spans = make_spans(args.spans, args.per_trace)
    lone = make_spans(args.per_trace, args.per_trace)
    work = Path(tempfile.mkdtemp(prefix="n17q-compare-phoenix-"))
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            order = ("phoenix", "n17q") if i % 2 == 0 else ("n17q", "phoenix")
            turns: dict[str, dict[str, Any]] = {}
            for system in order:
                print(f"round {i + 1}/{args.rounds}: {system} ...", file=sys.stderr, flush=True)
                if system == "phoenix":
                    turns[system] = phoenix_turn(venv, spans, lone, work)
                else:
                    turns[system] = n17q_turn(spans, lone, work, args.quiet_s, broker)
            rounds.append({"round": i + 1, "order": list(order), **turns})
        m = machine(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {
        system: {key: _median([r[system] for r in rounds], key) for key, _, _ in MEASURES}
        for system in ("phoenix", "n17q")
    }
    ratios: dict[str, float | None] = {}
    for key, _ in RATIOS:
        ours, theirs = medians["n17q"][key], medians["phoenix"][key]
        ratios[key] = ours / theirs if ours is not None and theirs else None
    return {
        "phoenix_version": version,
        "phoenix_venv": str(venv),
        "spans": len(spans),
        "traces": len({s.context.trace_id for s in spans}),
        "spans_per_trace": args.per_trace,
        "batch": BATCH,
        "quiet_s": args.quiet_s,
        "broker": broker,
        "rounds": rounds,
        "medians": medians,
        "ratios_n17q_over_phoenix": ratios,
        "machine": m,
    }


def _fmt(fmt: str, value: Any) -> str:
    return "-" if value is None else fmt.format(value)


def report(result: dict[str, Any]) -> str:
    head = ["round", "system", *(h for _, h, _ in MEASURES), "refused/503/retries"]
    lines = [head]
    for r in result["rounds"]:
        for system in r["order"]:
            t = r[system]
            errors = (
                f"{t['failed_batches']}/{t['answers_503']}/{t['retries']}"
                if system == "phoenix"
                else f"{t['failed_batches']}/-/-"
            )
            lines.append([str(r["round"]), system, *(_fmt(f, t.get(k)) for k, _, f in MEASURES), errors])
    for system in ("phoenix", "n17q"):
        lines.append(["median", system, *(_fmt(f, result["medians"][system][k]) for k, _, f in MEASURES), ""])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    table = [
        "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        for line in lines
    ]
    ratios = result["ratios_n17q_over_phoenix"]
    ratio_text = "; ".join(f"{label} {_fmt('{:.2f}x', ratios[key])}" for key, label in RATIOS)
    return "\n".join(
        [
            f"Arize Phoenix {result['phoenix_version']} and N17Q's OTLP receiver (Redis), turn about: "
            f"{result['spans']:,} spans in {result['traces']:,} traces of {result['spans_per_trace']}, batches of "
            f"{result['batch']}, N17Q quiet window {result['quiet_s']} s, {len(result['rounds'])} round(s)",
            *table,
            f"N17Q / Phoenix (medians): {ratio_text}",
            "queryable: Phoenix = its GraphQL API counts every span; N17Q = every trace is a run. past quiet: N17Q's "
            "time less its quiet window (Phoenix has none). lone trace: one more trace to the idle server, send to "
            "queryable (N17Q: last span to run, from its database). RSS/PSS: summed over the server's process tree "
            "(N17Q: gunicorn + Celery worker, Redis not counted).",
            machine_line(result["machine"]),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compare_phoenix",
        description="Arize Phoenix and N17Q's OTLP receiver on the same spans, turn about (issue 31).",
    )
    parser.add_argument("--spans", type=int, default=100_000, help="spans sent to each system (default 100,000)")
    parser.add_argument("--per-trace", type=int, default=100, help="spans per trace (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, turn about (default 3)")
    parser.add_argument("--phoenix-venv", type=Path, default=default_venv(), help="Phoenix's own venv")
    parser.add_argument("--quiet-s", type=int, default=30, help="N17Q's quiet window, seconds (default 30)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.spans < args.per_trace or args.per_trace < 1 or args.rounds < 1 or args.quiet_s < 0:
        parser.error("need --spans >= --per-trace >= 1, --rounds >= 1, --quiet-s >= 0")
    # A SIGTERM unwinds like Ctrl-C, so every `finally` stops what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = compare(args)
    print(json.dumps(result, indent=2, default=str) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
