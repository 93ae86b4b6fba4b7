"""A run's search summary (runs.models.RunSummary, issue 38 §3): written with the run at import, computed from the
stored events for a run stored before it (migration 0022, `manage.py run_summaries`). The columns come from
`n17q_engine.run_summary`; the cost from the `N17Q_MODEL_PRICES` table (n17q_engine.pricing) when the run is summed,
so a changed table reprices with `manage.py run_summaries --all`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from django.conf import settings

from n17q_engine.run_summary import SUMMARY_KINDS, SummaryBuilder, summary_values

from .models import Event, Finding, Run, RunSummary

READ_BATCH = 2000
MESSAGES_IN_TEXT = 50  # the finding messages the text search reads of a run (its first)


def price_table() -> Any:
    return getattr(settings, "N17Q_MODEL_PRICES", {}) or {}


def summary_row(
    run: Run,
    built: dict[str, Any],
    *,
    codes: Iterable[str],
    messages: list[str],
    started_at: datetime | None,
) -> RunSummary:
    kind = "replay" if run.parent_id else "imported" if built["converted"] else "recorded"
    values = summary_values(
        run_id=run.run_id,
        title=run.title,
        task_id=run.task_id,
        destinations=run.destinations,
        kind=kind,
        finding_count=run.finding_count,
        error_count=run.error_count,
        built=built,
        codes=list(codes),
        messages=messages,
        table=price_table(),
    )
    return RunSummary(
        run_id=run.pk,
        created_at=run.created_at,
        started_at=started_at,
        final_state=run.final_state,
        scenario=run.scenario_name,
        **values,
    )


def _bodies(run: Run) -> Iterator[dict[str, Any]]:
    """The run's events of the kinds the summary reads, a batch at a time (keyset on seq: the (run, kind, seq)
    index)."""
    for kind in SUMMARY_KINDS:
        last = -1
        while True:
            rows = list(
                Event.objects.filter(run=run, kind=kind, seq__gt=last)
                .order_by("seq")
                .values_list("seq", "body")[:READ_BATCH]
            )
            if not rows:
                break
            for _seq, body in rows:
                yield body
            last = rows[-1][0]


def summary_compute(run: Run) -> RunSummary:
    """The summary of a stored run, from its stored events and findings (not saved)."""
    builder = SummaryBuilder.for_manifest(run.manifest_run)
    for body in _bodies(run):
        builder.add(body)
    codes = Finding.objects.filter(run=run).order_by("code").values_list("code", flat=True).distinct()
    messages = list(Finding.objects.filter(run=run).order_by("id").values_list("message", flat=True)[:MESSAGES_IN_TEXT])
    started = Event.objects.filter(run=run).order_by("seq").values_list("wall_at", flat=True).first()
    return summary_row(run, builder.result(), codes=codes, messages=messages, started_at=started)


def summary_save(summary: RunSummary) -> None:
    RunSummary.objects.update_or_create(
        run_id=summary.run_id,
        defaults={f.name: getattr(summary, f.name) for f in RunSummary._meta.concrete_fields if f.name != "run"},
    )


def summaries_fill(*, run_ids: list[str] | None = None, every: bool = False, limit: int | None = None) -> int:
    """Compute and save the summaries of the runs without one (or `run_ids`, or `every` run): one run at a time, at
    most `limit`; returns how many were written."""
    runs = Run.objects.order_by("id")
    if run_ids:
        runs = runs.filter(run_id__in=run_ids)
    elif not every:
        runs = runs.filter(summary__isnull=True)
    done = 0
    for run in runs.iterator(chunk_size=200):
        summary_save(summary_compute(run))
        done += 1
        if limit is not None and done >= limit:
            break
    return done
