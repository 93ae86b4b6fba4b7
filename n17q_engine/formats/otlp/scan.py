"""The scan of a kept original: every text an OTLP protobuf request holds, each whole, for the importer's secret
scan (`otlp_strings`, read by runs/secret_scan.py), which finds a token in the texts and masks it in the raw
bytes where it occurs."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .wire import MAX_ANY_DEPTH


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
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, ValueError, RuntimeError):
        return None
    # Fields the schema does not know are kept by the parser as bytes no walk below reads: dropped, the request
    # encodes to fewer bytes than it came in.
    complete = len(body) == _known_size(request)
    out: list[str] = []
    add = out.append

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

    for rs in request.resource_spans:
        attrs(rs.resource.attributes)
        for entity in rs.resource.entity_refs:
            out += (entity.schema_url, entity.type, *entity.id_keys, *entity.description_keys)
        add(rs.schema_url)
        for ss in rs.scope_spans:
            add(ss.scope.name)
            add(ss.scope.version)
            attrs(ss.scope.attributes)
            add(ss.schema_url)
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
    return out, complete


def _known_size(request: ExportTraceServiceRequest) -> int:
    request.DiscardUnknownFields()
    return int(request.ByteSize())
