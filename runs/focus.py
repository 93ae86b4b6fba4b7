"""A focus and its causal neighbourhood: what the focused event (or object) relies on, and what relies on it.

A fixed number of hops, each one bounded query, with a cap on how much the walk collects: a focus costs the same
on a run of ten events and of a million.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .models import Edge, Event, Run, RunObject

NEIGHBOURHOOD_CAP = 150
OUT_HOPS = 4  # intent -> admission -> observation -> receipt; intent -> artifact -> workspace
IN_HOPS = 2  # intent <- decision, execution <- world change


@dataclass
class Focus:
    ref: str
    event: Event | None
    object_kind: str | None
    neighbourhood: set[str]  # event ids
    objects: set[str]  # attempt, workspace and artifact ids in the neighbourhood
    truncated: bool
    events: list[Event] = field(default_factory=list)  # the neighbourhood's events, in seq order


def focus_resolve(run: Run, ref: str) -> Focus | None:
    """The focused event (or object) and its causal neighbourhood: what it relies on, what relies on it."""
    if not ref:
        return None
    event = next(iter(Event.objects.filter(run=run, event_id=ref).order_by()[:1]), None)
    object_kind = None
    if event is None:
        obj = next(
            iter(RunObject.objects.filter(run=run, ref=ref).select_related("introduced_by").order_by()[:1]), None
        )
        if obj is None:
            return Focus(ref=ref, event=None, object_kind=None, neighbourhood=set(), objects=set(), truncated=False)
        event, object_kind = obj.introduced_by, obj.kind
    seen: dict[int, str] = {event.pk: event.event_id}
    objects: set[str] = set()
    if object_kind:
        objects.add(ref)
    truncated = False
    frontier = {event.pk}
    for _ in range(OUT_HOPS):
        if not frontier:
            break
        out_rows = Edge.objects.filter(source_id__in=frontier, target_event__isnull=False).values_list(
            "target_event_id", "target_event__event_id", "target_object__ref"
        )[: NEIGHBOURHOOD_CAP + 1]
        frontier = set()
        for pk, event_id, obj_ref in out_rows:
            if obj_ref:
                objects.add(obj_ref)
            if pk not in seen:
                seen[pk] = event_id
                frontier.add(pk)
        if len(seen) > NEIGHBOURHOOD_CAP:
            truncated = True
            break
    frontier = {event.pk}
    for _ in range(IN_HOPS):
        if not frontier or truncated:
            break
        rows = Edge.objects.filter(target_event_id__in=frontier).values_list("source_id", "source__event_id")[
            : NEIGHBOURHOOD_CAP + 1
        ]
        frontier = set()
        for pk, event_id in rows:
            if pk not in seen:
                seen[pk] = event_id
                frontier.add(pk)
        if len(seen) > NEIGHBOURHOOD_CAP:
            truncated = True
    # One query for the whole neighbourhood through the (run, event_id) unique index; the panes share it.
    # Sorted here, not by the database: ORDER BY seq would tempt SQLite onto the (run, seq) index.
    events = sorted(Event.objects.filter(run=run, event_id__in=sorted(seen.values())), key=lambda e: e.seq)
    return Focus(
        ref=ref,
        event=event,
        object_kind=object_kind,
        neighbourhood=set(seen.values()),
        objects=objects,
        truncated=truncated,
        events=events,
    )
