"""The run page's reads: the verdict, the trace and its detail panel, a focus and its causal neighbourhood,
the lineage picture.

Every read here is windowed. However many events a run has, the page issues the same fixed set of
queries, each bounded by a LIMIT: the trace shows a window of the chosen families, the detail panel one
event, and the neighbourhood walk takes a fixed number of hops with a cap on how much it collects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .annotations import corrected_events
from .assessments import Dimension, run_assessments
from .event_detail import EventDetail, digests_in, event_detail_build
from .facts import facts_of
from .focus import Focus, focus_resolve
from .lineage_picture import Picture, picture_build
from .models import MaskedSecret, Run
from .retention import Expiry, run_blob_expiries
from .span_tree import SpanTree, tree_build
from .trace import FAMILIES, Trace, facets_parse, trace_narrowed, trace_window
from .verdict import Verdict, verdict_build


@dataclass
class RunPage:
    run: Run
    verdict: Verdict
    focus: Focus | None
    trace: Trace
    detail: EventDetail | None
    selected_ref: str  # the event asked for in the detail panel ("" for none)
    picture: Picture
    narrow: str  # how the trace treats events outside the focus: "dim" or "hide"
    finding_id: int | None = None
    masked_secrets: list[MaskedSecret] = field(default_factory=list)
    # The run's blobs whose bytes retention removed (runs/retention.py), said in the summary and on each trace row
    # naming one, not only in that event's detail panel (issue 38's tour).
    expired: dict[str, Expiry] = field(default_factory=dict)
    # The trace's window as a tree (`?view=tree`, runs/span_tree.py), None in the list view.
    tree: SpanTree | None = None

    @property
    def view(self) -> str:
        return "tree" if self.tree is not None else "list"

    @property
    def expired_classes(self) -> str:
        return ", ".join(sorted({e.retention_class for e in self.expired.values()}))

    @property
    def masked_on_arrival(self) -> bool:
        """Whether some were masked by the trace receiver as its requests arrived, before the bundle was made."""
        return any(m.place == MaskedSecret.Place.RECEIVED for m in self.masked_secrets)

    @property
    def missing_ref(self) -> str:
        """The event asked for in the detail panel when the run holds none by that id."""
        return self.selected_ref if self.selected_ref and self.detail is None else ""

    @cached_property
    def assessments(self) -> list[Dimension]:
        """The qualitative dimensions (runs/assessments.py), each assessed or "not reviewed"; beside the verdict."""
        return run_assessments(self.run)

    @property
    def retry(self) -> dict[str, Any] | None:
        """For a focused attempt that retried an earlier one: what carried forward into it and what became stale,
        evidence by evidence (the run's facts, n17q_engine/carry_forward.py). None for any other focus."""
        focus = self.focus
        if focus is None or focus.event is None or focus.event.kind != "attempt.started":
            return None
        attempt = focus.event.body.get("attempt")
        for retry in (facts_of(self.run).get("retries") or {}).get("retries", []):
            if retry.get("attempt") == attempt:
                return retry
        return None

    @property
    def facets(self) -> list[dict[str, Any]]:
        counts = self.run.kind_counts or {}
        return [
            {"key": f.key, "title": f.title, "glyph": f.glyph, "count": sum(counts.get(k, 0) for k in f.kinds)}
            for f in FAMILIES
        ]


def _seq_param(value: Any) -> int:
    """A seq from a query parameter; anything that is not a non-negative integer means the start."""
    try:
        return max(0, min(int(value), 10**9))
    except (TypeError, ValueError):
        return 0


MASKED_SECRETS_SHOWN = 200


def _id_param(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if 0 < number < 2**63 else None


def page_build(
    run: Run,
    *,
    focus_ref: str = "",
    event_ref: str = "",
    facets: list[str] | None = None,
    query: str = "",
    trace_from: Any = None,
    narrow: str = "dim",
    picture_start: Any = None,
    finding: Any = None,
    view: str = "",
) -> RunPage:
    """Everything the run page shows, in a fixed set of bounded queries whatever the run's size."""
    focus = focus_resolve(run, focus_ref[:200]) if focus_ref else None
    chosen = facets_parse(facets or [])
    narrow = "hide" if narrow == "hide" else "dim"
    if focus is not None and focus.event is not None and narrow == "hide":
        trace = trace_narrowed(run, focus.events, facets=chosen)
    else:
        trace = trace_window(run, facets=chosen, query=query, from_seq=_seq_param(trace_from))
    verdict = verdict_build(run)
    bad: dict[str, list[str]] = {}
    for group in verdict.groups:
        for f in group.findings:
            for ref in (f.from_ref, f.to_ref):
                bad.setdefault(ref, []).append(f.code)
    in_focus = focus.neighbourhood if focus else set()
    for row in trace.rows:
        row.in_focus = row.event.event_id in in_focus
        row.is_focus = focus is not None and focus.event is not None and row.event.pk == focus.event.pk
        row.selected = row.event.event_id == event_ref
        row.finding_codes = sorted(set(bad.get(row.event.event_id, [])))
    # A correction is shown beside the event it corrects (issue 38, runs/annotations.py), never in its place.
    corrected = corrected_events(run, [row.event.pk for row in trace.rows])
    for row in trace.rows:
        if row.event.pk in corrected:
            row.badges = [*row.badges, ("warn", "corrected")]
    expired = run_blob_expiries(run)
    if expired:
        for row in trace.rows:
            if any(digest[:71] in expired for _path, digest in digests_in(row.event.body)):
                row.badges = [*row.badges, ("warn", "bytes expired")]
    tree = tree_build(run, trace, findings=bad) if view == "tree" else None
    finding_id = _id_param(finding)
    start = _seq_param(picture_start) if picture_start not in (None, "") else None
    return RunPage(
        run=run,
        verdict=verdict,
        focus=focus,
        trace=trace,
        detail=event_detail_build(run, event_ref) if event_ref else None,
        selected_ref=event_ref[:200],
        picture=picture_build(run, focus=focus, start_seq=start, finding_id=finding_id),
        narrow=narrow,
        finding_id=finding_id,
        tree=tree,
        # Read only when the run has any (its count is a column): a run without one costs no query.
        expired=expired,
        masked_secrets=list(MaskedSecret.objects.filter(run=run).order_by("id")[:MASKED_SECRETS_SHOWN])
        if run.masked_secret_count
        else [],
    )
