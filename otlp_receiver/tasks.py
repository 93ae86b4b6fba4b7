"""Celery tasks of the receiver: they take an id and are idempotent (services.trace_finalize claims the trace).

There is no beat scheduler in this project. Due traces are found (1) by the receiver after a request, at most once
per half quiet period, and (2) by a loop each worker starts when it is ready, in the way replays/tasks.py recovers
replays: so a trace becomes a run even when nothing is sent after it. The loop wakes when the next trace falls quiet
(services.sweep_delay: at most half the quiet period, at least 0.2 s), so a trace becomes a run about its quiet
period after its last span, not up to half a period later. Each due trace is sent once (services.traces_enqueue_due
marks it), in tasks of up to FINALIZE_BATCH traces.
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

from .services import FINALIZE_BATCH_TASK, FINALIZE_TASK, sweep_delay, trace_finalize, traces_enqueue_due

log = logging.getLogger(__name__)


@shared_task(name=FINALIZE_TASK, acks_late=True, reject_on_worker_lost=True)
def finalize_trace(trace_pk: int) -> str:
    try:
        with audit_via("worker"):
            return trace_finalize(trace_pk=trace_pk).state
    finally:
        close_old_connections()


@shared_task(name=FINALIZE_BATCH_TASK, acks_late=True, reject_on_worker_lost=True)
def finalize_traces(trace_pks: list[int]) -> dict[str, list[int]]:
    """Each trace of the batch, one after the other; answers the traces by the state they are left in (the
    worker's log line of the task). A trace that fails (not a refusal, which trace_finalize records) is logged and
    left to its lease, and the others go on."""
    states: dict[str, list[int]] = {}
    try:
        with audit_via("worker"):
            for pk in trace_pks:
                try:
                    state = str(trace_finalize(trace_pk=pk).state)
                except Exception:
                    log.exception("trace %s could not be finalised; it is sent again when its claim lapses", pk)
                    state = "failed"
                states.setdefault(state, []).append(pk)
        return states
    finally:
        close_old_connections()


_stop = threading.Event()


def _sweep_loop() -> None:
    while True:
        delay = max(1.0, settings.N17Q_OTLP_QUIET_SECONDS / 2)
        try:
            traces_enqueue_due()
            delay = sweep_delay()
        except Exception:  # a database or broker briefly away must not end the loop
            log.exception("the sweep for traces due to finalise failed; trying again in %s s", delay)
        finally:
            connections.close_all()
        if _stop.wait(delay):
            return


@worker_ready.connect
def _start_sweep(**kwargs: Any) -> None:
    _stop.clear()
    threading.Thread(target=_sweep_loop, name="n17q-otlp-sweep", daemon=True).start()


@worker_shutdown.connect
def _stop_sweep(**kwargs: Any) -> None:
    _stop.set()
