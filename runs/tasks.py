"""The runs app's periodic sweeps as Celery tasks, sent by beat (settings.CELERY_BEAT_SCHEDULE).

The retention sweep (docs/retention.md) takes no arguments and holds no state: each run asks the database what is
due and claims each blob with a conditional update, so two sweeps at once, or one sent twice, remove each blob's
bytes once and record it once. The sweep of abandoned imports (runs/import_slices.py) takes each crashed import's
record over with a conditional update the same way, so its rows are removed once.
"""

from __future__ import annotations

from celery import shared_task
from django.db import close_old_connections

from accounts.audit import audit_via

from .import_slices import sweep_abandoned_imports
from .retention import retention_sweep

RETENTION_TASK = "n17q.retention_sweep"
ABANDONED_IMPORTS_TASK = "n17q.abandoned_imports_sweep"


@shared_task(name=RETENTION_TASK, acks_late=True, ignore_result=True)
def retention_sweep_task() -> dict:
    try:
        with audit_via("worker"):
            return retention_sweep(by="worker").as_json()
    finally:
        close_old_connections()


@shared_task(name=ABANDONED_IMPORTS_TASK, acks_late=True, ignore_result=True)
def abandoned_imports_sweep_task() -> dict:
    """The rows of imports that crashed while writing in slices (SQLite), removed; the next import does it too."""
    try:
        return {"removed": sweep_abandoned_imports()}
    finally:
        close_old_connections()
