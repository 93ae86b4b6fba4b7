"""The lineage picture: an SVG swimlane of a window of the run's events, its references and its broken edges.

Windowed like the panes: a fixed number of queries, each bounded by a LIMIT, whatever the run's size. With no
parameter the picture reads three (the window, its edges, the findings that touch it); an explicit window start
or a focus adds the events before the anchor (for the lead-in and the "Earlier events" link), a selected finding
adds that finding as well.

The layout is computed here, not in the browser, so that it can be tested without one. Every text the picture
draws (a node's label, a lane's name, a broken edge's number) gets a box from an estimate of its width: the
picture's text is set in a monospace font whose characters are at most 0.6 em wide (DejaVu Sans Mono, Menlo,
SF Mono, Consolas, Liberation Mono), and the estimate takes 0.62 em. Labels are placed greedily, column by
column, into the first free track below or above their node (a lane grows by a track when all are taken), and
each broken edge's number badge goes to the first point along its edge, or near it, where it overlaps no label,
no node and no other badge; failing that, to a strip below the lanes with a leader line to its edge.
`Picture.text_boxes` and `Picture.node_boxes` expose the result for the tests that check nothing overlaps.
"""

from __future__ import annotations

import math
import unicodedata
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from .models import Edge, Event, Finding, Run

if TYPE_CHECKING:
    from .focus import Focus


@dataclass(frozen=True)
class Family:
    key: str
    title: str  # the legend's words for it
    shape: str
    kinds: tuple[str, ...]


# What the picture draws, by family; each family has a shape of its own so that the picture reads without colour.
# Left out as chatter or context: model proposals (the call they led to is drawn), budget charges, clock advances
# and the replay's scope (the run page's header says what a replay covered).
FAMILIES = (
    Family(
        "state",
        "attempt, run state, checkpoint",
        "diamond",
        ("attempt.started", "attempt.ended", "run.state", "checkpoint"),
    ),
    Family(
        "workspace",
        "workspace, artifact",
        "square",
        ("workspace.created", "workspace.changed", "workspace.lifecycle", "artifact.created"),
    ),
    Family(
        "evidence",
        "receipt, evidence, waiver",
        "circle",
        ("command.receipt", "evidence.observed", "evidence.admitted", "evidence.superseded", "waiver.granted"),
    ),
    Family("tool", "tool call, tool result", "pill", ("tool.call", "tool.result")),
    Family(
        "authority",
        "policy decision, approval, human input",
        "triangle",
        ("policy.decision", "approval.recorded", "human.input"),
    ),
    Family(
        "effect",
        "effect intent and execution, world change",
        "star",
        ("effect.intent", "effect.execution", "world.transition", "world.observation"),
    ),
    Family("claim", "claim", "hexagon", ("account.claim",)),
    Family(
        "stop",
        "missing fixture, sandbox violation",
        "cross",
        ("fixture.missing", "fixture.ambiguous", "sandbox.violation"),
    ),
)
FAMILY_OF = {kind: f for f in FAMILIES for kind in f.kinds}
PICTURE_KINDS = tuple(FAMILY_OF)

PICTURE_WINDOW = 120  # events drawn at most
PICTURE_LEAD = 8  # events shown before a focused event, or before a selected finding's earlier end
FINDINGS_READ = 200  # findings touching a window, at most

# Geometry, in SVG user units (CSS pixels). FONT must match `svg.lineage` in static/n17q.css.
FONT = 11
CHAR_W = 0.62 * FONT
ASCENT, DESCENT = 0.95 * FONT, 0.32 * FONT  # a text's box around its baseline, generous for every font above
TEXT_H = ASCENT + DESCENT
TRACK_H = math.ceil(TEXT_H) + 2
LABEL_CHARS = 22  # longer labels are cut with "…" and told whole in the node's title
LANE_LABEL_CHARS = 24
COL_W = 56  # with labels of at most 22 characters, three tracks always suffice (only two earlier columns reach)
# A lane whose first node lies further right than this (a pane of the run page shows about 950 px of the picture at
# 1400 px, 600 at 1000) says where it starts.
LATE_LANE_X = 560
NODE_HALF = 11  # every shape fits a 22 by 20 box (its stroke included)
NODE_GAP = 3  # between a node's box and its first label track
LANE_PAD = 6
LABEL_GAP = 4  # between two labels in one track
BADGE_H = 16
ARC_BAND = BADGE_H + 6
RING_R = 15  # a finding on a single event rings it
EDGE_TRIM = 12  # edges start and end outside their nodes' shapes, so that the arrowheads show


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def text_width(text: str) -> float:
    """The width of `text` in the picture's font: a monospace cell per character, two for wide East Asian ones."""
    cells = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        cells += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return cells * CHAR_W


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class _Grid:
    """Boxes bucketed by 64-unit cells, so that placing a badge tests only its neighbourhood."""

    CELL = 64

    def __init__(self) -> None:
        self._cells: dict[tuple[int, int], list[Box]] = defaultdict(list)

    def _keys(self, box: Box) -> Iterable[tuple[int, int]]:
        c = self.CELL
        for i in range(int(box[0] // c), int(box[2] // c) + 1):
            for j in range(int(box[1] // c), int(box[3] // c) + 1):
                yield i, j

    def add(self, box: Box) -> None:
        for key in self._keys(box):
            self._cells[key].append(box)

    def hits(self, box: Box) -> bool:
        return any(_overlaps(box, other) for key in self._keys(box) for other in self._cells.get(key, ()))


# --- words ------------------------------------------------------------------------------------------------------


def _word(value: Any, limit: int = 40) -> str:
    """A value as a short phrase: underscores as spaces, no line breaks."""
    text = " ".join(str(value if value is not None else "").replace("_", " ").split())
    return text[:limit]


def _purpose(value: Any) -> str:
    """`validation:focused` -> "focused": the purpose's own word."""
    return _word(str(value or "").rpartition(":")[2])


def _suites(value: Any) -> str:
    suites = [s for s in value if isinstance(s, str)] if isinstance(value, list) else []
    if not suites:
        return ""
    return _word(suites[0]) + (f" +{len(suites) - 1}" if len(suites) > 1 else "")


def node_label(event: Event) -> str:
    """Whole, distinct words for an event: what it is and the one fact that tells it from its neighbours."""
    b = event.body if isinstance(event.body, dict) else {}
    kind = event.kind
    ws = _word(b.get("workspace_id"))
    if kind == "attempt.started":
        return f"attempt {_word(event.attempt_ref)}".strip()
    if kind == "attempt.ended":
        return f"{_word(event.attempt_ref) or 'attempt'} ended"
    if kind == "run.state":
        return f"run {_word(b.get('state'))}".strip()
    if kind == "checkpoint":
        return "checkpoint"
    if kind == "workspace.created":
        return f"{ws or 'workspace'} created"
    if kind == "workspace.changed":
        return f"{ws or 'workspace'} changed"
    if kind == "workspace.lifecycle":
        return f"{ws or 'workspace'} {_word(b.get('state')) or 'lifecycle'}"
    if kind == "artifact.created":
        return f"artifact {_word(b.get('artifact_id'))}".strip()
    if kind == "command.receipt":
        return f"receipt {_suites(b.get('suites')) or ws}".strip()
    if kind == "evidence.observed":
        scope = b.get("scope")
        first = scope[0] if isinstance(scope, list) and scope else ""
        return f"observed {_purpose(first)}".strip()
    if kind == "evidence.admitted":
        decision = "rejected" if b.get("decision") == "rejected" else "admitted"
        return f"{decision} {_purpose(b.get('purpose'))}".strip()
    if kind == "evidence.superseded":
        return "superseded"
    if kind == "waiver.granted":
        return f"waiver {_word(b.get('suite'))}".strip()
    if kind == "policy.decision":
        return f"policy {_word(b.get('outcome'))}".strip()
    if kind == "approval.recorded":
        decision = _word(b.get("decision")) or "approval"
        origin = _word(b.get("origin"))
        return f"{decision} {origin}" if origin and origin != "human" else decision
    if kind == "human.input":
        return f"{_word(b.get('actor_role')) or 'human'} {_word(b.get('action'))}".strip()
    if kind == "effect.intent":
        return f"intent {_word(str(b.get('destination') or '').partition(':')[0])}".strip()
    if kind == "effect.execution":
        return f"execution {_word(b.get('outcome'))}".strip()
    if kind == "world.transition":
        change = b.get("change")
        op = change.get("op") if isinstance(change, dict) else None
        return f"world {_word(op) or 'change'}"
    if kind == "world.observation":
        return "world observed"
    if kind == "account.claim":
        claim_kind = _word(b.get("claim_kind"))
        return f"claim {claim_kind}" if claim_kind and claim_kind != "other" else "claim"
    if kind == "tool.call":  # the tool's own name, underscores and all
        return " ".join(str(b.get("tool") or "").split())[:40] or "tool call"
    if kind == "tool.result":
        origin, outcome = _word(b.get("origin")), _word(b.get("outcome"))
        if origin == "live" or outcome in ("", "ok"):
            return f"result: {origin or 'unknown'}"
        return f"result: {outcome}"
    if kind == "fixture.missing":
        return f"missing {_word(b.get('tool'))}".strip()
    if kind == "fixture.ambiguous":
        return f"ambiguous {_word(b.get('tool'))}".strip()
    if kind == "sandbox.violation":
        return f"sandbox {_word(b.get('attempted'))}".strip()
    return kind


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- shapes -----------------------------------------------------------------------------------------------------


def _f(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _polygon(points: Iterable[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in points) + " Z"


def shape_path(shape: str, cx: float, cy: float) -> str:
    """The SVG path of a node's shape centred on (cx, cy), inside a 20 by 20 box (the pill: 22 by 12)."""
    if shape == "diamond":
        return _polygon([(cx, cy - 10), (cx + 10, cy), (cx, cy + 10), (cx - 10, cy)])
    if shape == "square":
        return _polygon([(cx - 7.5, cy - 7.5), (cx + 7.5, cy - 7.5), (cx + 7.5, cy + 7.5), (cx - 7.5, cy + 7.5)])
    if shape == "circle":
        return f"M{_f(cx - 8)},{_f(cy)} a8,8 0 1,0 16,0 a8,8 0 1,0 -16,0 Z"
    if shape == "triangle":
        return _polygon([(cx, cy - 9), (cx + 9.5, cy + 7.5), (cx - 9.5, cy + 7.5)])
    if shape == "star":
        points = []
        for i in range(10):
            r = 10 if i % 2 == 0 else 4.3
            a = -math.pi / 2 + i * math.pi / 5
            points.append((cx + r * math.cos(a), cy + r * math.sin(a) + 1))
        return _polygon(points)
    if shape == "pill":
        return f"M{_f(cx - 5)},{_f(cy - 6)} h10 a6,6 0 0 1 0,12 h-10 a6,6 0 0 1 0,-12 Z"
    if shape == "hexagon":
        return _polygon([(cx + 9 * math.cos(a), cy + 9 * math.sin(a)) for a in (i * math.pi / 3 for i in range(6))])
    if shape == "cross":  # an X: a plus turned by 45 degrees
        arm, t = 9.5, 2.6
        plus = [(t, arm), (-t, arm), (-t, t), (-arm, t), (-arm, -t), (-t, -t)]
        plus += [(-t, -arm), (t, -arm), (t, -t), (arm, -t), (arm, t), (t, t)]
        k = math.sqrt(0.5)
        return _polygon([(cx + k * (x - y), cy + k * (x + y)) for x, y in plus])
    return shape_path("circle", cx, cy)


SHAPE_LEGEND = [{"key": f.key, "title": f.title, "shape": f.shape, "d": shape_path(f.shape, 11, 10)} for f in FAMILIES]


# --- the picture ------------------------------------------------------------------------------------------------


@dataclass
class Node:
    event_id: str
    seq: int
    kind: str
    family: str
    label: str  # as drawn (cut with "…" when longer than LABEL_CHARS)
    full_label: str
    lane: int
    col: int
    x: float
    y: float
    focused: bool
    selected: bool
    logical: str
    d: str = ""  # the shape's path
    track: int = 1  # >0 below the node, <0 above
    label_x: float = 0
    label_y: float = 0  # the baseline
    label_box: Box = (0, 0, 0, 0)

    @property
    def box(self) -> Box:
        return (self.x - NODE_HALF, self.y - NODE_HALF + 1, self.x + NODE_HALF, self.y + NODE_HALF - 1)


@dataclass
class Lane:
    key: str
    kind: str  # "attempt", "workspace" or "run"
    name: str
    label: str
    full_label: str
    ref: str  # the object the lane is about, focusable; "" for the run's own lane
    above: int = 1  # label tracks above the node line
    below: int = 1
    arcs: bool = False  # broken edges join two events of this lane: a band under its labels holds their arcs
    arc_y: float = 0  # the middle of that band
    top: float = 0
    height: float = 0
    node_y: float = 0
    label_x: float = 8
    label_y: float = 0
    label_box: Box = (0, 0, 0, 0)
    # A lane whose first event lies beyond what a pane first shows says where it starts (issue 38's tour: story 003's
    # a2 and ws-2 lanes looked empty): "first event: seq 28 →", drawn in the lane's empty stretch.
    note: str = ""
    note_x: float = 0
    note_y: float = 0
    note_box: Box = (0, 0, 0, 0)


@dataclass
class PictureEdge:
    d: str
    field: str


@dataclass
class BrokenEdge:
    number: int
    pk: int
    code: str
    message: str
    from_ref: str
    to_ref: str
    d: str
    selected: bool = False
    badge_x: float = 0  # the badge's centre
    badge_y: float = 0
    badge_w: float = BADGE_H
    leader: tuple[float, float, float, float] | None = None  # from the badge to its edge, when it sits in the strip
    # Where the badge may go, best first (points along the edge), and the edge's middle for a leader line.
    candidates: list[tuple[float, float]] = field(default_factory=list, repr=False)
    middle: tuple[float, float] = (0, 0)

    @property
    def badge_text_y(self) -> float:
        return self.badge_y + (ASCENT - DESCENT) / 2

    @property
    def badge_box(self) -> Box:
        return (
            self.badge_x - self.badge_w / 2,
            self.badge_y - BADGE_H / 2,
            self.badge_x + self.badge_w / 2,
            self.badge_y + BADGE_H / 2,
        )


@dataclass
class SelectedFinding:
    """The finding asked for with `?finding=`: where its ends are, and why it is not drawn when it is not."""

    pk: int
    code: str
    message: str
    from_ref: str
    to_ref: str
    from_seq: int | None
    to_seq: int | None
    number: int | None = None  # its badge's number when drawn
    why_not: str = ""  # "", "apart" (too far apart for one window), "window" (not both in this window), "dangling"
    # (an end the run does not hold), "undrawn" (an end of a kind the picture leaves out), "crowded" (the window
    # has more findings than the picture reads)


@dataclass
class Picture:
    lanes: list[Lane]
    nodes: list[Node]
    edges: list[PictureEdge]
    broken: list[BrokenEdge]
    width: int
    height: int
    start_seq: int
    has_more: bool
    total: int
    next_start: int = 0
    prev_start: int | None = None
    selected: SelectedFinding | None = None
    finding_asked: bool = False  # a ?finding= named something; `selected` is None when not a finding of this run
    outside: int = 0  # findings with one end in this window and the other outside it
    shapes: list[dict[str, str]] = field(default_factory=lambda: SHAPE_LEGEND)

    window_size = PICTURE_WINDOW
    findings_read = FINDINGS_READ
    focus_key = shape_path("circle", 11, 10)  # the shape the legend shows focus and selection on

    @property
    def end_seq(self) -> int:
        return self.nodes[-1].seq if self.nodes else self.start_seq

    @property
    def text_boxes(self) -> list[tuple[str, Box]]:
        """Every box of text the picture draws: node labels, lane names, broken edges' number badges."""
        boxes = [(f"label {n.event_id}", n.label_box) for n in self.nodes]
        boxes += [(f"lane {lane.key}", lane.label_box) for lane in self.lanes]
        boxes += [(f"lane note {lane.key}", lane.note_box) for lane in self.lanes if lane.note]
        boxes += [(f"badge {e.number}", e.badge_box) for e in self.broken]
        return boxes

    @property
    def node_boxes(self) -> list[tuple[str, Box]]:
        return [(f"node {n.event_id}", n.box) for n in self.nodes]

    @property
    def families(self) -> set[str]:
        return {n.family for n in self.nodes}


def _kind_total(run: Run, kinds: Iterable[str]) -> int:
    counts = run.kind_counts or {}
    return sum(counts.get(k, 0) for k in kinds)


def _logical(event: Event) -> str:
    return event.logical_at.isoformat().replace("+00:00", "Z")


@dataclass
class _Window:
    rows: list[Event]
    has_more: bool
    prev_start: int | None


def _window(run: Run, *, start_seq: int | None, anchor: tuple[int, int] | None) -> tuple[_Window, bool]:
    """The window of picture events, in at most two queries, and whether it holds both ends of `anchor`.

    `start_seq` (an explicit window start) wins; else the window holds `anchor` = (lo, hi) seqs, the focus (lo == hi)
    or a finding's two ends: from the run's start when they fit there with a lead-out, else from PICTURE_LEAD
    events before lo, moved later (up to lo) when hi would fall past the window's end.
    """
    base = Event.objects.filter(run=run, kind__in=PICTURE_KINDS)
    if start_seq is None and anchor is None:
        rows = list(base.order_by("seq")[: PICTURE_WINDOW + 1])
        return _Window(rows[:PICTURE_WINDOW], len(rows) > PICTURE_WINDOW, None), False
    if start_seq is not None:
        before = list(base.filter(seq__lt=start_seq).order_by("-seq").values_list("seq", flat=True)[:PICTURE_WINDOW])
        rows = list(base.filter(seq__gte=start_seq).order_by("seq")[: PICTURE_WINDOW + 1])
        earlier = before[::-1]
        window = rows[:PICTURE_WINDOW]
        holds = anchor is not None and bool(window) and window[0].seq <= anchor[0] and anchor[1] <= window[-1].seq
        return _Window(window, len(rows) > PICTURE_WINDOW, _prev_start(earlier)), holds
    assert anchor is not None
    lo, hi = anchor
    limit = PICTURE_LEAD + PICTURE_WINDOW
    before = list(base.filter(seq__lt=lo).order_by("-seq").values_list("seq", flat=True)[:limit])
    # Read from as far back as a window could need (the run's start when it is that near), so that a window
    # near the run's end can be filled with earlier events.
    at_start = len(before) < limit
    fetch_from, lo_index = (0 if at_start else before[-1]), len(before)
    rows = list(base.filter(seq__gte=fetch_from).order_by("seq")[: lo_index + PICTURE_WINDOW + 1])
    seqs = [r.seq for r in rows]
    hi_index = bisect_left(seqs, hi)  # where hi is, or would be
    if at_start and hi_index + PICTURE_LEAD < PICTURE_WINDOW:
        offset = 0
    else:
        offset = max(0, lo_index - PICTURE_LEAD)
        if hi_index >= offset + PICTURE_WINDOW and hi_index - lo_index < PICTURE_WINDOW:
            offset = hi_index - PICTURE_WINDOW + 1
        if len(rows) - offset < PICTURE_WINDOW:  # the run ends before the window is full
            offset = max(0, len(rows) - PICTURE_WINDOW)
    window = rows[offset : offset + PICTURE_WINDOW]
    start = window[0].seq if window else lo
    earlier = sorted({s for s in before if s < start} | set(seqs[:offset]))
    holds = bool(window) and window[0].seq <= lo and hi <= window[-1].seq
    return _Window(window, len(rows) > offset + PICTURE_WINDOW, _prev_start(earlier)), holds


def _prev_start(earlier: list[int]) -> int | None:
    """Where the window before this one starts: PICTURE_WINDOW events earlier, or the run's first."""
    if not earlier:
        return None
    return earlier[-PICTURE_WINDOW] if len(earlier) >= PICTURE_WINDOW else earlier[0]


def _selected_finding(run: Run, finding_id: int) -> tuple[SelectedFinding | None, tuple[str, str]]:
    row = (
        Finding.objects.filter(run=run, pk=finding_id)
        .values_list(
            "pk",
            "code",
            "message",
            "from_ref",
            "to_ref",
            "from_event__seq",
            "to_event__seq",
            "from_event__kind",
            "to_event__kind",
        )
        .order_by()[:1]
    )
    found = next(iter(row), None)
    if found is None:
        return None, ("", "")
    pk, code, message, from_ref, to_ref, from_seq, to_seq, from_kind, to_kind = found
    return SelectedFinding(pk, code, message, from_ref, to_ref, from_seq, to_seq), (from_kind or "", to_kind or "")


def picture_build(
    run: Run, *, focus: Focus | None, start_seq: int | None = None, finding_id: int | None = None
) -> Picture:
    """The lineage picture of a window of the run: one lane per attempt and per workspace, time left to right.

    The window starts at `start_seq`; else it holds the selected finding's two ends when they fit in one window,
    or the focused event, a few events after the window's start; else it is the run's start.
    """
    selected: SelectedFinding | None = None
    end_kinds = ("", "")
    if finding_id is not None:
        selected, end_kinds = _selected_finding(run, finding_id)
    anchor: tuple[int, int] | None = None
    if selected is not None:
        end_seqs = [seq for seq in (selected.from_seq, selected.to_seq) if seq is not None]
        if len(end_seqs) < 2:
            selected.why_not = "dangling"
        elif any(kind not in FAMILY_OF for kind in end_kinds):
            selected.why_not = "undrawn"
        if end_seqs:
            anchor = (min(end_seqs), max(end_seqs))
    if anchor is None and focus is not None and focus.event is not None:
        anchor = (focus.event.seq, focus.event.seq)
    window, holds = _window(run, start_seq=start_seq, anchor=anchor)
    if selected is not None and not selected.why_not and not holds:
        selected.why_not = "window" if start_seq is not None else "apart"
    drawn = selected if selected is not None and not selected.why_not else None

    nodes, lanes = _nodes_and_lanes(window.rows, focus=focus, selected=drawn)
    by_pk = {event.pk: node for event, node in zip(window.rows, nodes, strict=True)}
    broken, ends, outside = _broken_edges(run, by_pk, drawn) if by_pk else ([], [], 0)
    for a, b in ends:
        if a is not b and a.lane == b.lane:
            lanes[a.lane].arcs = True
    left = _lay_out_labels(nodes, lanes)
    edges = _edges(by_pk, lanes) if by_pk else []
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    for edge, (a, b) in zip(broken, ends, strict=True):
        pair = (a.event_id, b.event_id) if a.col <= b.col else (b.event_id, a.event_id)
        _broken_geometry(edge, a, b, lanes, pairs[pair])
        pairs[pair] += 1
    width, height = _place_badges(nodes, lanes, broken, left)
    if selected is not None:
        selected.number = next((e.number for e in broken if e.selected), None)
        if drawn is not None and selected.number is None:  # past the FINDINGS_READ the window's findings are read
            selected.why_not = "crowded"
            for n in nodes:
                n.selected = False
    return Picture(
        lanes=lanes,
        nodes=nodes,
        edges=edges,
        broken=broken,
        width=width,
        height=height,
        start_seq=window.rows[0].seq if window.rows else 0,
        has_more=window.has_more,
        total=_kind_total(run, PICTURE_KINDS),
        next_start=window.rows[-1].seq + 1 if window.rows else 0,
        prev_start=window.prev_start,
        selected=selected,
        finding_asked=finding_id is not None,
        outside=outside,
    )


def _nodes_and_lanes(
    rows: list[Event], *, focus: Focus | None, selected: SelectedFinding | None
) -> tuple[list[Node], list[Lane]]:
    """A node per event and a lane per attempt and per workspace, in order of first appearance.

    An event that names a workspace goes in that workspace's lane, any other in its attempt's; a tool result goes
    where its call went, so that a call and its result sit side by side.
    """
    lanes: list[Lane] = []
    lane_of: dict[str, int] = {}
    node_lane: dict[str, int] = {}
    focused = focus.neighbourhood if focus else set()
    ends = {selected.from_ref, selected.to_ref} if selected else set()
    nodes: list[Node] = []
    for col, event in enumerate(rows):
        body = event.body if isinstance(event.body, dict) else {}
        call = body.get("call_id") if event.kind == "tool.result" else None
        if isinstance(call, str) and call in node_lane:
            lane = node_lane[call]
        else:
            if event.workspace_ref:
                kind, name = "workspace", event.workspace_ref
            elif event.attempt_ref:
                kind, name = "attempt", event.attempt_ref
            else:
                kind, name = "run", ""
            key = f"{kind}:{name}"
            if key not in lane_of:
                lane_of[key] = len(lanes)
                full = f"{kind} {name}" if name else "run (no attempt)"
                lanes.append(Lane(key, kind, name, _cut(full, LANE_LABEL_CHARS), full, name))
            lane = lane_of[key]
        node_lane[event.event_id] = lane
        family = FAMILY_OF[event.kind]
        full_label = node_label(event)
        nodes.append(
            Node(
                event_id=event.event_id,
                seq=event.seq,
                kind=event.kind,
                family=family.key,
                label=_cut(full_label, LABEL_CHARS),
                full_label=full_label,
                lane=lane,
                col=col,
                x=0,
                y=0,
                focused=event.event_id in focused,
                selected=event.event_id in ends,
                logical=_logical(event),
            )
        )
    return nodes, lanes


TOP = 8  # room above the first lane for arcs and loops


def _lay_out_labels(nodes: list[Node], lanes: list[Lane]) -> float:
    """Columns, label tracks, lane heights; returns where the columns start (right of the lane names).

    Greedy, column by column: a label takes the first track (below, above, second below, ...) where it overlaps no
    earlier label of its lane. Lanes are bands of their own, so labels of two lanes never meet.
    """
    left = max([text_width(lane.label) for lane in lanes] + [60]) + 8 + 16
    taken: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    spans: dict[str, tuple[float, float]] = {}
    for n in nodes:
        n.x = left + COL_W / 2 + n.col * COL_W
        w = text_width(n.label)
        x0 = max(n.x - w / 2, left - 6)
        x1 = x0 + w
        track = 1
        while True:
            used = taken[(n.lane, track)]
            if not any(x0 - LABEL_GAP < b and a < x1 + LABEL_GAP for a, b in used):
                break
            track = -track if track > 0 else -track + 1
        taken[(n.lane, track)].append((x0, x1))
        n.track = track
        spans[n.event_id] = (x0, x1)
        lane = lanes[n.lane]
        if track > 0:
            lane.below = max(lane.below, track)
        else:
            lane.above = max(lane.above, -track)
    y = float(TOP)
    for lane in lanes:
        lane.top = y
        lane.node_y = y + LANE_PAD + lane.above * TRACK_H + NODE_HALF + NODE_GAP
        labels_end = lane.node_y + NODE_HALF + NODE_GAP + lane.below * TRACK_H
        lane.arc_y = labels_end + ARC_BAND / 2
        lane.height = labels_end + (ARC_BAND if lane.arcs else 0) + LANE_PAD - y
        lane.label_y = lane.node_y + (ASCENT - DESCENT) / 2
        lane.label_box = (
            lane.label_x,
            lane.label_y - ASCENT,
            lane.label_x + text_width(lane.label),
            lane.label_y + DESCENT,
        )
        y += lane.height
    for n in nodes:
        n.y = lanes[n.lane].node_y
        n.d = shape_path(FAMILY_OF[n.kind].shape, n.x, n.y)
        x0, x1 = spans[n.event_id]
        if n.track > 0:
            top = n.y + NODE_HALF + NODE_GAP + (n.track - 1) * TRACK_H
        else:
            top = n.y - NODE_HALF - NODE_GAP - (-n.track - 1) * TRACK_H - TEXT_H
        n.label_x = (x0 + x1) / 2
        n.label_y = top + ASCENT
        n.label_box = (x0, top, x1, top + TEXT_H)
    _note_late_lanes(nodes, lanes, left)
    return left


def _note_late_lanes(nodes: list[Node], lanes: list[Lane], left: float) -> None:
    """A lane whose first node lies past LATE_LANE_X says, in its empty stretch, at which seq it starts."""
    first: dict[int, Node] = {}
    for n in nodes:
        if n.lane not in first or n.col < first[n.lane].col:
            first[n.lane] = n
    for index, lane in enumerate(lanes):
        start = first.get(index)
        if start is None or start.x < LATE_LANE_X:
            continue
        note = f"first event: seq {start.seq} \u2192"
        x0 = left + 8
        x1 = x0 + text_width(note)
        if x1 + 8 > min(start.box[0], start.label_box[0]):
            continue
        lane.note, lane.note_x, lane.note_y = note, x0, lane.label_y
        lane.note_box = (x0, lane.label_y - ASCENT, x1, lane.label_y + DESCENT)


def _toward(p: tuple[float, float], q: tuple[float, float], by: float) -> tuple[float, float]:
    """`p` moved `by` units toward `q`."""
    dx, dy = q[0] - p[0], q[1] - p[1]
    length = math.hypot(dx, dy) or 1.0
    return p[0] + dx / length * by, p[1] + dy / length * by


def _pt(p: tuple[float, float]) -> str:
    return f"{_f(p[0])},{_f(p[1])}"


def _quad(p0: tuple[float, float], c: tuple[float, float], p2: tuple[float, float], t: float) -> tuple[float, float]:
    u = 1 - t
    return (u * u * p0[0] + 2 * u * t * c[0] + t * t * p2[0], u * u * p0[1] + 2 * u * t * c[1] + t * t * p2[1])


def _edges(by_pk: dict[int, Node], lanes: list[Lane]) -> list[PictureEdge]:
    """The references between events of the window, as grey arrows: arcs over a lane, straight across lanes.

    A lane's own workspace is not drawn again as an arrow from each of its events to the workspace's creation:
    the lane already says it.
    """
    fields: dict[tuple[int, int], list[str]] = defaultdict(list)
    for source_id, target_id, field_name in Edge.objects.filter(
        source_id__in=list(by_pk), target_event_id__in=list(by_pk)
    ).values_list("source_id", "target_event_id", "field"):
        a, b = by_pk[source_id], by_pk[target_id]
        if a is b or (b.kind == "workspace.created" and a.lane == b.lane and field_name.endswith("workspace_id")):
            continue
        fields[(source_id, target_id)].append(field_name)
    edges = []
    for (source_id, target_id), names in fields.items():
        a, b = by_pk[source_id], by_pk[target_id]
        pa, pb = (a.x, a.y), (b.x, b.y)
        if a.lane == b.lane:
            lane = lanes[a.lane]
            h = min(14 + 0.12 * abs(b.x - a.x), 2 * (a.y - lane.top - 2))
            c = ((a.x + b.x) / 2, a.y - h)
            d = f"M{_pt(_toward(pa, c, EDGE_TRIM))} Q{_pt(c)} {_pt(_toward(pb, c, EDGE_TRIM))}"
        else:
            d = f"M{_pt(_toward(pa, pb, EDGE_TRIM))} L{_pt(_toward(pb, pa, EDGE_TRIM))}"
        edges.append(PictureEdge(d=d, field=", ".join(sorted(set(names)))))
    return edges


BADGE_TS = (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8)
BADGE_OFFSETS = ((0, 0), (0, -14), (0, 14), (14, 0), (-14, 0), (0, -28), (0, 28), (20, -20), (-20, 20))


def _broken_edges(
    run: Run, by_pk: dict[int, Node], selected: SelectedFinding | None
) -> tuple[list[BrokenEdge], list[tuple[Node, Node]], int]:
    """The findings whose two ends are in the window, numbered 1, 2, 3… in the findings' order, with their ends;
    and how many others have one end here and the other outside the window."""
    by_id = {n.event_id: n for n in by_pk.values()}
    touching = (
        Finding.objects.filter(run=run)
        .filter(Q(from_event_id__in=list(by_pk)) | Q(to_event_id__in=list(by_pk)))
        .order_by("id")
        .values_list("pk", "code", "message", "from_ref", "to_ref")[:FINDINGS_READ]
    )
    broken: list[BrokenEdge] = []
    ends: list[tuple[Node, Node]] = []
    outside = 0
    for pk, code, message, from_ref, to_ref in touching:
        a, b = by_id.get(from_ref), by_id.get(to_ref)
        if a is None or b is None:
            outside += 1
            continue
        number = len(broken) + 1
        edge = BrokenEdge(
            number=number,
            pk=pk,
            code=code,
            message=message,
            from_ref=from_ref,
            to_ref=to_ref,
            d="",
            selected=selected is not None and pk == selected.pk,
            badge_w=max(float(BADGE_H), text_width(str(number)) + 8),
        )
        broken.append(edge)
        ends.append((a, b))
    return broken, ends, outside


def _broken_geometry(edge: BrokenEdge, a: Node, b: Node, lanes: list[Lane], dup: int) -> None:
    """A broken edge's path and where its badge may go, best first.

    A finding on one event is a ring round it; between two events of one lane, an arc down into the band under
    the lane's labels (kept for such arcs), so that it crosses no label; across lanes, a line bent aside (further
    for each other finding on the same pair, so that none hides another).
    """
    pa, pb = (a.x, a.y), (b.x, b.y)
    if a is b:
        r = RING_R + 4 * dup
        edge.d = f"M{_pt((a.x - r, a.y))} a{r},{r} 0 1,0 {2 * r},0 a{r},{r} 0 1,0 {-2 * r},0"
        edge.middle = (a.x, a.y - r)
        d = r + BADGE_H / 2
        points = [(a.x + d, a.y - d / 2), (a.x - d, a.y - d / 2), (a.x, a.y - d - 2), (a.x + d, a.y + d / 2)]
    else:
        if a.lane == b.lane:
            lane = lanes[a.lane]
            apex = lane.arc_y + min(dup * 4, ARC_BAND / 2 - BADGE_H / 2 - 1)
            c = ((a.x + b.x) / 2, 2 * apex - a.y)
        else:
            dx, dy = b.x - a.x, b.y - a.y
            length = math.hypot(dx, dy) or 1.0
            bend = 20 + 16 * dup
            c = ((a.x + b.x) / 2 - dy / length * bend, (a.y + b.y) / 2 + dx / length * bend)
        p0, p2 = _toward(pa, c, EDGE_TRIM), _toward(pb, c, EDGE_TRIM)
        edge.d = f"M{_pt(p0)} Q{_pt(c)} {_pt(p2)}"
        edge.middle = _quad(p0, c, p2, 0.5)
        points = [_quad(p0, c, p2, t) for t in BADGE_TS]
    edge.candidates = [(x + ox, y + oy) for ox, oy in BADGE_OFFSETS for x, y in points]


def _place_badges(nodes: list[Node], lanes: list[Lane], broken: list[BrokenEdge], left: float) -> tuple[int, int]:
    """Each broken edge's number at the first candidate point where its badge overlaps no label, node or badge;
    else in a strip under the lanes, joined to its edge by a leader line. Returns the picture's width and height."""
    grid = _Grid()
    for n in nodes:
        grid.add(n.box)
        grid.add(n.label_box)
    for lane in lanes:
        grid.add(lane.label_box)
        if lane.note:
            grid.add(lane.note_box)
    bottom = lanes[-1].top + lanes[-1].height if lanes else TOP + 40.0
    low = bottom
    for edge in broken:  # the lowest an arc under the last lane reaches
        low = max(low, edge.middle[1] + 8)
    strip: list[BrokenEdge] = []
    for edge in broken:
        for cx, cy in edge.candidates:
            edge.badge_x, edge.badge_y = cx, cy
            box = edge.badge_box
            if box[0] >= left - 4 and box[1] >= 1 and not grid.hits(box):
                grid.add(box)
                break
        else:
            strip.append(edge)
    strip_y = low + 8 + BADGE_H / 2
    for edge in strip:
        edge.badge_x, edge.badge_y = max(edge.middle[0], left + edge.badge_w / 2), strip_y
        while grid.hits(edge.badge_box):
            edge.badge_x += 4
        grid.add(edge.badge_box)
        edge.leader = (edge.badge_x, edge.badge_y - BADGE_H / 2, edge.middle[0], edge.middle[1])
    boxes = [n.label_box for n in nodes] + [n.box for n in nodes] + [e.badge_box for e in broken]
    right = max([b[2] for b in boxes] + [left + COL_W])
    height = (strip_y + BADGE_H / 2 + 6) if strip else max(low, max((b[3] for b in boxes), default=0)) + 6
    return math.ceil(right + 16), math.ceil(height)
