"""Approvals for people (issue 39; seed 001): one approval's review surface, and the decisions waiting on a person.

- `approval_surface_of(run, event_id)`: the review surface of an `approval.recorded` (or of a `policy.decision` whose
  outcome is `needs_approval`) as the approver saw it: the run's stored events up to and including that event fed to
  the fact layer, read by `n17q_engine.review_surface` (nothing after it is read but the declaration of the intent
  it approves, when recorded after it: the engine's rule). Queries: the event, the run's parent (its inherited
  required purposes), one per READ_BATCH events before it, that intent, and whether any events follow it.
- `pending_approvals()`: the `needs_approval` decisions no approval of their run answers, across every run (a
  replay's run, paused or not, included), read from each run's stored facts (`approvals.pending`): two queries
  whatever the number of runs, plus a count of the runs whose facts predate this version (not evaluated: said,
  never shown as "nothing pending").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from n17q_engine.facts import FACTS_VERSION
from n17q_engine.review_surface import review_surface

from .facts import facts_builder_upto
from .models import Event, Run

# Runs listed on the pending page (and in one API answer); the count of the rest is said.
PENDING_RUNS_SHOWN = 200
SURFACE_KINDS = ("approval.recorded", "policy.decision")


@dataclass
class ApprovalSurface:
    run: Run
    event: Event
    surface: dict[str, Any]
    events_after: bool  # the recording holds events after it (not read)
    later: dict[str, Any] | None = None  # the run's facts about this approval now (whether it still binds)


def approval_surface_of(run: Run, event_id: str) -> ApprovalSurface | None:
    """The review surface of approval (or `needs_approval` decision) `event_id` in `run`; None when the run holds no
    such event (module docstring)."""
    event = Event.objects.filter(run=run, event_id=event_id, kind__in=SURFACE_KINDS).first()
    if event is None:
        return None
    if event.kind == "policy.decision" and event.body.get("outcome") != "needs_approval":
        return None
    builder = facts_builder_upto(run, event.seq)
    subject = event.body.get("subject")
    declared_later = None
    if isinstance(subject, str) and subject not in builder.intents:
        # an approval recorded before its intent (lineage/review.py): the intent's declaration is what was approved
        declared_later = (
            Event.objects.filter(run=run, event_id=subject, kind="effect.intent", seq__gt=event.seq)
            .values_list("body", flat=True)
            .first()
        )
    surface = review_surface(builder, event_id, declared_later)
    if surface is None:
        return None
    facts = run.facts if isinstance(run.facts, dict) else {}
    later = next((a for a in (facts.get("approvals") or {}).get("items", []) if a.get("id") == event_id), None)
    after = Event.objects.filter(run=run, seq__gt=event.seq).exists()
    return ApprovalSurface(run=run, event=event, surface=surface, events_after=after, later=later)


@dataclass
class PendingRun:
    run: Run
    pending: list[dict[str, Any]]
    count: int
    state: str


@dataclass
class PendingApprovals:
    runs: list[PendingRun] = field(default_factory=list)
    decisions: int = 0
    runs_more: int = 0
    not_evaluated: int = 0  # runs whose stored facts predate FACTS_VERSION: their pending decisions are not known


def pending_approvals() -> PendingApprovals:
    """Every run with a `needs_approval` decision no approval of its own answers, newest first (module docstring)."""
    rows = list(
        Run.objects.filter(facts__version=FACTS_VERSION, facts__approvals__pending_count__gt=0)
        .order_by("-created_at", "-id")
        .only("run_id", "title", "mode", "environment", "created_at", "facts", "parent_run_ref")[
            : PENDING_RUNS_SHOWN + 1
        ]
    )
    found = PendingApprovals()
    for run in rows[:PENDING_RUNS_SHOWN]:
        facts = run.facts or {}
        approvals = facts.get("approvals") or {}
        count = int(approvals.get("pending_count") or 0)
        found.runs.append(
            PendingRun(
                run=run,
                pending=list(approvals.get("pending") or []),
                count=count,
                state=str((facts.get("outcome") or {}).get("state") or ""),
            )
        )
        found.decisions += count
    found.runs_more = max(0, len(rows) - PENDING_RUNS_SHOWN)
    found.not_evaluated = Run.objects.filter(~Q(facts__version=FACTS_VERSION) | Q(facts__isnull=True)).count()
    return found
