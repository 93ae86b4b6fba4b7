"""Writing a run's events: a flat span as the converter walks it (`_Span`), and the base of the trace converter
(`_EventWriter`): the state a conversion builds (the report, the pending events, the ids taken), `_emit` (one event
of a span, with the key that orders it) and `_finish` (the events sorted into seq order, each tool call linked to
the model proposal that asked for it). What any span maps to is `spans`'; the run as a whole, `mapping`'s."""

from __future__ import annotations

from typing import Any

from n17q_engine.canonical import canonical_json

from .. import ConversionError, ConversionReport, ConvertedRun
from .sources import SpanBytes
from .text import _iso, _one_line

# Payloads (messages, tool arguments shown beside the request, outputs) larger than this become blobs.
INLINE_PAYLOAD_BYTES = 1024
# Short strings a person reads in an event (a reason, an error message) are cut here; the whole is in the span.
MAX_TEXT_CHARS = 500


# A tool span's events name the spans above it (`otlp.ancestors`), so a span subtree's tool results can be chosen
# without the trace's other spans; a deeper tree names its nearest MAX_ANCESTORS.
MAX_ANCESTORS = 64


class _Span:
    """A flat span and what the walk learns about it."""

    __slots__ = ("attrs", "blob", "depth", "index", "order", "parent", "raw", "ref", "role", "used", "used_prefixes")

    def __init__(self, raw: dict[str, Any], index: int):
        self.raw = raw
        self.index = index
        self.attrs: dict[str, Any] = raw["attributes"]
        self.depth = 0
        self.parent: _Span | None = None
        self.order = 0
        self.blob = ""
        self.used: set[str] = set()
        self.used_prefixes: list[str] = []
        self.role = ""
        self.ref: dict[str, Any] = {}

    @property
    def hex(self) -> str:
        return str(self.raw["span_id"])

    @property
    def name(self) -> str:
        return str(self.raw["name"])

    def ancestors(self, limit: int = MAX_ANCESTORS) -> list[str]:
        """The span ids above this span in the trace, nearest first (at most `limit`; the tree is cycle-free once
        `_link_tree` has cut what a corrupt export closed)."""
        out: list[str] = []
        node = self.parent
        while node is not None and len(out) < limit:
            out.append(node.hex)
            node = node.parent
        return out

    def take(self, key: str) -> Any:
        """The attribute's value, marking it mapped."""
        value = self.attrs.get(key)
        if value is not None:
            self.used.add(key)
        return value

    def where(self) -> str:
        return f"span {_one_line(self.name, 80)!r} ({self.hex})"


class _EventWriter:
    """The trace converter's state and its writing of events (`_SpanMapper` maps spans onto it, `_TraceConverter`
    makes the run)."""

    # Set by `_TraceConverter.convert` before any event is written.
    converted: ConvertedRun
    root: _Span
    run: dict[str, Any]

    def __init__(
        self,
        spans: list[dict[str, Any]],
        original: bytes | None,
        original_media_type: str,
        span_bytes: dict[tuple[str, str], SpanBytes] | None = None,
        original_digest: str | None = None,
    ):
        trace_id = spans[0].get("trace_id")
        self.trace_id = str(trace_id)
        self.report = ConversionReport("otlp")
        self.spans: list[_Span] = []
        seen: dict[str, _Span] = {}
        duplicates = 0
        for i, raw in enumerate(spans):
            if not isinstance(raw, dict) or "span_id" not in raw or "attributes" not in raw:
                raise ConversionError(f"spans[{i}] is not a flat span (from flatten_spans)")
            if raw.get("trace_id") != trace_id:
                raise ConversionError(
                    f"spans[{i}] belongs to trace {raw.get('trace_id')}, not {trace_id}: one run is one trace"
                )
            if raw["span_id"] in seen:
                # An exporter that retried, or a file concatenated twice: the first copy is mapped, every copy kept.
                duplicates += 1
                continue
            span = _Span(raw, i)
            seen[raw["span_id"]] = span
            self.spans.append(span)
        if duplicates:
            self.report.unmapped["duplicate span (same span id; the first is mapped, all are kept)"] += duplicates
        self.by_id = seen
        self.original = original
        self.original_media_type = original_media_type
        self.span_bytes = span_bytes
        self.known_original_digest = original_digest
        # (sort key, event) pairs; the key orders them, seq and times come after sorting.
        self.pending: list[tuple[tuple[int, int, int, int, int], dict[str, Any]]] = []
        self.ids: set[str] = set()
        self.attempt = "attempt-1"
        self.workspace_default: str | None = None
        self.charged_below: set[int] = set()

    # ---- writing events

    def _emit(
        self,
        span: _Span,
        kind: str,
        fields: dict[str, Any],
        *,
        at_end: bool = False,
        at_ns: int | None = None,
        sub: int = 0,
        suffix: str,
        mapped: str,
        event_id: str | None = None,
    ) -> str:
        raw = span.raw
        if at_ns is not None:
            when = min(max(at_ns, raw["start_ns"]), max(raw["end_ns"], raw["start_ns"]))
            key = (when, 0, span.depth, span.order, 10 + sub)
        elif at_end:
            when = max(raw["end_ns"], raw["start_ns"])
            key = (when, 1, -span.depth, span.order, sub)
        else:
            when = raw["start_ns"]
            key = (when, 0, span.depth, span.order, sub)
        event_id = event_id or f"{span.hex}.{suffix}"
        if event_id in self.ids:
            raise ConversionError(f"{span.where()}: event id {event_id!r} is used twice in the trace")
        self.ids.add(event_id)
        event = {"id": event_id, "kind": kind, "attempt": self.attempt, "_ns": when, **fields}
        event.setdefault("otlp", span.ref)
        self.pending.append((key, event))
        self.report.mapped[mapped] += 1
        return event_id

    def _finish(self) -> None:
        self.pending.sort(key=lambda item: item[0])
        events = self.converted.events
        proposals_by_call: dict[str, str] = {}
        open_calls_by_tool: dict[str, list[str]] = {}
        for seq, (_key, event) in enumerate(self.pending, start=1):
            when = _iso(event.pop("_ns"))
            out = {"seq": seq, "id": event.pop("id"), "kind": event.pop("kind"), "at": {"logical": when, "wall": when}}
            out["attempt"] = event.pop("attempt")
            calls = event.pop("_proposed", None)
            call = event.pop("_call", None)
            out.update(event)
            if calls:
                for call_id, tool in calls:
                    if call_id:
                        proposals_by_call[call_id] = out["id"]
                    if tool:
                        open_calls_by_tool.setdefault(tool, []).append(out["id"])
            if out["kind"] == "tool.call" and out.get("proposal_id") is None and call is not None:
                call_id, tool = call
                proposal = proposals_by_call.pop(call_id, None) if call_id else None
                if proposal is None and not call_id:
                    # No call id on the span: the latest earlier proposal of this tool is the one it ran.
                    waiting = open_calls_by_tool.get(tool)
                    proposal = waiting.pop() if waiting else None
                out["proposal_id"] = proposal
            events.append(out)

    # ---- helpers

    def _inline_or_blob(self, fields: dict[str, Any], name: str, value: Any, role: str) -> None:
        if len(canonical_json(value)) <= INLINE_PAYLOAD_BYTES:
            fields[name] = value
        else:
            fields[f"{name}_blob"] = self.converted.add_json_blob(value, role)
