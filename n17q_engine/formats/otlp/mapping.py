"""Span -> event mapping for a whole trace: one trace's flat spans -> one `ConvertedRun` (`convert_trace`), and a
whole OTLP file or request -> one run per trace (`convert_otlp`, `iter_convert_otlp`, which chain `wire`, `flat`
and this). `_TraceConverter` makes the run: the span tree, the run object, the originals kept (the protobuf whole,
each event naming its span's byte range, or the spans as JSON in source-trace blobs), the attempt's start and end,
and what no mapping read, counted. The top of the package."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from n17q_engine.bundle import title_problem
from n17q_engine.canonical import canonical_json, digest_bytes
from n17q_engine.identifiers import OTLP_RUN_PREFIX, derived_run_id_problem, derived_run_ids, run_id_problem

from .. import ConversionError, ConvertedRun
from .conventions import (
    _MARKERS,
    GEN_AI_AGENT_NAME,
    GEN_AI_AGENT_VERSION,
    GEN_AI_CONVERSATION_ID,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    N17Q_POLICY_REVISION,
    N17Q_RUN_ID,
    N17Q_RUN_TITLE,
    N17Q_TASK_ID,
    N17Q_TASK_REVISION,
    OI_AGENT_NAME,
    OI_MODEL_NAME,
    OI_SESSION_ID,
    _is_command,
    _role,
    _usage,
)
from .events import MAX_TEXT_CHARS, _Span
from .flat import _flat_proto_spans, _proto_traces, flatten_json, iter_traces
from .sources import SpanBytes, byte_range_text, span_byte_ranges
from .spans import _SpanMapper
from .text import _iso, _one_line, _scalar_text, _str_or_none
from .wire import JSON_TYPE, PROTOBUF, _bulk, _json_text, _parse_proto, decode_otlp

# The original file is kept as a blob only up to the size the importer's secret scan reads whole
# (runs/secret_scan.py MAX_SCANNED_BLOB_BYTES); a larger one is still converted, its spans kept in the
# source-trace blobs, and a report note says so.
MAX_ORIGINAL_BLOB_BYTES = 64 * 1024 * 1024
# A source-trace blob holds spans up to about this many bytes of JSON: the event panel previews 64 KiB of a blob
# (runs/blob_preview.py), so the span an event names is on screen, not only in a download.
SOURCE_CHUNK_BYTES = 32 * 1024
_INDEX = re.compile(r"\.\d+(?=\.|$)")


# -------------------------------------------------------------------------------------------------- conversion


def convert_otlp(body: bytes, *, content_type: str) -> list[ConvertedRun]:
    """A whole OTLP file or request: one run per trace id, in the order the traces first appear."""
    return list(iter_convert_otlp(body, content_type=content_type))


def iter_convert_otlp(body: bytes, *, content_type: str) -> Iterator[ConvertedRun]:
    """As `convert_otlp`, one run at a time: a trace's run is built only when the caller asks for it, and the
    trace's spans are let go once it is, so that a caller importing each run before asking for the next holds one
    converted trace at a time, not the whole file's (a 100,000-span file: ~200,000 events). A protobuf file's
    spans are flattened trace by trace too (`flat._proto_traces`); an OTLP/JSON file's are read a span at a time
    within the caps of `reader` (`flat.flatten_json`)."""
    media_name = content_type.split(";", 1)[0].strip().lower()
    protobuf = media_name in ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf")
    with _bulk():
        if protobuf:
            request = _parse_proto(body)
            traces: list[list[Any]] = list(_proto_traces(request).values())
        elif media_name == "application/json" or media_name.endswith("+json"):
            traces = list(iter_traces(flatten_json(_json_text(body))))  # a span at a time (`reader`)
        else:
            decode_otlp(body, content_type=content_type)  # its refusal of the content type
            traces = []
    if not traces:
        raise ConversionError("the OTLP export holds no spans")
    # The original is kept by every run of the file: walked and hashed once, not once per trace.
    kept = len(body) <= MAX_ORIGINAL_BLOB_BYTES
    with _bulk():
        ranges = span_byte_ranges(body) if kept and protobuf else None
    digest = digest_bytes(body) if kept else None
    traces.reverse()
    while traces:
        spans = traces.pop()  # let go of as its run is made
        if protobuf:
            with _bulk():
                spans = _flat_proto_spans(spans, request)
        yield convert_trace(
            spans,
            original=body,
            original_media_type=PROTOBUF if protobuf else JSON_TYPE,
            span_bytes=ranges,
            original_digest=digest,
        )


def convert_trace(
    spans: list[dict[str, Any]],
    *,
    original: bytes | None = None,
    original_media_type: str = PROTOBUF,
    span_bytes: dict[tuple[str, str], SpanBytes] | None = None,
    original_digest: str | None = None,
) -> ConvertedRun:
    """One trace's flat spans (from `flatten_spans`, all with one trace id) -> one run.

    `original`: the file or request bytes, kept as a blob of the run (role `source-otlp`) up to
    MAX_ORIGINAL_BLOB_BYTES. Every span stays viewable from its events: by its byte range in a kept protobuf
    original (`span_bytes`, from `span_byte_ranges(original)`: computed here when not given), else as JSON in
    `source-trace` blobs. `original_digest`: the original's digest, when the caller has it (a file of many traces)."""
    if not spans:
        raise ConversionError("a trace with no spans cannot become a run")
    with _bulk():
        return _TraceConverter(spans, original, original_media_type, span_bytes, original_digest).convert()


# A span's name in its events' `otlp` provenance is cut here (the whole is in the kept span).
MAX_SPAN_NAME_CHARS = 200


def _name_parent(ref: dict[str, Any], span: _Span) -> None:
    """The span's parent in the trace, in its events' `otlp` provenance (`parent`), when the trace holds it; and the
    span's name and wall-clock start and end (`name`, `start_ns`, `end_ns`), so that the run page's span tree shows
    every span with its duration from any of its events, without reading the kept original, and a parent that made no
    event by its name (`parent_name`) (issue 38)."""
    if span.parent is not None:
        ref["parent"] = span.parent.hex
        ref["parent_name"] = span.parent.name[:MAX_SPAN_NAME_CHARS]
    ref["name"] = span.name[:MAX_SPAN_NAME_CHARS]
    start, end = span.raw.get("start_ns"), span.raw.get("end_ns")
    if isinstance(start, int) and start > 0:
        ref["start_ns"] = start
        if isinstance(end, int) and end >= start:
            ref["end_ns"] = end


class _TraceConverter(_SpanMapper):
    """One trace's flat spans -> one run (`convert`)."""

    # ---- the run

    def convert(self) -> ConvertedRun:
        self._link_tree()
        ordered = sorted(self.spans, key=lambda s: (s.raw["start_ns"], s.depth, s.index))
        for order, span in enumerate(ordered):
            span.order = order
        self.ordered = ordered
        self.root = next((s for s in ordered if s.parent is None), ordered[0])
        self.run = self._run_object()
        self.converted = ConvertedRun(self.run, [], self.report)
        self._keep_sources()
        self._mark_usage()
        self._attempt_start()
        for span in ordered:
            self._map_span(span)
        self._attempt_end()
        for span in ordered:
            self._count_unmapped(span)
        self._finish()
        return self.converted

    def _link_tree(self) -> None:
        orphans = 0
        for span in self.spans:
            parent_id = span.raw.get("parent_span_id")
            if parent_id:
                span.parent = self.by_id.get(parent_id)
                if span.parent is None:
                    orphans += 1
        # Depth by walking up once per span, memoised; a cycle (a corrupt export) is cut where it closes.
        depth: dict[int, int] = {}
        for span in self.spans:
            while True:
                chain: list[_Span] = []
                on_chain: set[int] = set()
                node: _Span | None = span
                while node is not None and node.index not in depth and node.index not in on_chain:
                    chain.append(node)
                    on_chain.add(node.index)
                    node = node.parent
                if node is not None and node.index in on_chain:
                    node.parent = None
                    self.report.notes.append(f"{node.where()} is its own ancestor (a corrupt export): read as a root")
                    continue
                base = depth[node.index] + 1 if node is not None else 0
                for offset, item in enumerate(reversed(chain)):
                    depth[item.index] = base + offset
                break
        for span in self.spans:
            span.depth = depth.get(span.index, 0)
        if orphans:
            self.report.notes.append(
                f"{orphans} span{'s name' if orphans != 1 else ' names'} a parent the trace does not hold "
                "(not received, or not ended): read as roots"
            )

    def _run_object(self) -> dict[str, Any]:
        root = self.root
        resource = root.raw["resource"]

        def run_attr(key: str) -> Any:
            value = root.take(key)
            if value is None:
                value = resource.get(key)
            return value

        run_id = run_attr(N17Q_RUN_ID)
        derived = f"{OTLP_RUN_PREFIX}{self.trace_id}"
        if run_id is None:
            run_id = derived
        elif isinstance(run_id, str) and run_id != derived and derived_run_ids(run_id) is not None:
            # The converter imports as the subsystem that derives `otlp-` ids (identifiers.DERIVED_RUN_IDS): a trace
            # naming its run `otlp-<another trace>`, a replay's or an Inspect sample's would take that name ahead of
            # its maker (issue 33). Only the id it would derive itself may be named.
            problem = derived_run_id_problem(run_id, made_by=None)
            raise ConversionError(f"{root.where()}: attribute {N17Q_RUN_ID} {problem}")
        problem = run_id_problem(run_id)
        if problem is not None:
            raise ConversionError(f"{root.where()}: attribute {N17Q_RUN_ID} {problem}")
        agent_name = _str_or_none(self._first_attr(GEN_AI_AGENT_NAME)) or _str_or_none(self._first_attr(OI_AGENT_NAME))
        title = run_attr(N17Q_RUN_TITLE)
        if title is not None:
            problem = title_problem(title)
            if problem is not None:
                raise ConversionError(f"{root.where()}: attribute {N17Q_RUN_TITLE} {problem}")
            title = title.strip()
        else:
            title = _one_line(root.name or agent_name or f"OpenTelemetry trace {self.trace_id}", 300)
        task = run_attr(N17Q_TASK_ID)
        if not isinstance(task, str) or not task:
            service = resource.get("service.name")
            task = (
                agent_name or (service if isinstance(service, str) and service else None) or root.name or "otlp-trace"
            )
        revision = run_attr(N17Q_TASK_REVISION)
        if revision is None:
            revision = self._first_attr(GEN_AI_AGENT_VERSION) or "unknown"
        policy = run_attr(N17Q_POLICY_REVISION)
        model_name, model_version = self._model()
        created = min(s.raw["start_ns"] for s in self.spans)
        return {
            "id": run_id,
            "title": title,
            "task": {"id": _one_line(task, 200), "revision": _one_line(revision, 200)},
            "environment": "live",
            "mode": "recorded",
            "scenario": None,
            "model": {"name": model_name, "version": model_version},
            "policy_revision": _one_line(policy, 200) if isinstance(policy, str) and policy else "otlp:none",
            "created_at": _iso(created),
            "parent_run": None,
        }

    def _first_attr(self, key: str) -> Any:
        for span in self.ordered:
            value = span.attrs.get(key)
            if value is not None:
                return value
        return None

    def _model(self) -> tuple[str, str]:
        for span in self.ordered:
            if _role(span.attrs) == "model":
                name = span.attrs.get(GEN_AI_REQUEST_MODEL) or span.attrs.get(OI_MODEL_NAME)
                version = span.attrs.get(GEN_AI_RESPONSE_MODEL) or name
                if isinstance(name, str) and name:
                    return _one_line(name, 200), _one_line(version if isinstance(version, str) else name, 200)
        return "unknown", "unknown"

    def _keep_sources(self) -> None:
        """Keep every span viewable from its events, once: the original whole (when it may be a blob), each event
        naming its span's byte range in it; else (a JSON original, one too large, no original, or a protobuf laid
        out so that a range cannot stand for a span) the spans as JSON in source-trace blobs."""
        self.original_digest: str | None = None
        if self.original is not None:
            if len(self.original) <= MAX_ORIGINAL_BLOB_BYTES:
                self.original_digest = self.converted.add_blob(
                    self.original, self.original_media_type, "source-otlp", digest=self.known_original_digest
                )
            else:
                self.report.notes.append(
                    f"the original export ({len(self.original)} bytes) is larger than a blob may be "
                    f"({MAX_ORIGINAL_BLOB_BYTES} bytes): not kept whole; every span is kept in the source-trace blobs"
                )
        if self.original_digest is not None and self.original_media_type == PROTOBUF and self._refs_into_original():
            return
        self._keep_spans_as_json()

    def _refs_into_original(self) -> bool:
        """Name each span by its byte range in the kept protobuf original; False (nothing named) when a span of the
        trace is not found there (the spans did not come from these bytes)."""
        ranges = self.span_bytes
        if ranges is None:
            assert self.original is not None
            ranges = span_byte_ranges(self.original)
            if ranges is None:
                return False
        located = []
        for span in self.spans:
            at = ranges.get((self.trace_id, span.hex))
            if at is None:
                return False
            located.append((span, at))
        for span, at in located:
            # Ranges as "offset+length" text: two hundred thousand events parse three short strings faster than
            # three lists of two numbers each (and the lineage reader walks fewer nodes).
            ref: dict[str, Any] = {"span": span.hex, "blob": self.original_digest, "bytes": byte_range_text(at.span)}
            _name_parent(ref, span)
            if at.resource is not None:
                ref["resource_bytes"] = byte_range_text(at.resource)
            if at.scope is not None:
                ref["scope_bytes"] = byte_range_text(at.scope)
            span.ref = ref
            span.blob = self.original_digest or ""
        return True

    def _keep_spans_as_json(self) -> None:
        """The spans as JSON, cut into blobs of about SOURCE_CHUNK_BYTES; each span learns the blob that holds it."""
        chunk: list[bytes] = []
        members: list[_Span] = []
        resources: dict[int, tuple[str, dict[str, Any]]] = {}
        size = 0

        def flush() -> None:
            nonlocal chunk, members, resources, size
            if not members:
                return
            head = {"trace_id": self.trace_id, "resources": {key: value for key, value in resources.values()}}
            data = canonical_json(head)[:-1] + b',"spans":[\n' + b",\n".join(chunk) + b"\n]}"
            digest = self.converted.add_blob(data, "application/json", "source-trace")
            for member in members:
                member.blob = digest
            chunk, members, resources, size = [], [], {}, 0

        for span in self.ordered:
            raw = span.raw
            res = raw["resource"]
            entry = resources.get(id(res))
            if entry is None:
                entry = (f"r{len(resources)}", res)
                resources[id(res)] = entry
            body = {key: value for key, value in raw.items() if key != "resource"}
            body["resource"] = entry[0]
            line = canonical_json(body)
            chunk.append(line)
            members.append(span)
            size += len(line)
            if size >= SOURCE_CHUNK_BYTES:
                flush()
        flush()
        for span in self.spans:
            span.ref = {"span": span.hex, "blob": span.blob}
            _name_parent(span.ref, span)

    def _mark_usage(self) -> None:
        """Which spans have a model span below them that charges tokens: an agent span's usage is the sum of its
        model calls, and charging both would count the tokens twice."""
        for span in self.spans:
            if _role(span.attrs) in ("model", "embedding") and _usage(span.attrs) is not None:
                node = span.parent
                while node is not None and node.index not in self.charged_below:
                    self.charged_below.add(node.index)
                    node = node.parent

    # ---- the attempt

    def _attempt_start(self) -> None:
        root = self.root
        fields: dict[str, Any] = {
            "number": 1,
            "reason": _one_line(f"OpenTelemetry trace {self.trace_id}, root span {root.name!r}", MAX_TEXT_CHARS),
            "parent_attempt_id": None,
            "trace": self.trace_id,
            "root_span": root.hex,
            "spans": len(self.spans),
        }
        if self.original_digest is not None:
            fields["source_blob"] = self.original_digest
        agent = self._agent_fields(root)
        if agent:
            fields["agent"] = agent
        conversation = root.take(GEN_AI_CONVERSATION_ID) or root.take(OI_SESSION_ID)
        if conversation is not None:
            fields["conversation"] = _scalar_text(conversation)
        self._emit(
            root,
            "attempt.started",
            fields,
            sub=-2,
            suffix="attempt",
            mapped="root span -> attempt.started",
            event_id="attempt-1.started",
        )

    def _attempt_end(self) -> None:
        root = self.root
        error = self._error(root)
        if error is not None:
            state, outcome = "failed", "error"
            reason = _one_line(
                f"the root span ended in an error: {error.get('message') or error.get('type')}", MAX_TEXT_CHARS
            )
        else:
            state, outcome, reason = "completed", "completed", "the root span ended"
        self._emit(
            root,
            "run.state",
            {"state": state, "reason": reason},
            at_end=True,
            sub=1000,
            suffix="state",
            mapped="root span end -> run.state",
            event_id="run.state",
        )
        fields: dict[str, Any] = {"outcome": outcome}
        if error is not None:
            fields["error"] = error
        self._emit(
            root,
            "attempt.ended",
            fields,
            at_end=True,
            sub=1001,
            suffix="attempt-end",
            mapped="root span end -> attempt.ended",
            event_id="attempt-1.ended",
        )

    # ---- what no mapping read

    def _count_unmapped(self, span: _Span) -> None:
        used, prefixes = span.used, tuple(span.used_prefixes)
        unmapped = self.report.unmapped
        for key in span.attrs:
            if key in used or (prefixes and key.startswith(prefixes)):
                continue
            unmapped[f"span attribute {_INDEX.sub('.N', key)}"] += 1
        if span.raw["links"]:
            unmapped["span link"] += len(span.raw["links"])
        if span.role == "other" and not _is_command(span.attrs) and span.used <= _MARKERS and span is not self.root:
            unmapped["span without a mapped convention (kept in the run's source blobs)"] += 1
