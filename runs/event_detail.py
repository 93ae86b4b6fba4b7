"""The detail panel: one event for people — its facts, its references both ways, its blobs rendered, its badges.

A fixed set of bounded queries whatever the run's size: the event by (run, event_id), what its facts need from
related events (two queries), its references out and in (each capped), the blobs it names, the findings it is
an end of, and its masked secrets when the run has any.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from n17q_engine.lineage import CODES

from .blob_preview import BlobPreview, blob_preview
from .conversations import Conversation, conversation_of
from .event_facts import Item, describe, items_annotate
from .facts import facts_of
from .models import Edge, Event, Finding, MaskedSecret, Run, RunBlob
from .retention import Expiry, blob_expiries, run_blob_expiries
from .source_span import SourceSpan, source_span_of
from .trace import Family, call_tools, family_of, row_summary

REFS_SHOWN = 30
FINDINGS_SHOWN = 20
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Where an original the secret scan could not read whole was named, the run names its keyed digest (runs.secret_scan).
_KEYED_DIGEST = re.compile(r"^hmac:[0-9a-f]{64}$")
ABSENCE_WORDS = {
    "absent": "absent",
    "redacted": "redacted",
    "unavailable": "unavailable",
    "not_applicable": "not applicable",
}


@dataclass
class Reference:
    field: str
    ref: str
    kind: str | None  # None: the reference names nothing in the run (LIN011)
    event_id: str | None


@dataclass
class EventDetail:
    event: Event
    family: Family
    summary: str
    facts: list[tuple[str, str]]
    badges: list[tuple[str, str]]
    refs_out: list[Reference]
    refs_in: list[Reference]
    refs_in_more: bool
    blobs: list[BlobPreview]
    named_blobs: list[tuple[str, str]]  # (field, digest) the event names whose bytes the run does not hold
    # (field, expiry) the event names whose bytes the retention sweep removed before this run was made
    findings: list[dict[str, Any]]
    masked: list[MaskedSecret] = field(default_factory=list)
    named_expired: list[tuple[str, Expiry]] = field(default_factory=list)
    named_not_kept: list[tuple[str, str]] = field(default_factory=list)  # (field, keyed digest) of originals not kept
    source_span: SourceSpan | None = None  # a converted trace's event: the span it came from (runs/source_span.py)
    # An approval's review object (issue 34), from the run's facts: its digest, the harness's, what changed of it
    # between the approval and its intent's action, whether it still binds. None for other events.
    review: dict[str, Any] | None = None
    # A model call (a model.proposal, a native model.chat tool.call) as a conversation (runs/conversations.py).
    conversation: Conversation | None = None

    @property
    def workspace_row(self) -> str:
        """The event's workspace for the panel's own row, or "" when its facts already name it (issue 38's tour: a
        `tool.call` listed its workspace twice)."""
        if any(label == "workspace" for label, _value in self.facts):
            return ""
        return self.event.workspace_ref or ""

    @property
    def raw(self) -> str:
        return json.dumps(self.event.body, indent=2, ensure_ascii=False, sort_keys=True)


def digests_in(
    body: Any, path: str = "", depth: int = 0, *, pattern: re.Pattern[str] = _DIGEST
) -> list[tuple[str, str]]:
    """Every (field path, digest) in the event that could name a blob; bounded in depth."""
    out: list[tuple[str, str]] = []
    if depth > 6:
        return out
    if isinstance(body, dict):
        for key, value in body.items():
            out.extend(digests_in(value, f"{path}.{key}" if path else str(key), depth + 1, pattern=pattern))
    elif isinstance(body, list):
        for index, value in enumerate(body[:50]):
            out.extend(digests_in(value, f"{path}[{index}]", depth + 1, pattern=pattern))
    elif isinstance(body, str) and pattern.match(body):
        out.append((path, body))
    return out


def event_detail_build(run: Run, event_id: str) -> EventDetail | None:
    event = next(iter(Event.objects.filter(run=run, event_id=event_id[:200]).order_by()[:1]), None)
    if event is None:
        return None
    item = Item(event)
    items_annotate(run, [item])
    summary, badges = row_summary(event.body, tool=call_tools(run, [event]).get(str(event.body.get("call_id"))))
    body = event.body
    if event.kind == "tool.result" and body.get("blob") is None:
        badges.append(("absent-absent", f"no body ({body.get('outcome')})"))
    freshness = body.get("freshness") if event.kind == "tool.result" else None
    if isinstance(freshness, dict) and freshness.get("state") == "stale":
        badges.append(("bad", "stale at its logical time (served as recorded)"))
    refs_out = [
        Reference(field=f, ref=ref, kind=kind, event_id=target)
        for f, ref, kind, target in Edge.objects.filter(source=event)
        .order_by("id")
        .values_list("field", "target_ref", "target_event__kind", "target_event__event_id")[:REFS_SHOWN]
    ]
    incoming = list(
        Edge.objects.filter(target_event=event)
        .order_by("id")
        .values_list("field", "source__event_id", "source__kind")[: REFS_SHOWN + 1]
    )
    refs_in = [Reference(field=f, ref=src, kind=kind, event_id=src) for f, src, kind in incoming[:REFS_SHOWN]]
    source_span = source_span_of(run, body)
    # The blob a converted event's span is kept in (the whole original export, or a JSON chunk of spans) is shown
    # as that one span, not previewed again below.
    skipped = ("id", "kind", "seq", "at", "attempt", "otlp" if source_span else "")
    named = digests_in({k: v for k, v in body.items() if k not in skipped})
    stored = {
        rb.blob.digest: rb
        for rb in RunBlob.objects.filter(run=run, blob__digest__in=sorted({d for _, d in named})[:50]).select_related(
            "blob", "hold__removed_by"
        )
    }
    # A digest of the event names a blob only where the vocabulary says so; other digests (trees, contexts)
    # are identities, not bytes the run was meant to carry.
    blob_fields = {"blob", "output_blob"}
    named_missing = [(f, d) for f, d in named if d not in stored and f.split(".")[-1] in blob_fields]
    # Bytes the retention sweep removed are disclosed with their deletion record, whether this run's bundle carried
    # them or (a reconstruction made after they expired) could not: one query, and only when something expired.
    # This run's own holds answer for what it holds (per holder); a digest it only names answers as the blob does.
    expiries = {
        **blob_expiries([d for _, d in named_missing]),
        **run_blob_expiries(run, [d for d, rb in stored.items() if rb.bytes_removed]),
    }
    blobs: list[BlobPreview] = []
    seen: set[str] = set()
    for _, digest in named:
        rb = stored.get(digest)
        if rb is not None and digest not in seen:
            seen.add(digest)
            blobs.append(blob_preview(rb, expiry=expiries.get(digest)))
    named_expired = [(f, expiries[d]) for f, d in named_missing if d in expiries]
    named_missing = [(f, d) for f, d in named_missing if d not in expiries]
    findings = [
        {"finding": f, "title": CODES.get(f.code, f.code)}
        for f in Finding.objects.filter(run=run)
        .filter(Q(from_ref=event.event_id) | Q(to_ref=event.event_id))
        .order_by("id")[:FINDINGS_SHOWN]
    ]
    masked = (
        list(MaskedSecret.objects.filter(run=run, event=event).order_by("id")[:REFS_SHOWN])
        if run.masked_secret_count
        else []
    )
    if masked:
        badges.append(("absent-redacted", f"{len(masked)} secret{'s' if len(masked) != 1 else ''} masked"))
    return EventDetail(
        event=event,
        family=family_of(event.kind),
        summary=summary,
        facts=describe(body, item.related),
        badges=badges,
        refs_out=refs_out,
        refs_in=refs_in,
        refs_in_more=len(incoming) > REFS_SHOWN,
        blobs=blobs,
        named_blobs=named_missing,
        named_expired=named_expired,
        named_not_kept=digests_in(body, pattern=_KEYED_DIGEST) if run.masked_secret_count else [],
        findings=findings,
        masked=masked,
        source_span=source_span,
        review=_approval_review(run, event) if event.kind == "approval.recorded" else None,
        conversation=conversation_of(run, event),
    )


def _approval_review(run: Run, event: Event) -> dict[str, Any] | None:
    """The approval's entry in the run's facts, when it has a review object (stored with the run: no query)."""
    for item in facts_of(run)["approvals"]["items"]:
        if item.get("id") == event.event_id and item.get("review_digest"):
            return item
    return None
