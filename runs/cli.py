"""What the run commands share: the RUN argument read the same way by each (export_run, annotate_run, assess_run)."""

from __future__ import annotations

from django.core.management.base import CommandError

from n17q_engine.bundle import is_run_id

from .models import Run


def stored_run(run_id: str) -> Run:
    """The stored run named on the command line, or one clear CommandError line: not a run id, or no such run."""
    if not is_run_id(run_id):
        raise CommandError(f"{run_id!r} is not a run id (1-200 characters, no '/', no spaces)")
    run = Run.objects.filter(run_id=run_id).first()
    if run is None:
        raise CommandError(f"no run with id {run_id!r}")
    return run
