"""The Django admin for admins: runs and their history are read-only here too."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet

from console.append_only import ReadOnlyAdmin

from .models import Event, Finding, Run


class PublishedRunsOnly(ReadOnlyAdmin):
    """The only lists of a run's rows across runs: they show the rows of published runs, never those an import in
    slices has written under a run it has not published yet (runs/import_slices.py). The join to the run's row is
    what decides, as for every other read."""

    def get_queryset(self, request: Any) -> QuerySet[Any]:
        return super().get_queryset(request).filter(run__run_id__isnull=False)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "task_id", "mode", "environment", "event_count", "finding_count", "imported_at"]
    list_filter = ["mode", "environment", "final_state"]
    search_fields = ["run_id", "task_id"]


@admin.register(Event)
class EventAdmin(PublishedRunsOnly):
    list_display = ["event_id", "kind", "seq", "run"]
    list_filter = ["kind"]
    search_fields = ["event_id"]
    list_select_related = ["run"]
    show_full_result_count = False  # counting every event of every run would be the slow part


@admin.register(Finding)
class FindingAdmin(PublishedRunsOnly):
    list_display = ["code", "severity", "from_ref", "to_ref", "run"]
    list_filter = ["code", "severity"]
    list_select_related = ["run"]
