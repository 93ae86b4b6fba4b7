"""The retention sweep as a Celery task, sent by beat (settings.CELERY_BEAT_SCHEDULE, docs/retention.md).

It takes no arguments and holds no state: each run asks the database what is due and claims each blob with a
conditional update, so two sweeps at once, or one sent twice, remove each blob's bytes once and record it once.
"""

from __future__ import annotations

from celery import shared_task
from django.db import close_old_connections

from accounts.audit import audit_via

from .retention import retention_sweep

RETENTION_TASK = "n17q.retention_sweep"


@shared_task(name=RETENTION_TASK, acks_late=True, ignore_result=True)
def retention_sweep_task() -> dict:
    try:
        with audit_via("worker"):
            return retention_sweep(by="worker").as_json()
    finally:
        close_old_connections()
