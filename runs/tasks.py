"""Celery tasks: they take ids and are idempotent (a task run twice does the work once)."""

from __future__ import annotations

from celery import shared_task

from .audit import audit_via
from .replays import replay_execute


@shared_task(name="runs.replay_run", acks_late=True)
def replay_run(replay_id: int) -> str:
    with audit_via("worker"):
        return replay_execute(replay_id).state
