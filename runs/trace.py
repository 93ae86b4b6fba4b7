"""The trace: every event of a run in a compact timeline, a window at a time, filtered by facet, searchable.

Each event belongs to one family (DESIGN §3's vocabulary grouped the way an investigator reads a run); the
families are the trace's facets and give each row its glyph and colour. Windows are keyset pages on
(run, seq) or (run, kind, seq): a window deep in a run of a million events costs what the first one does.
Search within the run reads at most SEARCH_SPAN events per request, from where the window starts, and says
how far it looked: a search never scans a whole large run behind the investigator's back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from console.digests import digest_short

from .models import Event, Run

TRACE_WINDOW = 60
SEARCH_SPAN = 20_000
SEARCH_MAX_CHARS = 200


@dataclass(frozen=True)
class Family:
    key: str
    title: str
    glyph: str  # shape first (the picture's shape for the family): the meaning survives without colour
    kinds: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family(
        "attempts",
        "Attempts and state",
        "◆",
        ("attempt.started", "attempt.ended", "run.state", "checkpoint", "budget.charged", "clock.advanced"),
    ),
    Family("calls", "Model and tool calls", "▬", ("model.proposal", "tool.call", "tool.result")),
    Family(
        "workspaces",
        "Workspaces and artifacts",
        "■",
        ("workspace.created", "workspace.changed", "workspace.lifecycle", "artifact.created"),
    ),
    Family(
        "evidence",
        "Evidence",
        "●",
        ("command.receipt", "evidence.observed", "evidence.admitted", "evidence.superseded", "waiver.granted"),
    ),
    Family("policy", "Policy and approvals", "▲", ("policy.decision", "approval.recorded", "human.input")),
    Family(
        "effects",
        "Effects and world",
        "★",
        ("effect.intent", "effect.execution", "world.transition", "world.observation"),
    ),
    Family(
        "replay",
        "Replay and sandbox",
        "✖",
        ("replay.scope", "fixture.missing", "fixture.ambiguous", "sandbox.violation"),
    ),
    Family("account", "Final account", "⬢", ("account.claim",)),
    # Issue 38: what reviewers added after the run (runs/annotations.py), appended after its last event.
    Family(
        "annotations",
        "Annotations and corrections",
        "✎",
        # A qualitative assessment (issue 39) is a reviewer's addition too; never part of the verdict.
        ("annotation.recorded", "annotation.correction", "review.assessment"),
    ),
)
FAMILY_BY_KEY = {f.key: f for f in FAMILIES}
FAMILY_OF_KIND = {kind: f for f in FAMILIES for kind in f.kinds}


def family_of(kind: str) -> Family:
    return FAMILY_OF_KIND.get(kind, FAMILY_BY_KEY["attempts"])


@dataclass
class TraceRow:
    event: Event
    family: Family
    summary: str
    badges: list[tuple[str, str]]  # (css modifier, text)
    in_focus: bool = False
    is_focus: bool = False  # the focused event itself
    selected: bool = False
    finding_codes: list[str] = field(default_factory=list)
    attempt_break: bool = False  # the first row of a new attempt in this window


@dataclass
class Trace:
    rows: list[TraceRow]
    facets: list[str]  # chosen facet keys; empty means every family
    query: str
    from_seq: int
    has_more: bool
    prev_from: int | None
    total: int  # events of the chosen facets in the run
    # Search: how far this window looked, and where to go on when it looked no further than SEARCH_SPAN.
    searched_to: int | None = None
    search_exhausted: bool = False
    narrowed: bool = False  # only the focus's neighbourhood is listed

    @property
    def next_from(self) -> int:
        if self.query and self.searched_to is not None and not self.rows:
            return self.searched_to
        return self.rows[-1].event.seq + 1 if self.rows else self.from_seq


def facets_parse(values: list[str]) -> list[str]:
    return [key for key in dict.fromkeys(values) if key in FAMILY_BY_KEY]


def _clip(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def row_summary(body: dict[str, Any], *, tool: str | None = None) -> tuple[str, list[tuple[str, str]]]:
    """One line a person reads instead of the event's JSON, and the badges that matter at a glance.

    `tool` is the tool of a result's call (the result itself names only the call).
    """
    kind = body.get("kind")
    badges: list[tuple[str, str]] = []

    def get(name: str) -> Any:
        value = body.get(name)
        return "—" if value is None else value

    if kind == "tool.call":
        text = f"{get('tool')} {_clip(str(get('request')), 70)}"
    elif kind == "tool.result":
        origin = str(body.get("origin") or "")
        badges.append((f"origin-{origin}", origin))
        outcome = str(body.get("outcome") or "")
        if outcome != "ok":
            badges.append(("outcome", outcome.replace("_", " ")))
        for path, how in sorted((body.get("absent") or {}).items()):
            badges.append((f"absent-{how}", f"{path}: {str(how).replace('_', ' ')}"))
        freshness = body.get("freshness")
        if isinstance(freshness, dict) and freshness.get("state") == "stale":  # seed 000: stale, served as recorded
            badges.append(("bad", "stale"))
        text = f"{outcome} from {tool}" if tool else f"{outcome} for {get('call_id')}"
    elif kind == "model.proposal":
        proposal = body.get("proposal") or {}
        kind_of = proposal.get("type")
        text = f"proposes {proposal.get('tool') if kind_of == 'tool_call' else kind_of}"
        if get("accepted") is False:
            badges.append(("outcome", "not accepted"))
    elif kind == "command.receipt":
        results = body.get("results") or {}
        completion = str(body.get("completion") or "")
        if completion != "completed":
            badges.append(("warn", completion.replace("_", " ")))
        if results.get("failed"):
            badges.append(("bad", f"{results.get('failed')} failed"))
        text = f"{_clip(str(get('command')), 60)} in {get('workspace_id')}"
    elif kind == "evidence.admitted":
        text = f"{get('purpose')}" + (f" for {body['artifact_id']}" if body.get("artifact_id") else "")
        text += f" from {body['workspace_id']}" if body.get("workspace_id") else ""
        if get("decision") != "admitted":
            badges.append(("bad", str(get("decision"))))
    elif kind == "evidence.observed":
        text = f"from {get('source')}" + (f" in {body['workspace_id']}" if body.get("workspace_id") else "")
    elif kind == "policy.decision":
        text = f"{get('outcome')} {get('subject')}"
    elif kind == "approval.recorded":
        origin = str(body.get("origin") or "")
        badges.append((f"origin-{origin}", origin))
        text = f"{get('decision')} {get('subject')} from run {get('run')} ({get('environment')})"
    elif kind == "effect.intent":
        text = f"{get('effect_class')} to {get('destination')}"
        badges.append(("namespace", str(get("namespace"))))
    elif kind == "effect.execution":
        text = f"{get('outcome')} {get('intent_id')} via {get('connection')}"
    elif kind == "world.transition":
        change = body.get("change")
        op = change.get("op") if isinstance(change, dict) else None
        before = get("revision_before")
        text = f"{get('resource')} {'new' if before is None else before} → {get('revision_after')}" + (
            f": {op}" if op else ""
        )
        if isinstance(change, dict) and change.get("duplicate_of"):
            badges.append(("bad", "duplicate"))
    elif kind == "world.observation":
        text = f"{get('resource')} at revision {get('world_revision')}"
    elif kind in ("workspace.created", "workspace.changed", "workspace.lifecycle"):
        text = str(get("workspace_id")) + (f" {get('state')}" if kind == "workspace.lifecycle" else "")
        if kind == "workspace.changed":
            text += f" tree {digest_short(get('tree_digest'))}"
    elif kind == "artifact.created":
        text = f"{get('artifact_id')}" + (f" in {body['workspace_id']}" if body.get("workspace_id") else "")
        text += f" ({get('media_type')})"
    elif kind == "account.claim":
        text = f"{get('claim_kind')}: {_clip(str(get('text')), 80)}"
        if body.get("origin") == "extracted":
            # Read from the final answer's prose by the importer, not stated by the harness (seed 003).
            text = f"{text} (extracted from {body.get('extracted_from')})"
            badges.append(("extracted", "extracted, not stated"))
    elif kind in ("attempt.started", "attempt.ended"):
        text = str(body.get("reason") or body.get("outcome") or "")
    elif kind == "run.state":
        text = f"{get('state')}" + (f": {body['reason']}" if body.get("reason") else "")
    elif kind in ("fixture.missing", "fixture.ambiguous"):
        text = f"{get('tool')} {body.get('reason') or ''}"
        badges.append(("bad", "stopped"))
    elif kind == "sandbox.violation":
        text = f"{get('attempted')} {get('target')}"
        badges.append(("bad", "violation"))
    elif kind == "budget.charged":
        text = f"{get('amount')} {get('resource')}"
    elif kind == "checkpoint":
        text = f"world revision {get('world_revision')}"
    elif kind == "clock.advanced":
        text = f"{get('from')} → {get('to')}"
    elif kind == "review.assessment":
        held = body.get("reviewer")
        reviewer: dict[str, Any] = held if isinstance(held, dict) else {}
        text = f"{get('dimension')} {get('score')}/5 by {reviewer.get('kind')} {reviewer.get('name')}"
        badges.append(("assessment", "qualitative, not in the verdict"))
    elif kind == "annotation.recorded":
        what = body.get("annotation")
        on = f"on {body['subject']}" if body.get("subject") else "on the run"
        if isinstance(body.get("finding"), dict):
            on = f"on {body['finding'].get('code')} {body['finding'].get('from_id')}"
        said = f"{body.get('name')} {body.get('value')}" if what == "score" else body.get("name") or body.get("text")
        text = f"{what} {on}: {_clip(str(said or ''), 60)} by {get('author')}"
    elif kind == "annotation.correction":
        text = f"{get('subject')}.{get('field')}: {get('recorded')} → {get('corrected')} by {get('author')}"
        badges.append(("warn", "correction"))
    elif kind == "replay.scope":
        scenario = body.get("scenario") or {}
        text = f"{scenario.get('name')}@{scenario.get('version')} {get('scope')}, isolation {get('isolation')}"
    else:
        text = ""
    return _clip(text, 110), badges


def _search_filter(qs: Any, query: str) -> Any:
    # The event as stored, as text: ids, kinds, tools, destinations, commands and every other field.
    return qs.annotate(_text=Cast("body", TextField())).filter(_text__icontains=query)


def trace_window(
    run: Run,
    *,
    facets: list[str],
    query: str = "",
    from_seq: int = 0,
) -> Trace:
    """A window of the trace: the chosen families' events from `from_seq`, matching `query` when one is given."""
    kinds = [k for key in facets for k in FAMILY_BY_KEY[key].kinds]
    base = Event.objects.filter(run=run)
    if kinds:
        base = base.filter(kind__in=kinds)
    counts = run.kind_counts or {}
    total = sum(counts.get(k, 0) for k in kinds) if kinds else run.event_count
    query = query.strip()[:SEARCH_MAX_CHARS]
    searched_to = None
    exhausted = False
    if query:
        span_end = from_seq + SEARCH_SPAN
        window = list(
            _search_filter(base.filter(seq__gte=from_seq, seq__lt=span_end), query).order_by("seq")[: TRACE_WINDOW + 1]
        )
        full = len(window) > TRACE_WINDOW
        window = window[:TRACE_WINDOW]
        # Asked whatever the window holds, so that a search costs the same queries on any run.
        beyond_span = Event.objects.filter(run=run, seq__gte=span_end).exists()
        if full:
            searched_to, has_more = window[-1].seq + 1, True
        else:
            searched_to, exhausted, has_more = span_end, not beyond_span, beyond_span
    else:
        window = list(base.filter(seq__gte=from_seq).order_by("seq")[: TRACE_WINDOW + 1])
        has_more = len(window) > TRACE_WINDOW
        window = window[:TRACE_WINDOW]
    prev_from = None
    if from_seq > 0 and not query:
        before = list(base.filter(seq__lt=from_seq).order_by("-seq").values_list("seq", flat=True)[:TRACE_WINDOW])
        prev_from = before[-1] if len(before) == TRACE_WINDOW else 0
    elif from_seq > 0:
        prev_from = max(0, from_seq - SEARCH_SPAN)
    return Trace(
        rows=rows_of(run, window),
        facets=facets,
        query=query,
        from_seq=from_seq,
        has_more=has_more,
        prev_from=prev_from,
        total=total,
        searched_to=searched_to,
        search_exhausted=exhausted,
    )


def call_tools(run: Run, events: list[Event]) -> dict[str, str]:
    """The tool of each result's call, for the results among `events`: one query, bounded by the window."""
    call_ids = {e.body.get("call_id") for e in events if e.kind == "tool.result"}
    wanted = sorted(c for c in call_ids if isinstance(c, str))
    if not wanted:
        return {}
    # Through the (run, event_id) index alone: a kind condition here tempts SQLite onto (run, kind, seq) and a
    # walk of every call of the run (63 ms at 100,000 events, ten times that at 1,000,000).
    rows = Event.objects.filter(run=run, event_id__in=wanted).order_by()
    return {
        event_id: str(tool)
        for event_id, kind, tool in rows.values_list("event_id", "kind", KT("body__tool"))
        if kind == "tool.call"
    }


def delivery_badges(run: Run) -> dict[str, tuple[str, str]]:
    """The badge of each world change the run's facts (runs/facts.py) count as a delivery of an intent: "delivery",
    or "second delivery" (bad) for every one after an intent's first. No query when the facts are stored."""
    from .facts import facts_of

    marks: dict[str, tuple[str, str]] = {}
    for item in facts_of(run)["effects"]["items"]:
        for n, change in enumerate(item["delivery_events"]):
            marks[change] = ("bad", "second delivery of one intent") if n else ("delivery", "delivery")
    return marks


def rows_of(run: Run, events: list[Event]) -> list[TraceRow]:
    tools = call_tools(run, events)
    marks = delivery_badges(run) if any(e.kind == "world.transition" for e in events) else {}
    rows = []
    previous_attempt: str | None = None
    for index, event in enumerate(events):
        summary, badges = row_summary(event.body, tool=tools.get(str(event.body.get("call_id"))))
        if event.event_id in marks:
            badges = [*badges, marks[event.event_id]]
        rows.append(
            TraceRow(
                event=event,
                family=family_of(event.kind),
                summary=summary,
                badges=badges,
                attempt_break=index == 0 or event.attempt_ref != previous_attempt,
            )
        )
        previous_attempt = event.attempt_ref
    return rows


def trace_narrowed(run: Run, events: list[Event], *, facets: list[str]) -> Trace:
    """The trace narrowed to a focus's neighbourhood (already read, at most NEIGHBOURHOOD_CAP events)."""
    kinds = {k for key in facets for k in FAMILY_BY_KEY[key].kinds}
    chosen = [e for e in events if not kinds or e.kind in kinds]
    return Trace(
        rows=rows_of(run, chosen),
        facets=facets,
        query="",
        from_seq=0,
        has_more=False,
        prev_from=None,
        total=len(chosen),
        narrowed=True,
    )
