"""The lineage picture: an SVG swimlane of a window of the run's semantic events, with its broken edges.

Windowed like the panes: a fixed number of queries, each bounded, whatever the run's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from .models import Edge, Event, Finding, Run

if TYPE_CHECKING:
    from .run_page import Focus

# Kinds drawn in the picture: the semantic skeleton, without the chatter of proposals and calls.
PICTURE_KINDS = (
    "attempt.started",
    "attempt.ended",
    "run.state",
    "checkpoint",
    "workspace.created",
    "workspace.changed",
    "workspace.lifecycle",
    "artifact.created",
    "command.receipt",
    "evidence.observed",
    "evidence.admitted",
    "evidence.superseded",
    "waiver.granted",
    "policy.decision",
    "approval.recorded",
    "human.input",
    "effect.intent",
    "effect.execution",
    "world.transition",
    "world.observation",
    "account.claim",
)
PICTURE_WINDOW = 120


def _kind_total(run: Run, kinds: tuple[str, ...]) -> int:
    counts = run.kind_counts or {}
    return sum(counts.get(k, 0) for k in kinds)


@dataclass
class Node:
    event_id: str
    kind: str
    label: str
    lane: int
    x: float
    y: float
    focused: bool
    logical: str
    label_y: float = 0  # labels alternate below and above the lane so neighbours do not overlap


@dataclass
class PictureEdge:
    x1: float
    y1: float
    x2: float
    y2: float
    field: str
    broken: bool = False
    code: str = ""
    message: str = ""
    label_x: float = 0
    label_y: float = 0


@dataclass
class Picture:
    lanes: list[dict[str, Any]]
    nodes: list[Node]
    edges: list[PictureEdge]
    broken: list[PictureEdge]
    width: int
    height: int
    start_seq: int
    has_more: bool
    total: int
    next_start: int = 0


LANE_H = 64
COL_W = 48
LEFT = 130
TOP = 30


def _label(event: Event) -> str:
    body = event.body
    kind = event.kind
    short = {
        "attempt.started": "attempt",
        "attempt.ended": "ended",
        "workspace.created": "workspace",
        "workspace.changed": "changed",
        "workspace.lifecycle": body.get("state", "lifecycle"),
        "artifact.created": "artifact",
        "command.receipt": "receipt",
        "evidence.observed": "observed",
        "evidence.admitted": "admitted" if body.get("decision") == "admitted" else "rejected",
        "evidence.superseded": "superseded",
        "waiver.granted": "waiver",
        "policy.decision": body.get("outcome", "decision"),
        "approval.recorded": body.get("decision", "approval"),
        "human.input": "human",
        "effect.intent": "intent",
        "effect.execution": body.get("outcome", "execution"),
        "world.transition": "world",
        "world.observation": "observed",
        "account.claim": "claim",
        "run.state": body.get("state", "state"),
        "checkpoint": "checkpoint",
    }
    label = str(short.get(kind, kind)).replace("_", " ")
    return label if len(label) <= 10 else label[:9] + "…"


def picture_build(run: Run, *, focus: Focus | None, start_seq: int | None = None) -> Picture:
    """An SVG swimlane of the semantic events in a window: one lane per attempt and per workspace.

    The window starts at `start_seq`, or a little before the focused event, or at the run's start.
    """
    base = Event.objects.filter(run=run, kind__in=PICTURE_KINDS)
    if start_seq is None and focus and focus.event is not None:
        before = list(base.filter(seq__lte=focus.event.seq).order_by("-seq").values_list("seq", flat=True)[:20])
        start_seq = before[-1] if before else focus.event.seq
    rows = list(base.filter(seq__gte=start_seq or 0).order_by("seq")[: PICTURE_WINDOW + 1])
    has_more = len(rows) > PICTURE_WINDOW
    rows = rows[:PICTURE_WINDOW]
    lanes: dict[str, int] = {}
    lane_info: list[dict[str, Any]] = []

    def lane_for(event: Event) -> int:
        key = f"workspace:{event.workspace_ref}" if event.workspace_ref else f"attempt:{event.attempt_ref or '—'}"
        if key not in lanes:
            lanes[key] = len(lanes)
            kind, _, name = key.partition(":")
            lane_info.append({"key": key, "kind": kind, "name": name, "y": TOP + lanes[key] * LANE_H})
        return lanes[key]

    focused = focus.neighbourhood if focus else set()
    nodes: list[Node] = []
    by_pk: dict[int, Node] = {}
    for col, event in enumerate(rows):
        lane = lane_for(event)
        node = Node(
            event_id=event.event_id,
            kind=event.kind,
            label=_label(event),
            lane=lane,
            x=LEFT + col * COL_W + COL_W / 2,
            y=TOP + lane * LANE_H + LANE_H / 2,
            focused=event.event_id in focused,
            logical=event.logical_at.isoformat().replace("+00:00", "Z"),
            label_y=TOP + lane * LANE_H + LANE_H / 2 + (24 if col % 2 == 0 else -16),
        )
        nodes.append(node)
        by_pk[event.pk] = node
    edges: list[PictureEdge] = []
    if by_pk:
        for source_id, target_id, field_name in Edge.objects.filter(
            source_id__in=list(by_pk), target_event_id__in=list(by_pk)
        ).values_list("source_id", "target_event_id", "field"):
            a, b = by_pk[source_id], by_pk[target_id]
            if a is not b:
                edges.append(PictureEdge(a.x, a.y, b.x, b.y, field_name))
    by_id = {n.event_id: n for n in nodes}
    broken: list[PictureEdge] = []
    if nodes:
        for f in (
            Finding.objects.filter(run=run)
            .filter(Q(from_ref__in=list(by_id)) | Q(to_ref__in=list(by_id)))
            .order_by("id")[:200]
        ):
            end_a, end_b = by_id.get(f.from_ref), by_id.get(f.to_ref)
            if end_a is None or end_b is None or end_a is end_b:
                continue
            broken.append(
                PictureEdge(
                    end_a.x,
                    end_a.y,
                    end_b.x,
                    end_b.y,
                    "",
                    broken=True,
                    code=f.code,
                    message=f.message,
                    label_x=(a.x + b.x) / 2,
                    label_y=min(a.y, b.y) - 10 - 14 * (len(broken) % 3),
                )
            )
    width = LEFT + max(1, len(nodes)) * COL_W + 20
    height = TOP + max(1, len(lanes)) * LANE_H + 20
    return Picture(
        lanes=lane_info,
        nodes=nodes,
        edges=edges,
        broken=broken,
        width=width,
        height=height,
        start_seq=rows[0].seq if rows else 0,
        has_more=has_more,
        total=_kind_total(run, PICTURE_KINDS),
        next_start=rows[-1].seq + 1 if rows else 0,
    )
