"""A real Celery worker process on real Redis, for the replay integration tests.

The Redis URL comes from REDIS_TEST_URL (the Makefile sets it from REDIS_TEST_URL); each test session
sends to a queue of its own (settings.N17Q_REPLAY_QUEUE), so two test runs on one Redis never take each
other's replays. The worker opens the test database (a file for SQLite, the test database for PostgreSQL)
and the test's blob store, and is started in a session of its own so a test can SIGKILL all of it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection

from tests.conftest import need_service, xdist_worker_index

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


def redis_up(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


def database_url() -> str:
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        name = str(s["NAME"])
        if name.startswith("file:") or ":memory:" in name:
            pytest.fail("the test database is in memory; a worker process cannot open it (see settings TEST NAME)")
        return f"sqlite:///{name}"
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += f":{quote(s['PASSWORD'], safe='')}"
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Worker:
    """One `celery worker` process (prefork, concurrency 1 unless asked) for one queue."""

    def __init__(
        self, *, broker: str, queue: str, data_dir: Path, env: dict[str, str] | None = None, concurrency: int = 1
    ):
        self.broker, self.queue, self.data_dir = broker, queue, data_dir
        self.extra_env = env or {}
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log = data_dir / f"worker-{uuid.uuid4().hex[:6]}.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("N17Q_", "DATABASE_URL", "REDIS_URL"))}
        env.update(
            DJANGO_SETTINGS_MODULE="n17q_site.settings",
            N17Q_DATA_DIR=str(self.data_dir),
            DATABASE_URL=database_url(),
            REDIS_URL=self.broker,
            N17Q_REPLAY_QUEUE=self.queue,
            N17Q_ALLOW_DEGRADED_ISOLATION=os.environ.get("N17Q_ALLOW_DEGRADED_ISOLATION", "0"),
            N17Q_REPLAY_LEASE_S="30",  # a killed worker is found by its pid at once; the lease is for other hosts
            N17Q_REPLAY_RECOVERY_S="1",
            N17Q_REPLAY_REQUEUE_S="3",
            N17Q_REPLAY_TIMEOUT_S="60",
            N17Q_REPLAY_TIME_LIMIT_S="120",
            N17Q_VISIBILITY_TIMEOUT_S="180",
            N17Q_LOG_LEVEL="INFO",
        )
        env.update(self.extra_env)
        return env

    def start(self, *, wait: bool = True) -> Worker:
        self.starts += 1
        name = f"n17q-test-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
        argv = [
            str(Path(sys.executable).parent / "celery"),
            "-A",
            "n17q_site",
            "worker",
            "--pool=prefork",
            f"--concurrency={self.concurrency}",
            "--loglevel=INFO",
            "-n",
            name,
            "-Q",
            self.queue,
            "--without-gossip",
            "--without-mingle",
        ]
        out = open(self.log, "ab")  # noqa: SIM115 - the worker writes to it for its whole life
        self.proc = subprocess.Popen(
            argv, cwd=REPO, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        marker = b"ready."
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited {self.proc.returncode}:\n{self.tail()}")
            if self.log.exists() and self.log.read_bytes().count(marker) >= self.starts:
                return
            time.sleep(0.1)
        raise AssertionError(f"the worker was not ready within {timeout} s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole worker: the main process and its pool (the sandbox dies with its parent)."""
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


class PrivateRedis:
    """A redis-server of this test's own, on a loopback port of helper C's range, without persistence."""

    def __init__(self, port: int, workdir: Path):
        self.port, self.workdir = port, workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        server = shutil.which("redis-server")
        need_service("redis-server", server is not None, "apt-get install redis-server")
        assert server is not None  # need_service failed or skipped otherwise
        self.proc = subprocess.Popen(
            [
                server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while not redis_up(self.url):
            if time.monotonic() > deadline:
                raise AssertionError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def celery_to(broker: str, settings: Any, queue: str) -> None:
    """Point this (test) process's Celery app at `broker`, sending replays to `queue`."""
    from kombu import pools

    from n17q_site.celery import app

    settings.N17Q_REPLAY_QUEUE = queue
    app.conf.broker_url = broker
    app.conf.broker_transport_options = {"visibility_timeout": 180}
    # Fresh pools: another test may have closed this broker's pool in kombu's global registry (force_close_all),
    # and a closed pool refuses every later send ("Acquire on closed pool").
    pools.reset()
    app._after_fork()


def free_port(start: int) -> int:
    """A free loopback port of helper C's range; each xdist worker searches a range of its own (start + 100 x its
    index), so two workers never pick the same port at the same moment."""
    first = start + 100 * xdist_worker_index()
    for port in range(first, first + 50):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise AssertionError("no free port in helper C's range")
