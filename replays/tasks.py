"""Celery tasks: they take ids and are idempotent (a task run twice does the work once).

The worker's recovery pass (`replays_recover`) runs in the worker's main process when it is ready and then
every N17Q_REPLAY_RECOVERY_S, so a replay whose worker died is picked up again without a scheduler.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections, connections

from accounts.audit import audit_via

from .services import REPLAY_TASK, replay_execute, replays_recover

log = logging.getLogger(__name__)


@shared_task(name=REPLAY_TASK, acks_late=True, reject_on_worker_lost=True)
def replay_run(replay_id: int) -> str:
    try:
        with audit_via("worker"):
            return replay_execute(replay_id).state
    finally:
        close_old_connections()


_stop = threading.Event()


def _recovery_loop() -> None:
    while True:
        try:
            replays_recover()
        except Exception:  # a database that is briefly away must not end the loop
            log.exception("replay recovery pass failed; trying again in %s s", settings.N17Q_REPLAY_RECOVERY_S)
        finally:
            connections.close_all()
        if _stop.wait(settings.N17Q_REPLAY_RECOVERY_S):
            return


@worker_ready.connect
def _start_recovery(**kwargs: Any) -> None:
    _stop.clear()
    threading.Thread(target=_recovery_loop, name="n17q-replay-recovery", daemon=True).start()


@worker_shutdown.connect
def _stop_recovery(**kwargs: Any) -> None:
    _stop.set()
