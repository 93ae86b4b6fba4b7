"""The Django admin for admins: runs and their history are read-only here too."""

from __future__ import annotations

from django.contrib import admin

from console.append_only import ReadOnlyAdmin

from .models import Event, Finding, Run


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "task_id", "mode", "environment", "event_count", "finding_count", "imported_at"]
    list_filter = ["mode", "environment", "final_state"]
    search_fields = ["run_id", "task_id"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["event_id", "kind", "seq", "run"]
    list_filter = ["kind"]
    search_fields = ["event_id"]
    list_select_related = ["run"]
    show_full_result_count = False  # counting every event of every run would be the slow part


@admin.register(Finding)
class FindingAdmin(ReadOnlyAdmin):
    list_display = ["code", "severity", "from_ref", "to_ref", "run"]
    list_filter = ["code", "severity"]
    list_select_related = ["run"]
