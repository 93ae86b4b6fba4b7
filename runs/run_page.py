"""The run page's reads: synchronized panes, a focus and its causal neighbourhood, the lineage picture.

Every read here is windowed. However many events a run has, the page issues the same fixed set of
queries, each bounded by a LIMIT: a pane shows a window of its kinds plus the focused items of those
kinds, and the neighbourhood walk takes a fixed number of hops with a cap on how much it collects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Subquery
from django.db.models.fields.json import KT

from n17q_engine.lineage import CODES

from .lineage_picture import Picture, picture_build
from .models import Edge, Event, Finding, MaskedSecret, Run, RunObject

WINDOW = 40
NEIGHBOURHOOD_CAP = 150
OUT_HOPS = 4  # intent -> admission -> observation -> receipt; intent -> artifact -> workspace
IN_HOPS = 2  # intent <- decision, execution <- world change

# Which kinds each pane shows (DESIGN §3's vocabulary, grouped the way an investigator reads a run).
PANES: dict[str, tuple[str, tuple[str, ...]]] = {
    "attempts": ("Attempts", ("attempt.started", "attempt.ended", "run.state", "checkpoint", "budget.charged")),
    "workspaces": (
        "Workspaces and artifacts",
        ("workspace.created", "workspace.changed", "workspace.lifecycle", "artifact.created"),
    ),
    "evidence": (
        "Evidence",
        ("command.receipt", "evidence.observed", "evidence.admitted", "evidence.superseded", "waiver.granted"),
    ),
    "policy": ("Policy and approvals", ("policy.decision", "approval.recorded", "human.input")),
    "effects": ("Effects", ("effect.intent", "effect.execution", "world.transition", "world.observation")),
    "account": ("Final account", ("account.claim",)),
}
PANE_OF_KIND = {kind: pane for pane, (_, kinds) in PANES.items() for kind in kinds}


@dataclass
class Item:
    """One event as a pane shows it."""

    event: Event
    focused: bool = False
    related: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        return self.event.body

    @property
    def raw(self) -> str:
        return json.dumps(self.event.body, indent=2, ensure_ascii=False, sort_keys=True)


@dataclass
class Pane:
    key: str
    title: str
    total: int
    from_seq: int  # the window starts at the first event of the pane's kinds with seq >= from_seq
    items: list[Item]
    focused: list[Item]
    has_more: bool
    prev_from: int | None  # where the previous window starts; None on the first window

    @property
    def next_from(self) -> int:
        return self.items[-1].event.seq + 1 if self.items else self.from_seq


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


def _kind_total(run: Run, kinds: Iterable[str]) -> int:
    counts = run.kind_counts or {}
    return sum(counts.get(k, 0) for k in kinds)


def pane_build(run: Run, key: str, *, from_seq: int = 0, focus: Focus | None = None) -> Pane:
    """A window of the pane's kinds, by seq (keyset paging: a deep window costs what the first does)."""
    title, kinds = PANES[key]
    of_kinds = Event.objects.filter(run=run, kind__in=kinds)
    window = list(of_kinds.filter(seq__gte=from_seq).order_by("seq")[: WINDOW + 1])
    prev_from = None
    if from_seq > 0:
        before = list(of_kinds.filter(seq__lt=from_seq).order_by("-seq").values_list("seq", flat=True)[:WINDOW])
        prev_from = before[-1] if len(before) == WINDOW else 0
    has_more = len(window) > WINDOW
    window = window[:WINDOW]
    focused_ids = focus.neighbourhood if focus else set()
    in_window = {e.event_id for e in window}
    kind_set = set(kinds)
    focused_extra = [e for e in (focus.events if focus else []) if e.kind in kind_set and e.event_id not in in_window]
    items = [Item(e, focused=e.event_id in focused_ids) for e in window]
    focused = [Item(e, focused=True) for e in focused_extra]
    return Pane(
        key=key,
        title=title,
        total=_kind_total(run, kinds),
        from_seq=from_seq,
        items=items,
        focused=focused,
        has_more=has_more,
        prev_from=prev_from,
    )


def panes_annotate(run: Run, panes: list[Pane]) -> None:
    """Attach what each item needs from other events (a receipt's completion behind an admission, say).

    One query for all panes together, bounded by the number of items on the page.
    """
    items = [i for p in panes for i in (*p.focused, *p.items)]
    wanted: set[str] = set()
    for item in items:
        body = item.body
        for name in ("observation_id", "source", "call_id", "intent_id", "admission_id", "failure", "subject"):
            if isinstance(body.get(name), str):
                wanted.add(body[name])
        for name in ("supports", "admission_ids", "input_ids"):
            if isinstance(body.get(name), list):
                wanted.update(x for x in body[name] if isinstance(x, str))
    if not wanted:
        return
    wanted_ids = sorted(wanted)[:2000]
    by_id = {e.event_id: e for e in Event.objects.filter(run=run, event_id__in=wanted_ids).order_by()}
    # Admissions point at observations, which point at receipts: the receipts come in a second query
    # whose inner select always runs, so the page's query count does not depend on what the window
    # holds. (One query with an OR of the two made SQLite give up the (run, event_id) index.)
    behind_observations = (
        Event.objects.filter(run=run, kind="evidence.observed", event_id__in=wanted_ids)
        .order_by()
        .values(source=KT("body__source"))
    )
    by_id.update(
        {e.event_id: e for e in Event.objects.filter(run=run, event_id__in=Subquery(behind_observations)).order_by()}
    )
    for item in items:
        item.related = _related(item.body, by_id)


def _receipt_summary(receipt: Event | None) -> dict[str, Any] | None:
    if receipt is None or receipt.kind != "command.receipt":
        return None
    body = receipt.body
    results = body.get("results") or {}
    return {
        "id": receipt.event_id,
        "completion": body.get("completion"),
        "workspace": body.get("workspace_id"),
        "tree": body.get("post_tree") or body.get("pre_tree"),
        "failed": results.get("failed"),
        "passed": results.get("passed"),
        "suites": body.get("suites"),
    }


def _related(body: dict[str, Any], by_id: dict[str, Event]) -> dict[str, Any]:
    kind = body.get("kind")
    related: dict[str, Any] = {}
    if kind == "evidence.admitted":
        observation = by_id.get(body.get("observation_id") or "")
        source = by_id.get(observation.body.get("source") or "") if observation else None
        related["receipt"] = _receipt_summary(source)
        related["source_kind"] = source.kind if source else None
        related["source_id"] = source.event_id if source else None
    elif kind == "evidence.observed":
        related["receipt"] = _receipt_summary(by_id.get(body.get("source") or ""))
    elif kind == "account.claim":
        related["supports"] = [
            {"id": ref, "kind": by_id[ref].kind if ref in by_id else None, "receipt": _receipt_summary(by_id.get(ref))}
            for ref in body.get("supports") or []
        ]
    elif kind == "effect.intent":
        related["admissions"] = [
            {
                "id": ref,
                "workspace": by_id[ref].body.get("workspace_id") if ref in by_id else None,
                "purpose": by_id[ref].body.get("purpose") if ref in by_id else None,
            }
            for ref in body.get("admission_ids") or []
        ]
    elif kind == "policy.decision":
        related["inputs"] = [
            {"id": ref, "purpose": by_id[ref].body.get("purpose") if ref in by_id else None}
            for ref in body.get("input_ids") or []
        ]
    return related


def findings_for(run: Run, *, focus: Focus | None, limit: int = 100) -> list[dict[str, Any]]:
    rows = list(Finding.objects.filter(run=run).order_by("id")[:limit])
    focused = focus.neighbourhood | focus.objects if focus else set()
    return [
        {
            "finding": f,
            "title": CODES.get(f.code, f.code),
            "focused": bool(focus) and (f.from_ref in focused or f.to_ref in focused),
        }
        for f in rows
    ]


def timeline_window(run: Run, *, from_seq: int = 0) -> tuple[list[Event], bool]:
    """Every event, in append order, a window at a time from `from_seq` (the raw log behind the panes)."""
    rows = list(Event.objects.filter(run=run, seq__gte=from_seq).order_by("seq")[: WINDOW + 1])
    return rows[:WINDOW], len(rows) > WINDOW


@dataclass
class RunPage:
    run: Run
    focus: Focus | None
    panes: list[Pane]
    findings: list[dict[str, Any]]
    picture: Picture
    timeline: list[Event]
    timeline_from: int
    timeline_more: bool
    masked_secrets: list[MaskedSecret] = field(default_factory=list)

    @property
    def pane_map(self) -> dict[str, Pane]:
        return {p.key: p for p in self.panes}

    @property
    def timeline_next(self) -> int:
        return self.timeline[-1].seq + 1 if self.timeline else self.timeline_from


def _seq_param(value: Any) -> int:
    """A seq from a query parameter; anything that is not a non-negative integer means the start."""
    try:
        return max(0, min(int(value), 10**9))
    except (TypeError, ValueError):
        return 0


MASKED_SECRETS_SHOWN = 200


def page_build(
    run: Run,
    *,
    focus_ref: str = "",
    starts: dict[str, Any] | None = None,
    picture_start: Any = None,
    only_pane: str | None = None,
) -> RunPage:
    starts = starts or {}
    focus = focus_resolve(run, focus_ref[:200]) if focus_ref else None
    keys = [only_pane] if only_pane in PANES else list(PANES)
    panes = [pane_build(run, key, from_seq=_seq_param(starts.get(key)), focus=focus) for key in keys]
    panes_annotate(run, panes)
    if only_pane in PANES:
        return RunPage(run, focus, panes, [], Picture([], [], [], [], 0, 0, 0, False, 0), [], 0, False)
    start = _seq_param(picture_start) if picture_start not in (None, "") else None
    timeline_from = _seq_param(starts.get("timeline"))
    timeline, timeline_more = timeline_window(run, from_seq=timeline_from)
    return RunPage(
        run=run,
        focus=focus,
        panes=panes,
        findings=findings_for(run, focus=focus),
        picture=picture_build(run, focus=focus, start_seq=start),
        timeline=timeline,
        timeline_from=timeline_from,
        timeline_more=timeline_more,
        # Read only when the run has any (its count is a column): a run without one costs no query.
        masked_secrets=list(MaskedSecret.objects.filter(run=run).order_by("id")[:MASKED_SECRETS_SHOWN])
        if run.masked_secret_count
        else [],
    )


def _short(digest: Any) -> str:
    text = str(digest or "")
    return text[:15] + "…" if text.startswith("sha256:") and len(text) > 15 else text


# The facts each pane item shows: (label, field) pairs read straight from the event, in the product's
# own words; the few facts that combine fields or come from related events are added in `describe`.
_FACTS: dict[str, tuple[tuple[str, str], ...]] = {
    "attempt.started": (("reason", "reason"), ("parent attempt", "parent_attempt_id")),
    "attempt.ended": (("attempt", "attempt"), ("outcome", "outcome")),
    "run.state": (("state", "state"), ("reason", "reason")),
    "checkpoint": (("world revision", "world_revision"),),
    "workspace.created": (("workspace", "workspace_id"),),
    "workspace.changed": (("workspace", "workspace_id"), ("overlay revision", "overlay_revision")),
    "workspace.lifecycle": (("workspace", "workspace_id"), ("state", "state")),
    "artifact.created": (("artifact", "artifact_id"), ("workspace", "workspace_id")),
    "command.receipt": (("command", "command"), ("workspace", "workspace_id")),
    "evidence.observed": (("source", "source"), ("workspace", "workspace_id"), ("scope", "scope")),
    "evidence.admitted": (
        ("purpose", "purpose"),
        ("decision", "decision"),
        ("for artifact", "artifact_id"),
        ("workspace", "workspace_id"),
    ),
    "evidence.superseded": (("admission", "admission_id"), ("cause", "cause")),
    "waiver.granted": (("failure", "failure"), ("suite", "suite"), ("by", "actor_role"), ("rationale", "rationale")),
    "policy.decision": (("outcome", "outcome"), ("subject", "subject")),
    "approval.recorded": (("decision", "decision"), ("subject", "subject"), ("origin", "origin")),
    "human.input": (("by", "actor_role"), ("action", "action"), ("note", "note")),
    "effect.intent": (("artifact", "artifact_id"),),
    "effect.execution": (
        ("intent", "intent_id"),
        ("attempt", "attempt_no"),
        ("stage", "stage"),
        ("outcome", "outcome"),
        ("connection", "connection"),
    ),
    "world.transition": (("resource", "resource"),),
    "world.observation": (("resource", "resource"), ("world revision", "world_revision")),
    "account.claim": (("claim", "claim_kind"), ("text", "text")),
}
# Digests shown shortened, by field.
_TREES = {"tree_digest": "tree", "post_tree": "tree", "evidence_set_digest": "evidence set"}


def describe(body: dict[str, Any], related: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts a pane shows for one event, as (label, value) pairs, in the product's own words."""
    k = body.get("kind")
    out: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            out.append((label, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))

    if k == "attempt.started":
        add("attempt", f"{body.get('attempt')} (#{body.get('number')})")
    for label, name in _FACTS.get(str(k), ()):
        add(label, body.get(name))
    for name, label in _TREES.items():
        if name in body:
            add(label, _short(body.get(name)))

    if k == "checkpoint":
        add("workspaces", ", ".join(f"{w} {_short(t)}" for w, t in (body.get("workspaces") or {}).items()))
    elif k == "budget.charged":
        add(str(body.get("resource")), body.get("amount"))
    elif k == "workspace.created":
        derived = body.get("derived_from")
        if derived:
            equal = "content equal" if derived.get("content_equal") else "content differs"
            add("derived from", f"{derived.get('workspace_id')} by {derived.get('relation')} ({equal})")
        add("base", _short(body.get("base_digest")))
        add("initial overlay", _short(body.get("overlay_digest")))
        add("inherited edits", ", ".join(body.get("overlay_files") or []))
    elif k == "workspace.lifecycle":
        add("cleanup receipt", body.get("cleanup_receipt_id") or "none")
    elif k == "artifact.created":
        add("files", ", ".join(body.get("files") or []))
    elif k == "command.receipt":
        results = body.get("results") or {}
        add("completion", body.get("completion"))
        add(
            "results",
            f"{results.get('passed', '?')} passed, {results.get('failed', '?')} failed, "
            f"{results.get('skipped', 0)} skipped",
        )
        add("exit code", "none" if body.get("exit_code") is None else str(body.get("exit_code")))
    elif k == "evidence.admitted":
        receipt = related.get("receipt")
        if receipt:
            add(
                "receipt",
                f"{receipt['id']} in {receipt['workspace']}: {receipt['completion']}, {receipt['failed']} failed",
            )
        compat = body.get("compatibility")
        add("compatibility", f"{compat.get('rule')}: {compat.get('rationale')}" if compat else "none recorded")
    elif k == "policy.decision":
        add("required", ", ".join(body.get("required") or []) or "nothing")
        add("inputs", ", ".join(f"{i['id']} ({i['purpose']})" for i in related.get("inputs", [])) or "none")
        add("policy", body.get("policy_revision"))
    elif k == "approval.recorded":
        add("from run", f"{body.get('run')} ({body.get('environment')})")
    elif k == "effect.intent":
        add("effect", f"{body.get('effect_class')} to {body.get('destination')}")
        admissions = related.get("admissions", [])
        add("admissions", ", ".join(f"{a['id']} ({a['purpose']}, {a['workspace']})" for a in admissions) or "none")
        add("approval", body.get("approval_id") or "none")
        add("namespace", body.get("namespace"))
        add("idempotency key", body.get("idempotency_key"))
        add("historical intent", body.get("historical_intent"))
    elif k == "world.transition":
        before = body.get("revision_before")
        add("revision", f"{'new' if before is None else before} → {body.get('revision_after')}")
        add("change", body.get("change"))
        add("cause", body.get("cause"))
    elif k == "account.claim":
        add(
            "supports",
            ", ".join(
                s["id"] + (f" ({s['receipt']['completion']}, {s['receipt']['failed']} failed)" if s["receipt"] else "")
                for s in related.get("supports", [])
            )
            or "nothing",
        )
    return out
