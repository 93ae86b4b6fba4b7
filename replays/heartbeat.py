"""Worker heartbeats: each Celery worker says it is alive every N17Q_HEARTBEAT_S seconds in the database.

A row per worker name (`WorkerHeartbeat`) rather than a Celery ping from the health endpoint: a ping waits for
every worker's answer on each health request (a second's timeout at best) and needs the broker's broadcast,
which the embedded file broker does poorly; a row costs one indexed read, works with every broker, and still
reads "no worker" when workers are up but cannot reach the database (which is what a replay needs too).

The beating thread runs in the worker's main (prefork parent) process and closes its database connection
after every beat, so that a pool child forked in between never inherits an open connection.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from .models import WorkerHeartbeat

log = logging.getLogger(__name__)


def heartbeat_beat(hostname: str, *, started_at: Any = None) -> None:
    """Record one sign of life of worker `hostname` (this process)."""
    now = timezone.now()
    updated = WorkerHeartbeat.objects.filter(hostname=hostname).update(
        pid=os.getpid(), last_seen_at=now, stopped_at=None, **({"started_at": started_at} if started_at else {})
    )
    if not updated:
        WorkerHeartbeat.objects.update_or_create(
            hostname=hostname,
            defaults={"pid": os.getpid(), "started_at": started_at or now, "last_seen_at": now, "stopped_at": None},
        )


def heartbeat_stop(hostname: str) -> None:
    WorkerHeartbeat.objects.filter(hostname=hostname).update(stopped_at=timezone.now())


class Beating:
    def __init__(self, hostname: str, interval_s: float) -> None:
        self.hostname, self.interval_s = hostname, interval_s
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="n17q-heartbeat", daemon=True)
        self.started_at = timezone.now()

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        first = True
        while not self.stopped.is_set():
            try:
                heartbeat_beat(self.hostname, started_at=self.started_at if first else None)
                first = False
            except Exception:  # the database may be away for a while; the health endpoint will say so
                log.warning("worker %s: heartbeat not recorded", self.hostname, exc_info=True)
            finally:
                connection.close()
            self.stopped.wait(self.interval_s)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=self.interval_s + 5)
        try:
            close_old_connections()
            heartbeat_stop(self.hostname)
        except Exception:
            log.warning("worker %s: stop not recorded", self.hostname, exc_info=True)
        finally:
            connection.close()


_beating: dict[str, Beating] = {}


def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    hostname = getattr(sender, "hostname", None) or f"worker@{os.uname().nodename}"
    beating = Beating(hostname, settings.N17Q_HEARTBEAT_S)
    _beating[hostname] = beating
    beating.start()


def on_worker_shutdown(sender: Any = None, **kwargs: Any) -> None:
    for hostname in list(_beating):
        _beating.pop(hostname).stop()
