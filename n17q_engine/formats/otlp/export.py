"""A run (its bundle manifest and its events, DESIGN §3) -> one OTLP/JSON `ExportTraceServiceRequest` (issue 38).

The inverse direction of this package: what `mapping` reads, this writes, so that an exported run imports again
through the OTLP file door with the same tool calls and results. docs/formats/otlp.md "Export" tabulates it:

- one trace per run, its id the first 16 bytes of SHA-256 of the run id; span ids the first 8 bytes of SHA-256 of
  `<run id>/<what>` (the same run exports to the same ids);
- a root span for the run (GenAI `invoke_agent`), a span per attempt below it;
- a `tool.call` and its `tool.result` as one GenAI `execute_tool` span (`gen_ai.tool.name`, `gen_ai.tool.call.id`,
  `gen_ai.tool.call.arguments`, `n17q.tool.outcome`, `n17q.contract_revision`; the result's blob named by digest,
  never inlined); a `model.proposal` as a GenAI `chat` span;
- every event, those included, as a span event named by its kind carrying `n17q.kind`, `n17q.id`, `n17q.seq`,
  `n17q.logical` and `n17q.event` (the event whole, canonical JSON, as stored: masked where the console masked it),
  so nothing the run holds is lost; events that are neither tool calls nor proposals sit on "events" spans below
  their attempt, at most EVENTS_PER_SPAN each, so that no span holds a whole run's events.

Bounded: `otlp_json_chunks` is a generator over the events; it holds the open attempts, the tool calls waiting for
their results and one "events" span, and writes every finished span as one `json.dumps` (the request's skeleton is
written by hand around them). The event names are not `n17q.<kind>`: the importer would re-create those as events
of the imported run beside the ones it derives itself (two attempt starts, two tool calls per call).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from n17q_engine.canonical import canonical_json

from .conventions import (
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_TOOL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    N17Q_ATTEMPT,
    N17Q_COMMAND,
    N17Q_CONTRACT_REVISION,
    N17Q_EVENT,
    N17Q_ID,
    N17Q_KIND,
    N17Q_POLICY_REVISION,
    N17Q_RUN_TITLE,
    N17Q_TASK_ID,
    N17Q_TASK_REVISION,
    N17Q_TOOL_OUTCOME,
)

EVENTS_PER_SPAN = 500  # span events an "events" span carries at most
SCOPE_NAME = "n17q.export"
# The resource attribute naming the run the file was exported from. Not `n17q.run.id`: the importer would take that
# as the id to import under, and a console refuses an id it holds ("history is never replaced") and a derived one
# (a replay's `…~…`): the file imports as `otlp-<trace id>`, and says where it came from here.
EXPORTED_RUN = "n17q.export.run"
N17Q_SEQ = "n17q.seq"
N17Q_LOGICAL = "n17q.logical"
RESULT_BLOB = "n17q.tool.result.blob"
# Outcomes a tool span is marked failed for (status ERROR); the outcome itself is `n17q.tool.outcome`.
_ERROR_OUTCOMES = frozenset({"error", "timeout"})
_STATUS_ERROR = 2
_KIND_INTERNAL, _KIND_CLIENT = 1, 3


def trace_id_for(run_id: str) -> str:
    """The trace id of a run's export: the first 16 bytes of SHA-256 of its id, hex."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]


def span_id_for(run_id: str, what: str) -> str:
    """A span id of a run's export: the first 8 bytes of SHA-256 of `<run id>/<what>`, hex (never all zero)."""
    digest = hashlib.sha256(f"{run_id}/{what}".encode()).hexdigest()
    return digest[:16] if digest[:16] != "0" * 16 else digest[16:32]


def unix_nanos(value: Any) -> int | None:
    """An ISO-8601 time (`Z` or an offset; naive read as UTC) -> unix nanoseconds; None when it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith(("Z", "z")) else value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int(when.timestamp())
    return seconds * 1_000_000_000 + when.microsecond * 1000


def attr(key: str, value: Any) -> dict[str, Any]:
    """One OTLP/JSON KeyValue: strings, booleans, ints (int64 as text) and floats as themselves, anything else as
    canonical JSON text."""
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    return {"key": key, "value": {"stringValue": json_text(value)}}


def json_text(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _attrs(pairs: Iterable[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [attr(key, value) for key, value in pairs if value is not None]


class _OpenSpan:
    """A span being written: its ids, times, attributes and span events until it is finished."""

    __slots__ = ("attributes", "end", "events", "kind", "name", "parent", "span_id", "start", "status")

    def __init__(self, span_id: str, parent: str | None, name: str, start: int, kind: int = _KIND_INTERNAL) -> None:
        self.span_id, self.parent, self.name, self.kind = span_id, parent, name, kind
        self.start = self.end = start
        self.attributes: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.status: dict[str, Any] = {}

    def add_event(self, event: dict[str, Any], at: int) -> None:
        self.events.append(
            {
                "timeUnixNano": str(at),
                "name": str(event.get("kind") or "event"),
                "attributes": _attrs(
                    (
                        (N17Q_KIND, event.get("kind")),
                        (N17Q_ID, event.get("id")),
                        (N17Q_SEQ, event.get("seq")),
                        (N17Q_LOGICAL, (event.get("at") or {}).get("logical")),
                        (N17Q_ATTEMPT, event.get("attempt")),
                        (N17Q_EVENT, json_text(event)),
                    )
                ),
            }
        )
        self.start, self.end = min(self.start, at), max(self.end, at)

    def as_json(self, trace_id: str) -> bytes:
        span: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": self.span_id,
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": str(self.start),
            "endTimeUnixNano": str(max(self.end, self.start)),
            "attributes": self.attributes,
            "events": self.events,
        }
        if self.parent:
            span["parentSpanId"] = self.parent
        if self.status:
            span["status"] = self.status
        return json.dumps(span, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class OtlpRunWriter:
    """The spans of one run, written as its events arrive (`event`), then the held ones (`finish`)."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.run_meta = run
        self.run_id = str(run.get("id") or "run")
        self.trace_id = trace_id_for(self.run_id)
        self.root_id = span_id_for(self.run_id, "run")
        self.last = unix_nanos(run.get("created_at")) or 0
        self.first: int | None = None
        self.attempts: dict[str, _OpenSpan] = {}
        self.calls: dict[str, tuple[_OpenSpan, dict[str, Any]]] = {}
        self.carrier: _OpenSpan | None = None
        self.carrier_attempt: str | None = None
        self.carriers = 0
        self.final_state: dict[str, Any] | None = None
        self.spans = 0
        self.events = 0

    def _when(self, event: dict[str, Any]) -> int:
        at = event.get("at")
        wall = unix_nanos(at.get("wall")) if isinstance(at, dict) else None
        if wall is None:
            wall = self.last  # no wall time: the last one known (logical time stays in `n17q.logical`)
        self.last = max(self.last, wall)
        if self.first is None or wall < self.first:
            self.first = wall
        return wall

    def _parent(self, attempt: Any) -> str:
        span = self.attempts.get(attempt) if isinstance(attempt, str) else None
        return span.span_id if span is not None else self.root_id

    def _done(self, span: _OpenSpan) -> bytes:
        self.spans += 1
        return span.as_json(self.trace_id)

    def event(self, event: dict[str, Any]) -> Iterator[bytes]:
        """The spans this event finishes, as JSON (zero or more)."""
        self.events += 1
        at = self._when(event)
        kind = event.get("kind")
        attempt = event.get("attempt")
        event_id = str(event.get("id") or f"seq-{event.get('seq')}")
        if kind == "attempt.started" and isinstance(attempt, str) and attempt not in self.attempts:
            span = _OpenSpan(span_id_for(self.run_id, f"attempt/{attempt}"), self.root_id, f"attempt {attempt}", at)
            span.attributes = _attrs(((N17Q_ATTEMPT, attempt), ("n17q.attempt.number", event.get("number"))))
            span.add_event(event, at)
            self.attempts[attempt] = span
            return
        if kind == "attempt.ended" and isinstance(attempt, str) and attempt in self.attempts:
            yield from self._close_carrier()
            span = self.attempts.pop(attempt)
            span.add_event(event, at)
            outcome = event.get("outcome")
            span.attributes += _attrs((("n17q.attempt.outcome", outcome),))
            if outcome not in (None, "completed", "ok"):
                span.status = {"code": _STATUS_ERROR, "message": f"attempt ended: {outcome}"}
            yield self._done(span)
            return
        if kind == "tool.call":
            span = _OpenSpan(
                span_id_for(self.run_id, f"event/{event_id}"),
                self._parent(attempt),
                f"execute_tool {event.get('tool')}",
                at,
                _KIND_CLIENT,
            )
            span.add_event(event, at)
            self.calls[event_id] = (span, event)
            return
        call_id = event.get("call_id")
        if kind in ("tool.result", "command.receipt") and isinstance(call_id, str) and call_id in self.calls:
            span, call = self.calls.pop(call_id)
            span.add_event(event, at)
            if kind == "tool.result":
                span.attributes = _tool_attributes(call, event_id=call_id, result=event)
                if event.get("outcome") in _ERROR_OUTCOMES:
                    span.status = {"code": _STATUS_ERROR, "message": f"tool outcome: {event.get('outcome')}"}
            else:
                span.name = f"command {call.get('tool')}"
                span.attributes = _command_attributes(call, event)
            yield self._done(span)
            return
        if kind == "model.proposal":
            span = _OpenSpan(
                span_id_for(self.run_id, f"event/{event_id}"),
                self._parent(attempt),
                f"chat {self._model()[0]}",
                at,
                _KIND_CLIENT,
            )
            name, version = self._model()
            proposal = event.get("proposal")
            span.attributes = _attrs(
                (
                    (GEN_AI_OPERATION, "chat"),
                    (GEN_AI_REQUEST_MODEL, name),
                    (GEN_AI_RESPONSE_MODEL, version),
                    ("n17q.proposal.type", proposal.get("type") if isinstance(proposal, dict) else None),
                    ("n17q.proposal.accepted", event.get("accepted")),
                    ("n17q.context_digest", event.get("context_digest")),
                )
            )
            span.add_event(event, at)
            yield self._done(span)
            return
        if kind == "run.state":
            self.final_state = event
        yield from self._carry(event, at, attempt)

    def _model(self) -> tuple[str | None, str | None]:
        model = self.run_meta.get("model")
        if not isinstance(model, dict):
            return None, None
        name, version = model.get("name"), model.get("version")
        return (name if isinstance(name, str) else None), (version if isinstance(version, str) else None)

    def _carry(self, event: dict[str, Any], at: int, attempt: Any) -> Iterator[bytes]:
        key = attempt if isinstance(attempt, str) and attempt in self.attempts else None
        if self.carrier is not None and (self.carrier_attempt != key or len(self.carrier.events) >= EVENTS_PER_SPAN):
            yield from self._close_carrier()
        if self.carrier is None:
            self.carriers += 1
            self.carrier = _OpenSpan(
                span_id_for(self.run_id, f"events/{self.carriers}"), self._parent(key), "events", at
            )
            self.carrier_attempt = key
        self.carrier.add_event(event, at)

    def _close_carrier(self) -> Iterator[bytes]:
        if self.carrier is not None:
            carrier, self.carrier = self.carrier, None
            seqs = [a["value"]["intValue"] for e in carrier.events for a in e["attributes"] if a["key"] == N17Q_SEQ]
            carrier.name = f"events {seqs[0]}-{seqs[-1]}" if seqs else "events"
            carrier.attributes = _attrs((("n17q.events", len(carrier.events)),))
            yield self._done(carrier)

    def finish(self) -> Iterator[bytes]:
        """The spans still open: the last "events" span, tool calls that have no result (outcome `unknown`: not a
        result the run does not hold), attempts that never ended, then the root."""
        yield from self._close_carrier()
        for call_id, (span, call) in self.calls.items():
            span.attributes = _tool_attributes(call, event_id=call_id, result=None)
            yield self._done(span)
        self.calls.clear()
        for span in self.attempts.values():
            span.end = max(span.end, self.last)
            span.attributes += _attrs((("n17q.attempt.ended", False),))
            yield self._done(span)
        self.attempts.clear()
        run = self.run_meta
        created = unix_nanos(run.get("created_at"))
        start = min(x for x in (created, self.first, self.last) if x is not None)
        root = _OpenSpan(self.root_id, None, str(run.get("title") or self.run_id), start)
        root.end = self.last
        task = _object(run.get("task"))
        root.attributes = _attrs(
            (
                (GEN_AI_OPERATION, "invoke_agent"),
                (GEN_AI_AGENT_NAME, task.get("id") if isinstance(task.get("id"), str) else None),
                ("n17q.events", self.events),
            )
        )
        state = self.final_state
        if state is not None and state.get("state") not in ("completed", "running", "paused"):
            root.status = {"code": _STATUS_ERROR, "message": f"run {state.get('state')}: {state.get('reason') or ''}"}
        yield self._done(root)


def _tool_attributes(call: dict[str, Any], *, event_id: str, result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A GenAI `execute_tool` span: the call, and its result's outcome and blob (by digest). A call the run holds no
    result for says `unknown` (the importer would otherwise read a span without an outcome as `ok`)."""
    tool = call.get("tool")
    outcome = result.get("outcome") if result is not None else "unknown"
    blob = result.get("blob") if result is not None else None
    return _attrs(
        (
            (GEN_AI_OPERATION, "execute_tool"),
            (GEN_AI_TOOL_NAME, tool if isinstance(tool, str) else None),
            (GEN_AI_TOOL_CALL_ID, event_id),
            (GEN_AI_TOOL_ARGUMENTS, json_text(call.get("request"))),
            (N17Q_CONTRACT_REVISION, call.get("contract_revision")),
            (N17Q_TOOL_OUTCOME, outcome if isinstance(outcome, str) else None),
            (RESULT_BLOB, blob if isinstance(blob, str) else None),
            ("n17q.tool.result.origin", result.get("origin") if result is not None else None),
            ("n17q.tool.no_result", True if result is None else None),
        )
    )


def _command_attributes(call: dict[str, Any], receipt: dict[str, Any]) -> list[dict[str, Any]]:
    """A call answered by a command receipt: a command span (`n17q.command.*`), not an `execute_tool` one, which
    the importer reads as a tool call and its receipt, no tool result (as the run holds it)."""
    tool = call.get("tool")
    prefix = N17Q_COMMAND
    exit_code = receipt.get("exit_code")
    return _attrs(
        (
            (prefix + "line", str(receipt.get("command") or "")),
            (prefix + "tool", tool if isinstance(tool, str) and tool else None),
            (prefix + "completion", receipt.get("completion") if isinstance(receipt.get("completion"), str) else None),
            (
                prefix + "exit_code",
                exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            ),
            (prefix + "suites", json_text(receipt.get("suites") or [])),
            (prefix + "results", json_text(receipt.get("results") or {})),
            (prefix + "pre_tree", receipt.get("pre_tree") if isinstance(receipt.get("pre_tree"), str) else None),
            (prefix + "post_tree", receipt.get("post_tree") if isinstance(receipt.get("post_tree"), str) else None),
            (
                prefix + "environment_revision",
                receipt.get("environment_revision") if isinstance(receipt.get("environment_revision"), str) else None,
            ),
            (
                prefix + "output_blob",
                receipt.get("output_blob") if isinstance(receipt.get("output_blob"), str) else None,
            ),
            (N17Q_CONTRACT_REVISION, call.get("contract_revision")),
            ("n17q.tool.request", json_text(call.get("request"))),
        )
    )


def resource_attributes(
    manifest: dict[str, Any], *, scope_note: dict[str, Any] | None, exported: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The resource of an exported run: who wrote it, which run, and what a reader must know about it."""
    run = _object(manifest.get("run"))
    task = _object(run.get("task"))
    scenario = run.get("scenario")
    title = run.get("title")
    return _attrs(
        (
            ("service.name", "n17q"),
            (EXPORTED_RUN, run.get("id")),
            (N17Q_RUN_TITLE, title if isinstance(title, str) and title.strip() else None),
            (N17Q_TASK_ID, task.get("id") if isinstance(task.get("id"), str) and task.get("id") else None),
            (N17Q_TASK_REVISION, task.get("revision") if isinstance(task.get("revision"), str) else None),
            (N17Q_POLICY_REVISION, run.get("policy_revision") if isinstance(run.get("policy_revision"), str) else None),
            ("n17q.mode", run.get("mode")),
            ("n17q.environment", run.get("environment")),
            ("n17q.scenario", json_text(scenario) if scenario is not None else None),
            ("n17q.parent_run", run.get("parent_run")),
            ("n17q.run", json_text(run)),
            ("n17q.blobs", json_text(manifest.get("blobs") or {})),
            ("n17q.scope_note", json_text(scope_note) if scope_note is not None else None),
            ("n17q.exported", json_text(exported) if exported is not None else None),
        )
    )


def otlp_json_chunks(
    manifest: dict[str, Any],
    events: Iterable[dict[str, Any]],
    *,
    scope_note: dict[str, Any] | None = None,
    exported: dict[str, Any] | None = None,
    counts: dict[str, int] | None = None,
) -> Iterator[bytes]:
    """A run as the bytes of one OTLP/JSON ExportTraceServiceRequest, a piece at a time (events read as written).
    `counts`, when given, receives {"spans", "events"} once the last piece is written."""
    run = _object(manifest.get("run"))
    writer = OtlpRunWriter(run)
    resource = {"attributes": resource_attributes(manifest, scope_note=scope_note, exported=exported)}
    scope = {"name": SCOPE_NAME, "version": str(manifest.get("format") or "")}
    head = json.dumps(resource, ensure_ascii=False, separators=(",", ":"))
    yield (
        '{"resourceSpans":[{"resource":'
        + head
        + ',"scopeSpans":[{"scope":'
        + json.dumps(scope, separators=(",", ":"))
        + ',"spans":[\n'
    ).encode("utf-8")
    first = True
    for event in events:
        for span in writer.event(event):
            yield span if first else b",\n" + span
            first = False
    for span in writer.finish():
        yield span if first else b",\n" + span
        first = False
    yield b"\n]}]}]}\n"
    if counts is not None:
        counts.update(spans=writer.spans, events=writer.events)
