"""Where each span of a run is kept, and reading it back: the byte range of every span (and of the Resource and
scope it was sent under) in a protobuf original, found by a fast walk of the wire format's outer levels
(`span_byte_ranges`, `SpanBytes`), the "offset+length" text an event's `otlp` field names it by, and one span read
back from those bytes (`source_span_from_bytes`) or from a `source-trace` blob (`source_span_from_chunk`) for the
event panel (runs/source_span.py)."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ...protowire import WireFormatError, length_delimited
from .. import ConversionError
from .flat import _flat_from_proto
from .wire import _bulk, _short

# ---- where each span sits in a protobuf original

# A protobuf original kept whole (role `source-otlp`) already holds every span, byte for byte: the run names each
# event's span by its byte range in it instead of keeping the spans a second time as JSON (a 100,000-span file's
# source-trace blobs were 55 MB of JSON beside a 26 MB original, written, hashed and secret-scanned again).


class SpanBytes(NamedTuple):
    """Where one span sits in a protobuf ExportTraceServiceRequest: (offset, length) of its Span message, and of
    the Resource and InstrumentationScope it was sent under (None when the request had none)."""

    span: tuple[int, int]
    resource: tuple[int, int] | None
    scope: tuple[int, int] | None


def _span_ids(data: bytes, start: int, end: int) -> tuple[bytes, bytes]:
    """A Span's trace id and span id (fields 1 and 2). Every SDK writes them first, in that order: that layout is
    read directly; any other is walked field by field (the last occurrence wins, as a parser decides)."""
    if end - start >= 28 and data[start : start + 2] == b"\x0a\x10" and data[start + 18 : start + 20] == b"\x12\x08":
        return data[start + 2 : start + 18], data[start + 20 : start + 28]
    trace = span = b""
    for number, s, e in length_delimited(data, start, end):
        if number == 1:
            trace = data[s:e]
        elif number == 2:
            span = data[s:e]
    return trace, span


def _head_and_items(data: bytes, start: int, end: int) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
    """A message's singular field 1 as (offset, length) and its repeated field 2 as (start, end) each. WireFormatError
    when field 1 appears twice: a parser merges the two, so no one range stands for it."""
    head: tuple[int, int] | None = None
    items: list[tuple[int, int]] = []
    for number, s, e in length_delimited(data, start, end):
        if number == 1:
            if head is not None:
                raise WireFormatError
            head = (s, e - s)
        elif number == 2:
            items.append((s, e))
    return head, items


def span_byte_ranges(body: bytes) -> dict[tuple[str, str], SpanBytes] | None:
    """Where each span of a protobuf ExportTraceServiceRequest sits: {(trace id, span id) in hex: SpanBytes}, the
    first copy of a span sent twice. None when the request is laid out in a way a byte range cannot stand for
    (a Resource or scope sent twice in one message, which a parser merges) or does not walk: the caller then keeps
    the spans as JSON instead. Only the three outer levels are walked (about 0.1 s for 100,000 spans)."""
    found: dict[tuple[str, str], SpanBytes] = {}
    try:
        for number, rs_start, rs_end in length_delimited(body, 0, len(body)):
            if number != 1:
                continue
            # ResourceSpans and ScopeSpans alike: field 1 what the items were sent under, field 2 the items.
            resource, scopes = _head_and_items(body, rs_start, rs_end)
            for ss_start, ss_end in scopes:
                scope, spans = _head_and_items(body, ss_start, ss_end)
                for s, e in spans:
                    trace, span = _span_ids(body, s, e)
                    found.setdefault((trace.hex(), span.hex()), SpanBytes((s, e - s), resource, scope))
    except WireFormatError:
        return None
    return found


def byte_range_text(at: tuple[int, int]) -> str:
    """A byte range as an event's `otlp` field writes it: "offset+length"."""
    return f"{at[0]}+{at[1]}"


_BYTE_RANGE = re.compile(r"(\d{1,15})\+(\d{1,15})")


def parse_byte_range(value: Any) -> tuple[int, int] | None:
    """(offset, length) from "offset+length"; None for anything else."""
    match = _BYTE_RANGE.fullmatch(value) if isinstance(value, str) else None
    return (int(match[1]), int(match[2])) if match else None


def source_span_from_bytes(span: bytes, resource: bytes | None, scope: bytes | None) -> dict[str, Any]:
    """One span of a protobuf original, read from its byte ranges: {span, scope, resource} with the span as
    `flatten_spans` writes it (what the converter read), so it reads the same as a span kept in a source-trace blob.
    ConversionError when the bytes do not decode (the secret scan overwrote part of the original, say)."""
    request = ExportTraceServiceRequest()
    try:
        held = request.resource_spans.add()
        if resource is not None:
            held.resource.ParseFromString(resource)
        scoped = held.scope_spans.add()
        if scope is not None:
            scoped.scope.ParseFromString(scope)
        scoped.spans.add().ParseFromString(span)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ConversionError(f"the span's bytes do not decode ({_short(exc)})") from None
    with _bulk():
        [flat] = _flat_from_proto(request)
    resource, scope = flat.pop("resource"), flat.pop("scope")
    return {"span": flat, "scope": scope, "resource": resource}


def source_span_from_chunk(chunk: bytes, span_id: str) -> dict[str, Any] | None:
    """One span of a `source-trace` blob (the JSON form `mapping._TraceConverter._keep_spans_as_json` writes):
    {span, scope, resource}, as `source_span_from_bytes` gives; None when the blob holds no span of that id.
    ConversionError when the blob is not that JSON."""
    try:
        doc = json.loads(chunk)
    except (ValueError, RecursionError) as exc:
        raise ConversionError(f"the source-trace blob does not parse ({_short(exc)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("spans"), list):
        raise ConversionError("the source-trace blob is not a list of spans")
    resources = doc.get("resources")
    for span in doc["spans"]:
        if isinstance(span, dict) and span.get("span_id") == span_id:
            span = dict(span)
            key = span.pop("resource", None)
            resource = resources.get(key) if isinstance(resources, dict) and isinstance(key, str) else None
            return {"span": span, "scope": span.pop("scope", None), "resource": resource}
    return None
