"""The search over runs and their events (issue 38 §3; docs/facts.md "Search over runs").

`run_search` answers the run list's and the API's filters from the per-run summary (runs.models.RunSummary): one
query for the page (keyset on (created_at, run), newest first: no offset), one bounded count (at most COUNT_CAP, said
as "1,000 or more"), and, with a cost filter, one bounded count of the runs the other filters match whose cost is not
evaluated (a cost filter never matches them). `span_search` finds events across runs: the runs are the summary's
(newest first, a window of them a page), their events read by the (run, kind, seq) index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import Case, Q, QuerySet, Value, When
from django.db.models.fields.json import KT
from django.utils import timezone

from .models import Event, RunSummary

PAGE = 50
COUNT_CAP = 1000
# A page of the span search reads the events of at most this many runs, and of more only while their events together
# stay under SPAN_EVENTS_READ (a run of a million events is searched alone).
SPAN_RUNS = 25
SPAN_EVENTS_READ = 100_000
SPAN_ROWS = 200


def _day(d: date, *, end: bool = False) -> datetime:
    at = datetime.combine(d + timedelta(days=1) if end else d, time.min)
    return timezone.make_aware(at, timezone.get_default_timezone())


def cursor_of(summary: RunSummary) -> str:
    return f"{summary.created_at.isoformat()}~{summary.run_id}"


def summaries_filtered(f: dict[str, Any], *, cost: bool = True) -> QuerySet[RunSummary]:
    """The summaries the filters `f` (RunFilterForm's cleaned data) match, unordered; `cost=False` leaves the cost
    filter out (for the count of runs it could not judge)."""
    qs = RunSummary.objects.all()
    if q := (f.get("q") or "").strip():
        qs = qs.filter(text__contains=q.lower())
    if tool := (f.get("tool") or "").strip():
        qs = qs.filter(tools__contains="\n" + tool)
    if model := (f.get("model") or "").strip():
        qs = qs.filter(model_names__contains="\n" + model)
    if code := f.get("code"):
        qs = qs.filter(codes__contains=f"\n{code}\n")
    if kind := f.get("kind"):
        qs = qs.filter(kind=kind)
    if outcome := f.get("outcome"):
        qs = qs.filter(outcome=outcome)
    if f.get("findings") == "yes":
        qs = qs.exclude(outcome=RunSummary.Outcome.CLEAN)
    elif f.get("findings") == "no":
        qs = qs.filter(outcome=RunSummary.Outcome.CLEAN)
    if state := f.get("state"):
        qs = qs.filter(final_state=state)
    if scenario := f.get("scenario"):
        qs = qs.filter(scenario=scenario)
    if mode := f.get("mode"):
        qs = qs.filter(run__mode=mode)
    if environment := f.get("environment"):
        qs = qs.filter(run__environment=environment)
    if f.get("created_from"):
        qs = qs.filter(created_at__gte=_day(f["created_from"]))
    if f.get("created_to"):
        qs = qs.filter(created_at__lt=_day(f["created_to"], end=True))
    if f.get("started_from"):
        qs = qs.filter(started_at__gte=_day(f["started_from"]))
    if f.get("started_to"):
        qs = qs.filter(started_at__lt=_day(f["started_to"], end=True))
    if f.get("tokens_min") is not None:
        qs = qs.filter(tokens__gte=f["tokens_min"])
    if f.get("tokens_max") is not None:
        qs = qs.filter(tokens__lte=f["tokens_max"])
    if cost:
        if f.get("cost_min") is not None:
            qs = qs.filter(cost__gte=f["cost_min"])
        if f.get("cost_max") is not None:
            qs = qs.filter(cost__lte=f["cost_max"])
    return qs


def _after(qs: QuerySet[RunSummary], after: tuple[datetime, int] | None) -> QuerySet[RunSummary]:
    if after is None:
        return qs
    at, pk = after
    return qs.filter(Q(created_at__lt=at) | Q(created_at=at, run_id__lt=pk))


def _bounded_count(qs: QuerySet[RunSummary]) -> int:
    return qs.order_by().values("pk")[: COUNT_CAP + 1].count()


@dataclass
class RunSearch:
    rows: list[RunSummary]
    count: int  # at most COUNT_CAP + 1: more than COUNT_CAP reads "1,000 or more"
    next_after: str | None  # the cursor of the next page, None on the last
    cost_asked: bool = False
    cost_not_evaluated: int = 0  # with a cost filter: runs the other filters match whose cost is not evaluated
    first_page: bool = True
    count_capped: bool = field(init=False)

    def __post_init__(self) -> None:
        self.count_capped = self.count > COUNT_CAP
        if self.count_capped:
            self.count = COUNT_CAP


def run_search(f: dict[str, Any], *, page: int | None = None) -> RunSearch:
    """A page of the runs the filters match (`page` of them, PAGE by default), newest created first, each with its
    run (and the run's source)."""
    page = page or PAGE
    qs = summaries_filtered(f)
    rows = list(
        _after(qs, f.get("after"))
        .select_related("run", "run__parent")
        .defer(
            "usage",
            "text",
            "run__manifest_run",
            "run__facts",
            "run__kind_counts",
            "run__tools",
            "run__destinations",
            "run__parent__manifest_run",
            "run__parent__facts",
            "run__parent__kind_counts",
            "run__parent__tools",
            "run__parent__destinations",
            "run__parent__unevaluated",
        )
        .order_by("-created_at", "-run_id")[: page + 1]
    )
    more = len(rows) > page
    rows = rows[:page]
    cost_asked = f.get("cost_min") is not None or f.get("cost_max") is not None
    not_evaluated = _bounded_count(summaries_filtered(f, cost=False).filter(cost__isnull=True)) if cost_asked else 0
    return RunSearch(
        rows=rows,
        count=_bounded_count(qs),
        next_after=cursor_of(rows[-1]) if more and rows else None,
        cost_asked=cost_asked,
        cost_not_evaluated=min(not_evaluated, COUNT_CAP),
        first_page=f.get("after") is None,
    )


# --- events across runs -------------------------------------------------------------------------------------------


@dataclass
class SpanHit:
    event: Event
    summary: RunSummary

    @property
    def name(self) -> str:
        """The event's tool or model, as it names them ("" for neither)."""
        body = self.event.body if isinstance(self.event.body, dict) else {}
        for key in ("tool", "model"):
            if isinstance(body.get(key), str):
                return body[key]
        return ""


@dataclass
class SpanSearch:
    hits: list[SpanHit]
    runs_read: int
    events_in_runs: int
    truncated: bool  # more than SPAN_ROWS events matched in these runs: the first SPAN_ROWS are shown
    next_after: str | None


MODEL_KINDS = ("model.proposal", "budget.charged")


def span_search(f: dict[str, Any]) -> SpanSearch:
    """Events across runs matching the tool, model, kind and text of `f` (SpanSearchForm's cleaned data): the runs
    whose summary can hold them, newest first, a window of them a page (SPAN_RUNS, SPAN_EVENTS_READ), and their
    matching events in run order then seq, at most SPAN_ROWS. Three queries."""
    tool = (f.get("tool") or "").strip()
    model = (f.get("model") or "").strip()
    kind = f.get("kind") or ""
    text = (f.get("text") or "").strip()
    runs = RunSummary.objects.all()
    if tool:
        runs = runs.filter(tools__contains="\n" + tool)
    if model:
        runs = runs.filter(model_names__contains="\n" + model)
    window = list(
        _after(runs, f.get("after"))
        .select_related("run")
        .only("run_id", "created_at", "run__run_id", "run__title", "run__event_count", "run__model_name")
        .order_by("-created_at", "-run_id")[: SPAN_RUNS + 1]
    )
    more_runs = len(window) > SPAN_RUNS
    window = window[:SPAN_RUNS]
    taken: list[RunSummary] = []
    events_in = 0
    for s in window:
        if taken and events_in + s.run.event_count > SPAN_EVENTS_READ:
            more_runs = True
            break
        taken.append(s)
        events_in += s.run.event_count
    if not taken:
        return SpanSearch(hits=[], runs_read=0, events_in_runs=0, truncated=False, next_after=None)
    events = Event.objects.filter(run_id__in=[s.run_id for s in taken])
    if kind:
        events = events.filter(kind=kind)
    elif tool:
        events = events.filter(kind="tool.call")
    elif model:
        events = events.filter(kind__in=MODEL_KINDS)
    if tool:
        events = events.annotate(tool_name=KT("body__tool")).filter(tool_name__startswith=tool)
    if model:
        events = events.annotate(model_name=KT("body__model")).filter(
            Q(model_name__startswith=model) | Q(model_name__isnull=True, run__model_name__startswith=model)
        )
    if text:
        events = events.filter(body__icontains=text)
    # The window's order (newest run first), then each run's events in seq order.
    place = Case(*(When(run_id=s.run_id, then=Value(i)) for i, s in enumerate(taken)), default=Value(len(taken)))
    found = list(
        events.only("id", "run_id", "seq", "event_id", "kind", "logical_at", "body").order_by(place, "seq")[
            : SPAN_ROWS + 1
        ]
    )
    truncated = len(found) > SPAN_ROWS
    by_run = {s.run_id: s for s in taken}
    return SpanSearch(
        hits=[SpanHit(event=e, summary=by_run[e.run_id]) for e in found[:SPAN_ROWS]],
        runs_read=len(taken),
        events_in_runs=events_in,
        truncated=truncated,
        next_after=cursor_of(taken[-1]) if more_runs and taken else None,
    )
