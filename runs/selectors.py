"""Reads of the run graph. Writes live in importer.py (and, later, the replay services)."""

from __future__ import annotations

from typing import Any

from n17q_engine.lineage import Finding as LineageFinding
from n17q_engine.lineage import LineageGraph

from .models import Event, Run


def run_get(run_id: str) -> Run:
    return Run.objects.get(run_id=run_id)


def run_lineage_check(run: Run) -> list[LineageFinding]:
    """Re-check a stored run with today's rules, streaming its events in append order."""
    graph = LineageGraph(run.manifest_run)
    for body in Event.objects.filter(run=run).order_by("seq").values_list("body", flat=True).iterator(chunk_size=2000):
        graph.add(body)
    return graph.findings()


def run_lineage_json(run: Run) -> dict[str, Any]:
    return {"run": run.run_id, "findings": [f.to_json() for f in run_lineage_check(run)]}


def run_list(
    *, q: str = "", state: str = "", mode: str = "", environment: str = "", scenario: str = "", findings: str = ""
):
    """Runs for the list page, filtered; one query however many runs match (paginated by the caller)."""
    from django.db.models import Q

    runs = Run.objects.only(
        "run_id",
        "task_id",
        "environment",
        "mode",
        "scenario_name",
        "scenario_version",
        "model_name",
        "model_version",
        "event_count",
        "finding_count",
        "error_count",
        "final_state",
        "imported_at",
        "created_at",
    ).order_by("-imported_at", "-id")
    if q:
        runs = runs.filter(Q(run_id__icontains=q) | Q(task_id__icontains=q))
    if state:
        runs = runs.filter(final_state=state)
    if mode:
        runs = runs.filter(mode=mode)
    if environment:
        runs = runs.filter(environment=environment)
    if scenario:
        runs = runs.filter(scenario_name=scenario)
    if findings == "yes":
        runs = runs.filter(finding_count__gt=0)
    elif findings == "no":
        runs = runs.filter(finding_count=0)
    return runs
