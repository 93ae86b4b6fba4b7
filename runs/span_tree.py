"""The trace as a tree (issue 38, point 1): the window's events nested by the trace's spans and by their references,
with wall-clock durations and a waterfall where the events hold wall times.

A node is an attempt, a span or an event. An imported run nests by its spans: an OTLP event's `otlp.span` and
`otlp.parent`, an Inspect event's `inspect.span`, `inspect.parent` and `inspect.path` (n17q_engine/formats). Within a
span, and in a native run, an event sits under the event it refers to (DESIGN §3-4: a tool call under its model
proposal, a result or command receipt under its call, an admission under its observation, an execution under its
intent, a world change under its cause), when that event came before it; anything else sits under its attempt.

Windowed like the flat trace: the tree is built from the same keyset window of events (runs/trace.py), plus one
query, bounded by a LIMIT, for the ancestors of the window's events that lie before it (a recursive walk of the
stored references, and the events of parent spans), so that the window shows the path it sits in. The ancestors
are context: shown, marked so, never counted as the window's. Nothing here reads a whole run: a run of a million
events costs the page what one of a hundred does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.db.models.expressions import RawSQL

from .models import Edge, Event, Run
from .trace import Trace, TraceRow, family_of, row_summary

# How deep the references are followed for the ancestors of a window's events that lie before it (a receipt's
# call's proposal is two), and how many such events the one query reads.
CONTEXT_DEPTH = 4
CONTEXT_LIMIT = 64

# The fields by which an event names the event it belongs under, in the order they are tried (DESIGN §3-4). A
# reference counts only to an event that came before it: an approval's subject and the intent's approval name each
# other, and the earlier one is the parent.
PARENT_FIELDS = ("call_id", "proposal_id", "intent_id", "observation_id", "cause", "source", "subject")

# The waterfall's scale: a bar is drawn in an SVG of this width (no inline style: the CSP allows none).
WATERFALL_WIDTH = 1000


@dataclass
class Node:
    key: tuple[str, str]
    kind: str  # "attempt", "span" or "event"
    label: str
    row: TraceRow | None = None  # an event of the window
    event: Event | None = None  # an event of the window or of its context
    context: bool = False  # outside the window, shown for the path the window sits in
    span_type: str = ""
    start_ns: int | None = None
    end_ns: int | None = None
    children: list[Node] = field(default_factory=list)
    finding_codes: list[str] = field(default_factory=list)
    bar_x: int = 0
    bar_w: int = 0
    seq: int = 0  # the order among siblings
    placeholder: bool = False  # a span none of whose events was read: named by the events below it
    tokens: int | None = None  # a span's token charges (its `budget.charged` events of tokens), when it has any
    failed: str = ""  # a span one of whose own results failed: that outcome ("error"), shown on the span's row

    @property
    def context_text(self) -> str:
        return "no event of its own here" if self.placeholder else "before this window"

    @property
    def duration_ns(self) -> int | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return self.end_ns - self.start_ns

    @property
    def duration(self) -> str:
        return duration_text(self.duration_ns)

    @property
    def has_bar(self) -> bool:
        return self.start_ns is not None

    @property
    def glyph(self) -> str:
        if self.event is not None:
            return family_of(self.event.kind).glyph
        return "◇" if self.kind == "span" else "◆"


@dataclass
class SpanTree:
    roots: list[Node]
    by_spans: bool  # nested by the trace's spans (an imported run), else by the events' references alone
    timed: bool  # the window's events hold wall-clock times that differ: durations and a waterfall
    range_ns: int  # the waterfall's span, first start to last end in the window (and its context)
    context_events: int  # ancestors read from before the window
    context_capped: bool  # more ancestors than CONTEXT_LIMIT, or further than CONTEXT_DEPTH references away

    @property
    def range_text(self) -> str:
        return duration_text(self.range_ns)


def duration_text(ns: int | None) -> str:
    if ns is None:
        return ""
    if ns < 1_000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.0f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.1f} ms" if ns < 10_000_000 else f"{ns / 1_000_000:.0f} ms"
    if ns < 10 * 1_000_000_000:
        return f"{ns / 1_000_000_000:.2f} s"
    if ns < 600 * 1_000_000_000:
        return f"{ns / 1_000_000_000:.0f} s"
    return f"{ns / 60_000_000_000:.1f} min"


def _ns(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value:
        try:
            return _dt_ns(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _dt_ns(when: datetime) -> int:
    return int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1_000


def _origin(event: Event) -> tuple[str, dict[str, Any]] | None:
    """The event's span provenance: ("otlp" | "inspect", its ref), when it has a span."""
    body = event.body
    for name in ("otlp", "inspect"):
        ref = body.get(name)
        if isinstance(ref, dict) and isinstance(ref.get("span"), str):
            return name, ref
    return None


def _span_of(event: Event) -> str | None:
    found = _origin(event)
    return found[1]["span"] if found else None


def _parent_refs(event: Event) -> list[str]:
    body = event.body
    return [body[f] for f in PARENT_FIELDS if isinstance(body.get(f), str) and body[f] != event.event_id]


def _missing_parent_spans(events: dict[str, Event], spans: set[str]) -> set[str]:
    """OTLP parent spans named by the events that no event read so far belongs to."""
    wanted = set()
    for event in events.values():
        found = _origin(event)
        if found and found[0] == "otlp" and isinstance(found[1].get("parent"), str) and found[1]["parent"] not in spans:
            wanted.add(found[1]["parent"])
    return wanted


def _ancestors_sql(window: list[Event]) -> tuple[str, list[Any]]:
    """The ids of the events the window's events belong under, and what those belong under, CONTEXT_DEPTH deep: one
    recursive walk of the stored references (runs.Edge, through its index on the source), whatever the depth."""
    fields = ", ".join(["%s"] * len(PARENT_FIELDS))
    sources = ", ".join(["%s"] * len(window))
    edge = Edge._meta.db_table
    sql = (
        f"WITH RECURSIVE up(id, depth) AS ("
        f" SELECT target_event_id, 1 FROM {edge} WHERE source_id IN ({sources}) AND field IN ({fields})"
        f" AND target_event_id IS NOT NULL"
        f" UNION SELECT e.target_event_id, up.depth + 1 FROM {edge} e JOIN up ON e.source_id = up.id"
        f" WHERE up.depth < %s AND e.field IN ({fields}) AND e.target_event_id IS NOT NULL"
        f") SELECT id FROM up"
    )
    return sql, [*(e.pk for e in window), *PARENT_FIELDS, CONTEXT_DEPTH, *PARENT_FIELDS]


def _context(run: Run, window: list[Event]) -> tuple[list[Event], bool]:
    """The ancestors of the window's events that lie before it, in one query of at most CONTEXT_LIMIT events, asked
    only when something before the window could be one: the events their references lead to (CONTEXT_DEPTH deep),
    and the events of the parent spans none of the window's events is in (an OTLP span's event ids start with
    "{span}.", so they are found through the (run, event_id) index). A parent span's own parent is then named by
    the `parent_name` its events carry, without another query."""
    if not window or window[0].seq <= 1:
        return [], False
    spans = {s for s in (_span_of(e) for e in window) if s}
    parent_spans = sorted(_missing_parent_spans({e.event_id: e for e in window}, spans))
    capped = len(parent_spans) > CONTEXT_LIMIT
    condition = Q(pk__in=RawSQL(*_ancestors_sql(window)))
    for span in parent_spans[:CONTEXT_LIMIT]:
        # "/" follows "." in every collation the index uses.
        condition |= Q(event_id__gte=f"{span}.", event_id__lt=f"{span}/")
    rows = list(
        Event.objects.filter(run=run, seq__lt=window[0].seq).filter(condition).order_by("-seq")[: CONTEXT_LIMIT + 1]
    )
    capped = capped or len(rows) > CONTEXT_LIMIT
    return sorted(rows[:CONTEXT_LIMIT], key=lambda e: e.seq), capped


def _span_marks(span: Node) -> None:
    """What a span's row says of the events under it without being opened, as a trace viewer's span row does: its
    tokens (the `budget.charged` of tokens among its events) and a failed result (a `tool.result` or
    `command.receipt` whose outcome is not ok), from the events already read, no query. Nested spans say their own."""
    todo = list(span.children)
    while todo:
        node = todo.pop()
        if node.kind == "span" or node.event is None:
            continue
        body = node.event.body
        if node.event.kind == "budget.charged" and body.get("resource") == "tokens":
            amount = body.get("amount")
            if isinstance(amount, int) and not isinstance(amount, bool):
                span.tokens = (span.tokens or 0) + amount
        elif node.event.kind in ("tool.result", "command.receipt"):
            outcome = body.get("outcome")
            if isinstance(outcome, str) and outcome not in ("ok", "") and not span.failed:
                span.failed = outcome.replace("_", " ")
        todo.extend(node.children)


def tree_build(run: Run, trace: Trace, *, findings: dict[str, list[str]] | None = None) -> SpanTree:
    """The window's rows (already read by the trace) as a tree, with their context before the window."""
    window = [row.event for row in trace.rows]
    context, capped = _context(run, window) if window else ([], False)
    findings = findings or {}
    rows = {row.event.event_id: row for row in trace.rows}
    events = sorted([*context, *window], key=lambda e: e.seq)
    by_id = {e.event_id: e for e in events}
    nodes: dict[tuple[str, str], Node] = {}
    roots: list[Node] = []
    parent_of: dict[tuple[str, str], tuple[str, str] | None] = {}
    order = 0

    def add(node: Node, parent: tuple[str, str] | None) -> Node:
        nonlocal order
        order += 1
        node.seq = order
        nodes[node.key] = node
        parent_of[node.key] = parent
        return node

    def attempt_node(ref: str) -> tuple[str, str]:
        key = ("attempt", ref or "none")
        if key not in nodes:
            add(Node(key, "attempt", ref or "none"), None)
        return key

    def span_node(span: str, source: str, ref: dict[str, Any], event: Event) -> tuple[str, str]:
        key = ("span", span)
        existing = nodes.get(key)
        if existing is not None:
            if event.event_id in rows:
                existing.context = False
            if existing.placeholder:  # a placeholder until now: its own events give its name and times
                existing.placeholder = False
                existing.label = str(ref.get("name") or existing.label)
                existing.span_type = str(ref.get("type") or "")
                existing.start_ns = _ns(ref.get("start_ns") if source == "otlp" else ref.get("start"))
                existing.end_ns = _ns(ref.get("end_ns") if source == "otlp" else ref.get("end"))
            return key
        node = add(
            Node(
                key,
                "span",
                str(ref.get("name") or f"span {span}"),
                span_type=str(ref.get("type") or ""),
                start_ns=_ns(ref.get("start_ns") if source == "otlp" else ref.get("start")),
                end_ns=_ns(ref.get("end_ns") if source == "otlp" else ref.get("end")),
            ),
            None,
        )
        parent_key = _span_parent(span, source, ref, event)
        parent_of[key] = parent_key
        if parent_key is None:
            parent_of[key] = attempt_node(event.attempt_ref)
        node.context = event.event_id not in rows
        return key

    def _span_parent(span: str, source: str, ref: dict[str, Any], event: Event) -> tuple[str, str] | None:
        parent = ref.get("parent")
        if not isinstance(parent, str) or parent == span:
            return None
        key = ("span", parent)
        if key in nodes:
            return key
        # A parent span none of whose events was read: a placeholder by its name when the ref gives it, above which
        # an Inspect event's `path` names the rest.
        if source == "inspect" and isinstance(ref.get("path"), list):
            chain = [p for p in ref["path"] if isinstance(p, list) and len(p) == 2]
            above: tuple[str, str] | None = None
            for sid, name in reversed(chain):
                k = ("span", str(sid))
                if k not in nodes:
                    add(Node(k, "span", str(name or f"span {sid}"), context=True, placeholder=True), above)
                    if above is None:
                        parent_of[k] = attempt_node(event.attempt_ref)
                above = k
            if key in nodes:
                return key
        name = ref.get("parent_name")
        add(
            Node(key, "span", str(name or f"span {parent}"), context=True, placeholder=True),
            attempt_node(event.attempt_ref),
        )
        return key

    for event in events:
        row = rows.get(event.event_id)
        if row is not None:
            label = row.summary
        else:
            label = row_summary(event.body)[0]
        found = _origin(event)
        span = found[1]["span"] if found else None
        parent: tuple[str, str] | None = None
        for ref in _parent_refs(event):
            target = by_id.get(ref)
            if target is not None and target.seq < event.seq and _span_of(target) == span:
                parent = ("event", target.event_id)
                break
        if parent is None:
            parent = span_node(span, found[0], found[1], event) if found and span else attempt_node(event.attempt_ref)
        wall = _dt_ns(event.wall_at)
        add(
            Node(
                ("event", event.event_id),
                "event",
                label,
                row=row,
                event=event,
                context=row is None,
                start_ns=wall,
                end_ns=wall,
                finding_codes=row.finding_codes if row else sorted(set(findings.get(event.event_id, []))),
            ),
            parent,
        )

    for key, node in nodes.items():
        parent_key = parent_of.get(key)
        if parent_key is None or parent_key not in nodes:
            roots.append(node)
        else:
            nodes[parent_key].children.append(node)

    for node in nodes.values():
        if node.kind == "span":
            _span_marks(node)

    def times(node: Node) -> None:
        for child in node.children:
            times(child)
        known = [(c.start_ns, c.end_ns) for c in node.children if c.start_ns is not None and c.end_ns is not None]
        if known:
            low, high = min(s for s, _ in known), max(e for _, e in known)
            # A span's own times (its ref) win; an event or an attempt spans its own and what is under it.
            if node.kind != "span" or node.start_ns is None:
                node.start_ns = low if node.start_ns is None else min(node.start_ns, low)
                node.end_ns = high if node.end_ns is None else max(node.end_ns, high)

    for root in roots:
        times(root)
    timed_nodes = [n for n in nodes.values() if n.start_ns is not None and n.end_ns is not None]
    low = min((n.start_ns for n in timed_nodes if n.start_ns is not None), default=0)
    high = max((n.end_ns for n in timed_nodes if n.end_ns is not None), default=0)
    span_ns = high - low
    timed = span_ns > 0
    for node in nodes.values():
        if timed and node.start_ns is not None and node.end_ns is not None:
            node.bar_x = int((node.start_ns - low) * WATERFALL_WIDTH / span_ns)
            node.bar_w = max(2, int((node.end_ns - node.start_ns) * WATERFALL_WIDTH / span_ns))
            node.bar_x = min(node.bar_x, WATERFALL_WIDTH - node.bar_w)
        else:
            node.start_ns = node.end_ns = None
    return SpanTree(
        roots=roots,
        by_spans=any(n.kind == "span" for n in nodes.values()),
        timed=timed,
        range_ns=span_ns,
        context_events=len(context),
        context_capped=capped,
    )
