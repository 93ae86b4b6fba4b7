"""The scan of a kept original: every text an OTLP protobuf request holds, each whole, for the importer's secret
scan (`otlp_strings`, read by runs/secret_scan.py), which finds a token in the texts and masks it in the raw
bytes where it occurs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ...protowire import WireFormatError, fields
from .wire import MAX_ANY_DEPTH

# A request is parsed a run of at most this many bytes of a ScopeSpans at a time (framed in the ResourceSpans and
# ScopeSpans it sat in, so upb reads every byte at the depth it has in the whole request), never whole: upb's form of a
# request of many tiny spans is 14 times its bytes (issue 35), and the OTLP receiver masks every request it buffers.
_CHUNK = 64 * 1024
# Length-delimited keys: the request's field 1, a ResourceSpans' field 2, a ScopeSpans' field 2.
_RESOURCE_SPANS, _SCOPE_SPANS, _SPANS = 0x0A, 0x12, 0x12


def _frame(key: int, content: bytes) -> bytes:
    size, out = len(content), bytearray((key,))
    while size >= 0x80:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + content


def _pieces(body: bytes) -> Iterator[tuple[str, bytes]]:
    """The request as requests of their own, in the order a walk of it parsed whole reads its texts, each at most
    about _CHUNK bytes of it (a longer span alone), together every field of it exactly once: ("resource", a
    ResourceSpans' fields but its ScopeSpans), then for each of its ScopeSpans ("scope", its fields but its spans) and
    ("spans", its spans in runs); last ("request", the request's fields other than its ResourceSpans). Each is framed
    in the ResourceSpans and ScopeSpans it sat in. protowire.WireFormatError where upb refuses the skeleton."""
    others = []
    for key, tag, value, end in fields(body, 0, len(body)):
        if key != _RESOURCE_SPANS:
            others.append(body[tag:end])
            continue
        head, scopes = [], []
        for rs_key, rs_tag, rs_value, rs_end in fields(body, value, end):
            if rs_key == _SCOPE_SPANS:
                scopes.append((rs_value, rs_end))
            else:
                head.append(body[rs_tag:rs_end])
        yield "resource", _frame(_RESOURCE_SPANS, b"".join(head))
        for ss_value, ss_end in scopes:
            scope_head, run, spans_at = [], [], 0
            for ss_key, ss_tag, _ss_value, ss_end_field in fields(body, ss_value, ss_end):
                if ss_key != _SPANS:
                    scope_head.append(body[ss_tag:ss_end_field])
            yield "scope", _frame(_RESOURCE_SPANS, _frame(_SCOPE_SPANS, b"".join(scope_head)))
            for ss_key, ss_tag, _ss_value, ss_end_field in fields(body, ss_value, ss_end):
                if ss_key != _SPANS:
                    continue
                run.append(body[ss_tag:ss_end_field])
                spans_at += ss_end_field - ss_tag
                if spans_at >= _CHUNK:
                    yield "spans", _frame(_RESOURCE_SPANS, _frame(_SCOPE_SPANS, b"".join(run)))
                    run, spans_at = [], 0
            if run:
                yield "spans", _frame(_RESOURCE_SPANS, _frame(_SCOPE_SPANS, b"".join(run)))
    if others:
        yield "request", b"".join(others)


def otlp_strings(body: bytes, pairs: list[tuple[str, str]] | None = None) -> tuple[list[str], bool] | None:
    """Every text an OTLP protobuf request holds (keys, string and bytes values at any depth, names, trace states,
    status messages, scope names and versions, schema URLs, entity references), each whole, and whether that is
    all of them (False when the request carries fields this schema does not know: a newer exporter's); None when
    `body` is not such a request. `pairs`, when given, receives each string attribute as (key, value): a value is
    judged by the name it is given too (`http.request.header.cookie`), not only by its shape.

    For the secret scan of a kept protobuf original (runs/secret_scan.py): in the raw bytes a string sits between
    framing bytes (a length, the next field's tag) that may be letters or digits, so a token glued to them fails the
    boundaries a rule asks for, and a mask widened over "its" token would overwrite the framing. Scanned as the texts
    they are, the values are found whole, then overwritten in the raw bytes exactly where they occur."""
    # Every text in order, repeats and empty ones included: a rule may read across texts (a command line's `curl` a
    # few lines before its `-u user:password`), so what is joined for the scan is what the whole request gave.
    out: list[str] = []
    add = out.append
    complete = True

    def value_texts(value: Any, depth: int) -> None:
        which = value.WhichOneof("value")
        if which == "string_value":
            add(value.string_value)
        elif which == "bytes_value":
            add(value.bytes_value.decode("latin-1"))
        elif depth < MAX_ANY_DEPTH and which == "array_value":
            for item in value.array_value.values:
                value_texts(item, depth + 1)
        elif depth < MAX_ANY_DEPTH and which == "kvlist_value":
            attrs(value.kvlist_value.values, depth + 1)

    def attrs(kvs: Any, depth: int = 0) -> None:
        for kv in kvs:
            add(kv.key)
            value = kv.value  # each access makes a new wrapper: once
            if value.WhichOneof("value") == "string_value":
                text = value.string_value
                add(text)  # the common case, without the call
                if pairs is not None:
                    pairs.append((kv.key, text))
            else:
                value_texts(value, depth)

    def piece_texts(kind: str, request: ExportTraceServiceRequest) -> None:
        if kind == "request":
            return  # the request's own fields other than its ResourceSpans: no text the schema knows
        rs = request.resource_spans[0]
        if kind == "resource":
            attrs(rs.resource.attributes)
            for entity in rs.resource.entity_refs:
                out.extend((entity.schema_url, entity.type, *entity.id_keys, *entity.description_keys))
            add(rs.schema_url)
            return
        ss = rs.scope_spans[0]
        if kind == "scope":
            add(ss.scope.name)
            add(ss.scope.version)
            attrs(ss.scope.attributes)
            add(ss.schema_url)
            return
        for span in ss.spans:
            add(span.name)
            add(span.trace_state)
            add(span.status.message)
            attrs(span.attributes)
            for event in span.events:
                add(event.name)
                attrs(event.attributes)
            for link in span.links:
                add(link.trace_state)
                attrs(link.attributes)

    try:
        for kind, piece in _pieces(body):
            request = ExportTraceServiceRequest.FromString(piece)
            piece_texts(kind, request)
            # Fields the schema does not know are kept by the parser as bytes no walk above reads: dropped, the
            # piece encodes to fewer bytes than it came in.
            complete = complete and len(piece) == _known_size(request)
            del request
    except (WireFormatError, DecodeError, ValueError, RuntimeError):
        return None
    return out, complete


def _known_size(request: ExportTraceServiceRequest) -> int:
    request.DiscardUnknownFields()
    return int(request.ByteSize())
