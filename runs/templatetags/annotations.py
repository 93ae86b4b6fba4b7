"""The run page's annotations (runs/annotations.py): the run's list and forms, an event's in its detail panel.

Kept in their own includes so the pages that show them add one line each (run_detail.html, _detail.html). Each reads
one bounded query, and none when the run holds no annotation (its kind counts are a column).
"""

from __future__ import annotations

from typing import Any

from django import template

from runs import annotations as annotation_service
from runs.models import Event, Finding, Run

register = template.Library()


@register.inclusion_tag("runs/_annotations.html", takes_context=True)
def run_annotations(context: Any, run: Run) -> dict[str, Any]:
    request = context.get("request")
    rows = annotation_service.run_annotations(run)
    total = annotation_service.annotation_total(run)
    return {
        "run": run,
        "rows": rows,
        "total": total,
        "corrections": sum(1 for a in rows if a.is_correction),
        "can_annotate": annotation_service.can_annotate(getattr(request, "user", None)),
        "csrf_token": context.get("csrf_token"),
        "text_max": annotation_service.TEXT_MAX,
    }


@register.inclusion_tag("runs/_event_annotations.html", takes_context=True)
def event_annotations(context: Any, run: Run, event: Event, findings: Any = ()) -> dict[str, Any]:
    request = context.get("request")
    rows = annotation_service.event_annotations(run, event)
    found = [row.get("finding") if isinstance(row, dict) else row for row in findings or ()]
    return {
        "run": run,
        "event": event,
        "rows": rows,
        "corrections": [a for a in rows if a.is_correction and a.body.get("subject") == event.event_id],
        "findings": [f for f in found if isinstance(f, Finding)],  # the panel's "Findings at this event"
        "fields": annotation_service.correctable_fields(event),
        "can_annotate": annotation_service.can_annotate(getattr(request, "user", None)),
        "csrf_token": context.get("csrf_token"),
        "text_max": annotation_service.TEXT_MAX,
    }
