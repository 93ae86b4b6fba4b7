"""The texts of a kept OTLP protobuf original, read a piece at a time (issue 35): `otlp_strings` parses at most
about 64 KiB of a request at a time (upb's form of a request of many tiny spans is 14 times its bytes, and the OTLP
receiver masks every request it buffers), and answers exactly what a walk of the request parsed whole answers: the
same texts in the same order, the same name-value pairs, the same verdict on fields the schema does not know, and None
for bytes that are not such a request."""

from __future__ import annotations

import random
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from n17q_engine.formats.otlp import otlp_strings
from n17q_engine.formats.otlp.wire import MAX_ANY_DEPTH


def whole(body: bytes) -> tuple[list[str], list[tuple[str, str]], bool] | None:
    """The reference: the request parsed whole and walked as otlp_strings walks each piece."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except (DecodeError, ValueError, RuntimeError):
        return None
    out: list[str] = []
    pairs: list[tuple[str, str]] = []

    def value_texts(value: Any, depth: int) -> None:
        which = value.WhichOneof("value")
        if which == "string_value":
            out.append(value.string_value)
        elif which == "bytes_value":
            out.append(value.bytes_value.decode("latin-1"))
        elif depth < MAX_ANY_DEPTH and which == "array_value":
            for item in value.array_value.values:
                value_texts(item, depth + 1)
        elif depth < MAX_ANY_DEPTH and which == "kvlist_value":
            attrs(value.kvlist_value.values, depth + 1)

    def attrs(kvs: Any, depth: int = 0) -> None:
        for kv in kvs:
            out.append(kv.key)
            if kv.value.WhichOneof("value") == "string_value":
                out.append(kv.value.string_value)
                pairs.append((kv.key, kv.value.string_value))
            else:
                value_texts(kv.value, depth)

    for rs in request.resource_spans:
        attrs(rs.resource.attributes)
        for entity in rs.resource.entity_refs:
            out.extend((entity.schema_url, entity.type, *entity.id_keys, *entity.description_keys))
        out.append(rs.schema_url)
        for ss in rs.scope_spans:
            out.extend((ss.scope.name, ss.scope.version))
            attrs(ss.scope.attributes)
            out.append(ss.schema_url)
            for span in ss.spans:
                out.extend((span.name, span.trace_state, span.status.message))
                attrs(span.attributes)
                for event in span.events:
                    out.append(event.name)
                    attrs(event.attributes)
                for link in span.links:
                    out.append(link.trace_state)
                    attrs(link.attributes)
    request.DiscardUnknownFields()
    return out, pairs, len(body) == request.ByteSize()


def request_of(rng: random.Random, *, resources: int, scopes: int, spans: int, big: bool = False) -> bytes:
    request = ExportTraceServiceRequest()
    for r in range(resources):
        rs = request.resource_spans.add()
        rs.schema_url = f"https://schema/{r}" if r % 2 else ""
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = "service.name", f"svc-{r}"
        for s in range(scopes):
            ss = rs.scope_spans.add()
            ss.scope.name, ss.scope.version = f"scope-{s}", "1.0"
            for n in range(spans):
                span = ss.spans.add()
                span.trace_id, span.span_id = rng.randbytes(16), rng.randbytes(8)
                span.name = f"span {r}.{s}.{n}"
                span.status.message = "ok" if n % 3 else ""
                attr = span.attributes.add()
                attr.key = "note"
                attr.value.string_value = ("x" * 90_000) if big and n == 1 else f"curl -u user:{rng.randbytes(6).hex()}"
                nested = span.attributes.add()
                nested.key = "list"
                nested.value.array_value.values.add().string_value = f"item {n}"
                nested.value.array_value.values.add().bytes_value = rng.randbytes(4)
                event = span.events.add()
                event.name = f"event {n}"
    return request.SerializeToString()


def unknown(field: int, value: bytes) -> bytes:
    return bytes((field << 3 | 2,)) + bytes((len(value),)) + value


CASES = {
    "one resource, one scope, one span": dict(resources=1, scopes=1, spans=1),
    "several resources and scopes": dict(resources=3, scopes=4, spans=5),
    "many spans, several pieces of a scope": dict(resources=1, scopes=1, spans=3_000),
    "a span longer than a piece": dict(resources=2, scopes=2, spans=3, big=True),
    "empty": dict(resources=0, scopes=0, spans=0),
    "empty resource and scope": dict(resources=2, scopes=1, spans=0),
}


@pytest.mark.parametrize("shape", CASES.values(), ids=list(CASES))
def test_a_request_read_a_piece_at_a_time_gives_what_it_gave_parsed_whole(shape):
    body = request_of(random.Random(7), **shape)
    pairs: list[tuple[str, str]] = []
    texts = otlp_strings(body, pairs)
    expected = whole(body)
    assert texts is not None and expected is not None
    assert (texts[0], pairs, texts[1]) == expected
    assert texts[1] is True


def test_fields_the_schema_does_not_know_make_it_incomplete_at_every_level():
    body = request_of(random.Random(3), resources=1, scopes=1, spans=2)
    request = ExportTraceServiceRequest.FromString(body)
    at_request = body + unknown(9, b"newer exporter")
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.name = "renamed"
    at_span = request.SerializeToString()
    for changed, complete in ((at_request, False), (at_span, True)):
        texts = otlp_strings(changed)
        expected = whole(changed)
        assert texts is not None and expected is not None
        assert (texts[0], texts[1]) == (expected[0], expected[2]) and texts[1] is complete


@pytest.mark.parametrize(
    "body",
    [b"\x0a\x05abc", b"\x0a\x02\x12\x7f", b"\x00", b"\x0b", b"not protobuf at all \xff\xff"],
    ids=["cut short", "inner length past its message", "field 0", "a group never closed", "text"],
)
def test_bytes_that_are_not_such_a_request_are_none_as_before(body):
    assert whole(body) is None
    assert otlp_strings(body) is None
