"""Writing a run's events: a flat span as the converter walks it (`_Span`), and the base of the trace converter
(`_EventWriter`): the state a conversion builds (the report, the pending events, the ids taken), `_emit` (one event
of a span, with the key that orders it) and `_finish` (the events sorted into seq order, each tool call linked to
the model proposal that asked for it). What any span maps to is `spans`'; the run as a whole, `mapping`'s."""

from __future__ import annotations

import ast
import json
from typing import Any

from n17q_engine.canonical import canonical_json, request_digest
from n17q_engine.claim_extraction import claim_events

from .. import ConversionError, ConversionReport, ConvertedRun
from .sources import SpanBytes
from .text import _iso, _one_line, _scalar_text

# Payloads (messages, tool arguments shown beside the request, outputs) larger than this become blobs.
INLINE_PAYLOAD_BYTES = 1024
_NOTHING = object()
# A recorded input this long is not read as a Python literal (LangChain's `str(dict)`) to compare it with arguments.
MAX_LITERAL_INPUT_CHARS = 65536
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
        self._extract_claims()
        events = self.converted.events
        proposals_by_call: dict[str, str] = {}
        open_calls_by_tool: dict[str, list[str]] = {}
        # proposal event id -> its proposed calls [call id, tool, arguments, taken], in the proposal's order.
        proposed: dict[str, list[list[Any]]] = {}
        reconciled = _Reconciled()
        for seq, (_key, event) in enumerate(self.pending, start=1):
            when = _iso(event.pop("_ns"))
            out = {"seq": seq, "id": event.pop("id"), "kind": event.pop("kind"), "at": {"logical": when, "wall": when}}
            out["attempt"] = event.pop("attempt")
            calls = event.pop("_proposed", None)
            call = event.pop("_call", None)
            recorded = event.pop("_reconcile", _NOTHING)
            out.update(event)
            if calls:
                proposed[out["id"]] = [[call_id, tool, arguments, False] for call_id, tool, arguments in calls]
                for call_id, tool, _arguments in calls:
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
                taken = _take_proposed(proposed.get(proposal or ""), call_id, tool, recorded)
                if recorded is not _NOTHING:
                    self._reconcile(out, recorded, taken, reconciled)
            events.append(out)
        reconciled.report(self.report)

    def _extract_claims(self) -> None:
        """The operational claims of the trace's final answer (n17q_engine/claim_extraction.py), written as
        `account.claim` events right after the answer, at its time and in its span, marked extracted."""
        ordered = [event for _key, event in self.pending]
        found = claim_events(ordered)
        if not found:
            return
        answer_id = found[0]["extracted_from"]
        at = next(i for i, event in enumerate(ordered) if event["id"] == answer_id)
        key, answer = self.pending[at]
        for k, fields in enumerate(found, start=1):
            event_id = f"{answer_id}.claim-{k}"
            self.ids.add(event_id)
            event = {"id": event_id, "kind": "account.claim", "attempt": answer["attempt"], "_ns": answer["_ns"]}
            event.update(fields)
            event["otlp"] = answer.get("otlp")
            self.pending.insert(at + k, (key, event))
            self.report.mapped["final answer -> account.claim (extracted)"] += 1

    def _reconcile(
        self, call: dict[str, Any], recorded: Any, taken: tuple[str, list[Any]] | None, reconciled: _Reconciled
    ) -> None:
        """A tool call whose span recorded a bare value as its input: the request is the arguments the linked
        proposal gave this call, when they are an object the recorded value agrees with; else the request stays
        `{arguments: <value>}`, and `request_unreconciled` says why. The recorded value is kept in either case."""
        self._inline_or_blob(call, "recorded_input", recorded, "tool-arguments")
        if call.get("proposal_id") is None:
            reason = "no model proposal of this call is in the trace"
        elif taken is None:
            reason = "its model proposal has no call of this tool left to match"
        elif not isinstance(taken[1][2], dict):
            reason = "its model proposal recorded no arguments object for this call"
        elif not _input_agrees(recorded, taken[1][2]):
            reason = "the recorded input is not one of the proposed arguments' values nor the arguments as text"
        else:
            matched_by, (call_id, _tool, arguments, _taken) = taken
            call["request"] = arguments
            call["request_digest"] = request_digest(arguments)
            call["request_from"] = {"proposal": call["proposal_id"], "call": call_id, "matched_by": matched_by}
            reconciled.done(call)
            return
        call["request_unreconciled"] = reason
        reconciled.kept(call, reason)

    # ---- helpers

    def _inline_or_blob(self, fields: dict[str, Any], name: str, value: Any, role: str) -> None:
        if len(canonical_json(value)) <= INLINE_PAYLOAD_BYTES:
            fields[name] = value
        else:
            fields[f"{name}_blob"] = self.converted.add_json_blob(value, role)


def _take_proposed(
    calls: list[list[Any]] | None, call_id: str | None, tool: str, recorded: Any
) -> tuple[str, list[Any]] | None:
    """The proposed call a tool call ran, marked taken: the one of its call id, else (no call id on the span) the
    proposal's first call of that tool not taken yet (of those, the first whose arguments agree with a bare
    recorded input, so tools run out of the proposed order still match); with how it was matched. None when there
    is none."""
    if not calls:
        return None
    if call_id:
        for proposed in calls:
            if proposed[0] == call_id and not proposed[3]:
                proposed[3] = True
                return "call id", proposed
        return None
    left = [proposed for proposed in calls if proposed[1] == tool and not proposed[3]]
    if recorded is not _NOTHING:
        agreeing = [p for p in left if isinstance(p[2], dict) and _input_agrees(recorded, p[2])]
        left = agreeing or left
    if not left:
        return None
    left[0][3] = True
    return "order", left[0]


def _input_agrees(recorded: Any, arguments: dict[str, Any]) -> bool:
    """Whether a tool span's recorded bare input says the same as the proposed arguments: it is one of their values
    (OpenInference-for-LangChain writes a one-argument tool's input as that value), or the arguments written as
    JSON or as a Python literal (LangChain's `str(dict)`)."""
    text = recorded if isinstance(recorded, str) else _scalar_text(recorded)
    if any(text == _scalar_text(value) for value in arguments.values()):
        return True
    if not isinstance(recorded, str) or len(recorded) > MAX_LITERAL_INPUT_CHARS:
        return False
    try:
        return json.loads(recorded) == arguments
    except (ValueError, RecursionError):
        pass
    try:
        return bool(ast.literal_eval(recorded.strip()) == arguments)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


class _Reconciled:
    """What `_finish` did with tool inputs that were not arguments objects, for the conversion report."""

    EXAMPLES = 3

    def __init__(self) -> None:
        self.done_ids: list[str] = []
        self.kept_by_reason: dict[str, list[str]] = {}

    def done(self, call: dict[str, Any]) -> None:
        self.done_ids.append(call["id"])

    def kept(self, call: dict[str, Any], reason: str) -> None:
        self.kept_by_reason.setdefault(reason, []).append(call["id"])

    def report(self, report: ConversionReport) -> None:
        if self.done_ids:
            report.mapped["tool span input not an arguments object -> request from the proposal's arguments"] += len(
                self.done_ids
            )
            report.notes.append(
                f"{len(self.done_ids)} tool call(s) recorded a bare value as their input, not an arguments object: "
                "their request is the arguments their model proposal gave that call, the recorded value kept as "
                f"recorded_input (request_from says which proposal and call): {_examples(self.done_ids)}"
            )
        for reason, ids in self.kept_by_reason.items():
            kept = f"tool span input not an arguments object, kept as request {{arguments: …}} ({reason})"
            report.unmapped[kept] += len(ids)
            report.notes.append(
                f"{len(ids)} tool call(s) recorded a bare value as their input and keep it as request "
                f"{{arguments: <value>}} ({reason}): a replayed agent's call will not match it as a fixture: "
                f"{_examples(ids)}"
            )


def _examples(ids: list[str]) -> str:
    shown = ", ".join(ids[: _Reconciled.EXAMPLES])
    more = len(ids) - _Reconciled.EXAMPLES
    return shown + (f" and {more} more" if more > 0 else "")
