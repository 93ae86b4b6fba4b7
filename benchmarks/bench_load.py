"""Load and fault drills on the production shape, on loopback: `python -m benchmarks.run load`.

A stack of its own: a fresh PostgreSQL database (on the server at N17Q_BENCH_PG_URL, default
postgres://postgres@127.0.0.1:5432/postgres; dropped at the end), a private redis-server on port 18790
(noeviction, append-only file) in a temporary folder, gunicorn with docker/gunicorn.conf.py on 127.0.0.1:18780
(production settings, static files collected) and two Celery worker processes (prefork) running real sandboxed
replays. Then:

1. **load**: 20 concurrent clients, each signed in (session) and holding a harness token, make a bounded number
   of requests drawn from a fixed mix: the run page of a demo run (first opened, and focused on an event), the
   run list, one run through the API, and the import of a small bundle through the API (each a new run).
   p50 / p95 per kind and overall, and every error (status not the expected one, or no answer).
2. **worker-kill drill**: replays launched as an operator would, the same load running meanwhile; once replays
   are running, one worker is killed with SIGKILL (its whole process group), and a replacement started.
3. **Redis-restart drill**: replays launched, the load running; Redis is shut down (its append-only file kept)
   and started again on the same port.

After each drill: every replay reached an end state (lost = still queued or running when the drill's time is
up), no replay imported more than one run (duplicated), every finished replay of one source and mode has the
same number of events (a duplicated event would differ), no LIN012 (duplicate consequence) in a replay's run,
and every import the load was answered 201 for is stored once with exactly its events.

Nothing here is judged PASS or FAIL on timings (a shared machine); lost and duplicated counts are (0 each).
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path
from typing import Any

from .common import REPO, RESULT_MARK, Config, row

WEB_PORT = 18780
REDIS_PORT = 18790
CLIENTS = 20
LOAD_REQUESTS_PER_CLIENT = 40
DRILL_REPLAYS = 12
DRILL_TIMEOUT_S = 240
DEMO_RUNS = ["run-003-review-request", "run-001-recorded", "run-000-recorded"]
REPLAY_MIX = [
    {"run": "run-001-recorded", "mode": "rerun"},
    {"run": "run-003-review-request", "mode": "reconstruction"},
    {"run": "run-003-review-request", "mode": "rerun"},
    {"run": "run-000-recorded", "mode": "rerun"},
]
EXAMPLE = REPO / "tests" / "data" / "example-bundle"


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] if ordered else float("nan")


class Stack:
    """The processes and the database of one benchmark run; everything is stopped and removed on exit."""

    def __init__(self, pg_url: str) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="n17q-bench-load-"))
        self.pg_admin_url = pg_url
        parsed = urllib.parse.urlparse(pg_url)
        self.db_name = f"n17q_bench_load_{os.getpid()}"
        self.db_url = urllib.parse.urlunparse(parsed._replace(path=f"/{self.db_name}"))
        self.redis_url = f"redis://127.0.0.1:{REDIS_PORT}/0"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    # --- environment -------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("N17Q_", "DATABASE_URL", "REDIS_URL"))}
        env.update(
            DJANGO_SETTINGS_MODULE="n17q_site.settings",
            PYTHONPATH=str(REPO),
            N17Q_DEBUG="0",
            N17Q_SECRET_KEY="n17q-benchmark-only-" + "x" * 40,
            N17Q_ALLOWED_HOSTS="127.0.0.1,localhost",
            # Plain HTTP on loopback: no TLS proxy in front of this gunicorn.
            N17Q_SSL_REDIRECT="0",
            N17Q_SECURE_COOKIES="0",
            N17Q_DATA_DIR=str(self.tmp / "data"),
            N17Q_STATIC_ROOT=str(self.tmp / "static"),
            DATABASE_URL=self.db_url,
            REDIS_URL=self.redis_url,
            N17Q_LOG_LEVEL="WARNING",
            N17Q_LOG_FORMAT="json",
            N17Q_HEARTBEAT_S="2",
            # Drill timings: a dead worker's replay is taken up again within seconds, not the production hour.
            N17Q_REPLAY_TIME_LIMIT_S="50",
            N17Q_REPLAY_TIMEOUT_S="40",
            N17Q_VISIBILITY_TIMEOUT_S="60",
            N17Q_REPLAY_LEASE_S="8",
            N17Q_REPLAY_RECOVERY_S="3",
            N17Q_REPLAY_REQUEUE_S="20",
        )
        return env

    def child(self, *args: str, timeout: float = 600) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks._load_child", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        for line in proc.stdout.splitlines():
            if line.startswith(RESULT_MARK):
                return json.loads(line[len(RESULT_MARK) :])
        raise RuntimeError(f"load child {args[0]} failed (exit {proc.returncode}): {proc.stderr[-3000:]}")

    def manage(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "manage.py", *args], cwd=REPO, env=self.env(), check=True, capture_output=True, timeout=900
        )

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        with open(log, "ab") as out:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                args,
                cwd=REPO,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches the pool children too
            )
        self.procs[name] = proc
        return proc

    # --- services ----------------------------------------------------------------------------------------

    def create_database(self) -> None:
        import psycopg

        with psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db_name}"')

    def drop_database(self) -> None:
        import psycopg

        with contextlib.suppress(Exception), psycopg.connect(self.pg_admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')

    def start_redis(self) -> None:
        (self.tmp / "redis").mkdir(exist_ok=True)
        self.start(
            "redis",
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(REDIS_PORT),
                "--dir",
                str(self.tmp / "redis"),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--maxmemory",
                "256mb",
                "--maxmemory-policy",
                "noeviction",
            ],
        )
        self._wait_redis(up=True)

    def _wait_redis(self, *, up: bool, timeout: float = 20) -> None:
        import redis

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                redis.Redis(port=REDIS_PORT, socket_connect_timeout=0.5).ping()
                if up:
                    return
            except redis.RedisError:
                if not up:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"redis on {REDIS_PORT} did not come {'up' if up else 'down'}")

    def restart_redis(self, down_s: float) -> dict[str, float]:
        started = time.monotonic()
        subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "shutdown"], capture_output=True, timeout=30)
        self.procs["redis"].wait(timeout=30)
        down_at = time.monotonic()
        time.sleep(down_s)
        self.start_redis()
        return {"shutdown_s": round(down_at - started, 2), "down_s": round(time.monotonic() - down_at, 2)}

    def start_web(self) -> None:
        env_bind = f"127.0.0.1:{WEB_PORT}"
        self.start(
            "web",
            [
                str(Path(sys.executable).with_name("gunicorn")),
                "--config",
                "docker/gunicorn.conf.py",
                "--bind",
                env_bind,
                "--workers",
                "3",
                "n17q_site.wsgi:application",
            ],
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                status, _, _ = request("GET", "/health/?check=database,broker")
                if status == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("gunicorn did not become healthy: " + self.logs["web"].read_text()[-2000:])

    def start_worker(self, name: str) -> None:
        self.start(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "n17q_site",
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                f"--hostname={name}@bench",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
            ],
        )

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# --- HTTP -------------------------------------------------------------------------------------------------


def request(
    method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", WEB_PORT, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Host": "127.0.0.1", **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _cookies(headers_list: list[tuple[str, str]]) -> dict[str, str]:
    jar = {}
    for key, value in headers_list:
        if key.lower() == "set-cookie":
            name, _, rest = value.partition("=")
            jar[name.strip()] = rest.split(";", 1)[0]
    return jar


def sign_in(username: str, password: str) -> str:
    """A session cookie for `username`, through the login page as a browser would."""
    conn = http.client.HTTPConnection("127.0.0.1", WEB_PORT, timeout=60)
    conn.request("GET", "/login/", headers={"Host": "127.0.0.1"})
    page = conn.getresponse()
    jar = _cookies(page.getheaders())
    html = page.read().decode()
    conn.close()
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    if found is None:
        raise RuntimeError("the login page holds no CSRF token")
    token = found.group(1)
    form = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token})
    conn = http.client.HTTPConnection("127.0.0.1", WEB_PORT, timeout=60)
    conn.request(
        "POST",
        "/login/",
        body=form,
        headers={
            "Host": "127.0.0.1",
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": f"csrftoken={jar['csrftoken']}",
            "Referer": f"http://127.0.0.1:{WEB_PORT}/login/",
        },
    )
    answer = conn.getresponse()
    jar.update(_cookies(answer.getheaders()))
    answer.read()
    conn.close()
    if answer.status != 302 or "sessionid" not in jar:
        raise RuntimeError(f"sign-in of {username} answered {answer.status}")
    return f"sessionid={jar['sessionid']}"


def bundle_zip(run_id: str) -> bytes:
    """The example bundle (9 events) under a new run id, zipped."""
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    manifest["run"]["id"] = run_id
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", json.dumps(manifest))
        zf.writestr("events.jsonl", (EXAMPLE / "events.jsonl").read_bytes())
        for blob in (EXAMPLE / "blobs" / "sha256").iterdir():
            zf.writestr(f"blobs/sha256/{blob.name}", blob.read_bytes())
    return buffer.getvalue()


def multipart(field: str, filename: str, data: bytes) -> tuple[bytes, str]:
    boundary = "n17q-bench-" + os.urandom(8).hex()
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
            "Content-Type: application/zip\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


EXAMPLE_EVENTS = sum(1 for line in (EXAMPLE / "events.jsonl").read_text().splitlines() if line.strip())
FOCUS = {
    "run-003-review-request": "e-003-intent-review-request",
    "run-001-recorded": None,
    "run-000-recorded": None,
}


class Client(threading.Thread):
    """One simulated user: a session for pages, a harness token for the API, a fixed seeded mix."""

    def __init__(self, n: int, cookie: str, token: str, *, phase: str, max_requests: int, stop: threading.Event):
        super().__init__(name=f"load-{n}", daemon=True)
        self.n, self.cookie, self.token, self.phase = n, cookie, token, phase
        self.max_requests, self.stop = max_requests, stop
        self.random = random.Random(f"{phase}-{n}")
        self.samples: list[tuple[str, float, bool, str]] = []  # kind, seconds, ok, error
        self.imported: dict[str, int] = {}

    def one(self, i: int) -> None:
        headers: dict[str, str]
        roll = self.random.random()
        run = self.random.choice(DEMO_RUNS)
        if roll < 0.25:
            kind, method, path, headers, body, expect = "run page", "GET", f"/runs/{run}/", {}, None, 200
        elif roll < 0.40:
            focus = FOCUS.get(run) or ""
            kind, method, path, headers, body, expect = (
                "run page focused",
                "GET",
                f"/runs/{run}/?focus={focus}",
                {},
                None,
                200,
            )
        elif roll < 0.60:
            kind, method, path, headers, body, expect = "run list", "GET", "/", {}, None, 200
        elif roll < 0.75:
            kind, method, path, headers, body, expect = "api run", "GET", f"/api/v1/runs/{run}/", {}, None, 200
        else:
            run_id = f"load-{self.phase}-{self.n:02d}-{i:04d}"
            body, content_type = multipart("bundle", f"{run_id}.zip", bundle_zip(run_id))
            kind, method, path, headers, expect = "import", "POST", "/api/v1/runs/", {"Content-Type": content_type}, 201
        if kind in ("api run", "import"):
            headers["Authorization"] = f"Token {self.token}"
        else:
            headers["Cookie"] = self.cookie
        started = time.perf_counter()
        error = ""
        try:
            status, _, content = request(method, path, body=body, headers=headers)
            ok = status == expect
            if not ok:
                error = f"{kind}: {status} {content[:160]!r}"
            elif kind == "import":
                self.imported[json.loads(content)["run"]] = EXAMPLE_EVENTS
        except OSError as exc:
            ok, error = False, f"{kind}: {type(exc).__name__}: {exc}"
        self.samples.append((kind, time.perf_counter() - started, ok, error))

    def run(self) -> None:
        for i in range(self.max_requests):
            if self.stop.is_set():
                return
            self.one(i)


def run_load(sessions: list[str], tokens: list[str], *, phase: str, max_requests: int, stop: threading.Event):
    clients = [
        Client(n, sessions[n], tokens[n], phase=phase, max_requests=max_requests, stop=stop) for n in range(CLIENTS)
    ]
    started = time.perf_counter()
    for c in clients:
        c.start()
    return clients, started


def summarize(clients: list[Client], wall_s: float) -> dict[str, Any]:
    samples = [s for c in clients for s in c.samples]
    kinds: dict[str, list[float]] = {}
    for kind, seconds, _ok, _error in samples:
        kinds.setdefault(kind, []).append(seconds)
    errors = [s[3] for s in samples if not s[2]]
    every = [s[1] for s in samples]
    return {
        "requests": len(samples),
        "wall_s": round(wall_s, 2),
        "throughput_rps": round(len(samples) / wall_s, 1) if wall_s else None,
        "p50_ms": round(_pct(every, 0.5) * 1000, 1),
        "p95_ms": round(_pct(every, 0.95) * 1000, 1),
        "errors": len(errors),
        "error_samples": errors[:10],
        "by_kind": {
            kind: {
                "n": len(values),
                "p50_ms": round(_pct(values, 0.5) * 1000, 1),
                "p95_ms": round(_pct(values, 0.95) * 1000, 1),
                "mean_ms": round(statistics.fmean(values) * 1000, 1),
            }
            for kind, values in sorted(kinds.items())
        },
        "imported": {run: n for c in clients for run, n in c.imported.items()},
    }


def drill(stack: Stack, sessions, tokens, *, name: str, fault) -> dict[str, Any]:
    """Replays launched, the load running, a fault injected; then everything counted."""
    spec = [REPLAY_MIX[i % len(REPLAY_MIX)] for i in range(DRILL_REPLAYS)]
    ids = stack.child("launch", json.dumps(spec))["ids"]
    stop = threading.Event()
    clients, started = run_load(sessions, tokens, phase=name, max_requests=10_000, stop=stop)
    fault_info: dict[str, Any] = {}
    deadline = time.monotonic() + DRILL_TIMEOUT_S
    try:
        fault_info = fault(ids)
        while time.monotonic() < deadline:
            states = stack.child("states", json.dumps(ids))["states"]
            if all(s not in ("queued", "running") for s in states.values()):
                break
            time.sleep(2)
        fault_info["replays_done_after_s"] = round(time.monotonic() - (deadline - DRILL_TIMEOUT_S), 1)
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=120)
    load = summarize(clients, time.perf_counter() - started)
    (stack.tmp / f"{name}-ids.json").write_text(json.dumps(ids))
    (stack.tmp / f"{name}-imported.json").write_text(json.dumps(load["imported"]))
    checked = stack.child("verify", str(stack.tmp / f"{name}-ids.json"), str(stack.tmp / f"{name}-imported.json"))
    load.pop("imported")
    return {"fault": fault_info, "load": load, "checked": checked}


def run(config: Config) -> dict[str, Any]:
    pg_url = os.environ.get("N17Q_BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not shutil.which("redis-server"):
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    stack = Stack(pg_url)
    details: dict[str, Any] = {"clients": CLIENTS, "web": f"127.0.0.1:{WEB_PORT}", "redis_port": REDIS_PORT}
    try:
        stack.create_database()
        stack.manage("migrate", "--noinput")
        stack.manage("collectstatic", "--noinput")
        prepared = stack.child("prepare", str(CLIENTS))
        stack.start_redis()
        stack.start_web()
        stack.start_worker("w1")
        stack.start_worker("w2")
        sessions = [sign_in(u, prepared["password"]) for u in prepared["users"]]
        tokens = prepared["tokens"]

        # 1. the bounded load test
        stop = threading.Event()
        clients, started = run_load(sessions, tokens, phase="load", max_requests=LOAD_REQUESTS_PER_CLIENT, stop=stop)
        for c in clients:
            c.join(timeout=600)
        load = summarize(clients, time.perf_counter() - started)
        (stack.tmp / "load-imported.json").write_text(json.dumps(load["imported"]))
        (stack.tmp / "none.json").write_text("[]")
        load["checked"] = stack.child("verify", str(stack.tmp / "none.json"), str(stack.tmp / "load-imported.json"))
        load.pop("imported")
        details["load"] = load

        # 2. the worker-kill drill
        def kill_a_worker(ids: list[int]) -> dict[str, Any]:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                states = stack.child("states", json.dumps(ids))["states"]
                if any(s == "running" for s in states.values()):
                    break
                time.sleep(0.5)
            running = sum(1 for s in states.values() if s == "running")
            stack.kill("w1")
            killed_at = time.monotonic()
            time.sleep(2)
            stack.start_worker("w1b")
            return {
                "killed": "w1 (SIGKILL to its process group)",
                "running_when_killed": running,
                "replacement_started_after_s": round(time.monotonic() - killed_at, 1),
            }

        details["worker_kill"] = drill(stack, sessions, tokens, name="kill", fault=kill_a_worker)

        # 3. the Redis-restart drill
        def restart_redis(ids: list[int]) -> dict[str, Any]:
            time.sleep(1.0)
            return {"restart": stack.restart_redis(down_s=3.0)}

        details["redis_restart"] = drill(stack, sessions, tokens, name="redis", fault=restart_redis)
    finally:
        stack.stop_all()
        stack.drop_database()
        logs = {name: path.read_text()[-1500:] for name, path in stack.logs.items() if path.exists()}
        details["log_tails"] = logs
        shutil.rmtree(stack.tmp, ignore_errors=True)

    rows = []
    load = details["load"]
    rows.append(
        row(
            f"load, {CLIENTS} clients x {LOAD_REQUESTS_PER_CLIENT} requests",
            "report p50/p95, 0 errors",
            f"p50 {load['p50_ms']:.0f} ms, p95 {load['p95_ms']:.0f} ms, {load['errors']} errors of "
            f"{load['requests']} ({load['throughput_rps']} req/s)",
            load["errors"] == 0,
            Config(),
        )
    )
    for kind, figures in load["by_kind"].items():
        rows.append(
            row(
                f"  {kind}",
                "",
                f"p50 {figures['p50_ms']:.0f} ms, p95 {figures['p95_ms']:.0f} ms (n={figures['n']})",
                None,
                Config(),
            )
        )
    for key, title in (("worker_kill", "worker-kill drill"), ("redis_restart", "Redis-restart drill")):
        d = details[key]
        c = d["checked"]
        lost = len(c["lost"])
        duplicated = (
            c["duplicated_replay_runs"]
            + len(c["inconsistent_replay_event_counts"])
            + c["duplicate_consequence_findings"]
            + len(c["imports_wrong_event_count"])
            + c["imports_duplicate_seq"]
        )
        rows.append(
            row(
                f"{title} under load",
                "0 lost, 0 duplicated",
                f"{c['replays']} replays {c['by_state']}: {lost} lost, {duplicated} duplicated; "
                f"{c['imports_acknowledged']} imports acknowledged, {len(c['imports_missing'])} missing; "
                f"load p50 {d['load']['p50_ms']:.0f} ms, p95 {d['load']['p95_ms']:.0f} ms, "
                f"{d['load']['errors']} errors of {d['load']['requests']}",
                lost == 0 and duplicated == 0 and not c["imports_missing"],
                Config(),
            )
        )
    return {"rows": rows, "details": details, "notes": []}
