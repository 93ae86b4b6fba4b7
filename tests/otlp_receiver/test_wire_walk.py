"""The receiver never holds a request parsed whole (issue 35, part B): protobuf is walked at the wire level and
parsed a piece at a time (otlp_receiver.wire._ProtobufReader, n17q_engine.protowire), a long OTLP/JSON span is
read a member and an element at a time. Each is checked here against what parsing the whole request decided: the
same bodies accepted and refused, the same split, the spans kept byte for byte; and past a cap, 413 in one line
before the piece is built."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from n17q_engine import protowire
from n17q_engine.formats.otlp import reader as otlp_json
from otlp_receiver import wire
from otlp_receiver.models import ReceivedTrace

from .conftest import agent_turn
from .test_bad_input import assert_nothing_stored, post, status_of
from .test_bounded_work import exporter_json, variants

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")


# ---- the split a whole parse gave (the receiver's before issue 35 part B)


def whole_split(body: bytes) -> dict[str, Any] | None:
    """The request parsed whole by upb and cut by trace as `split_by_trace` did before: None when upb refuses it."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except Exception:
        return None
    rejected, reasons = 0, []
    traces: dict[str, dict[str, Any]] = {}
    for rs in request.resource_spans:
        service = wire._service_name(rs.resource)
        for ss in rs.scope_spans:
            for span in ss.spans:
                reason = wire._refusal(span)
                if reason is not None:
                    rejected += 1
                    if reason not in reasons:
                        reasons.append(reason)
                    continue
                trace = traces.setdefault(span.trace_id.hex(), {"service": service, "spans": [], "root": (False, "")})
                trace["spans"].append(_held(rs, ss, span))
                if not span.parent_span_id:
                    trace["root"] = (span.end_time_unix_nano > 0, span.name[:200])
    return {"rejected": rejected, "reasons": reasons, "traces": traces}


def _held(rs: Any, ss: Any, span: Any) -> tuple[bytes, ...]:
    """One span with what it was sent under, as comparable bytes."""
    return (
        rs.resource.SerializeToString(deterministic=True),
        rs.schema_url.encode(),
        ss.scope.SerializeToString(deterministic=True),
        ss.schema_url.encode(),
        span.SerializeToString(deterministic=True),
    )


def walked_split(body: bytes) -> dict[str, Any] | None:
    """`split_request` of the body, as `whole_split` writes its answer: None when it refuses the body (400)."""
    try:
        split = wire.split_request(body, "protobuf")
    except wire.WireError as exc:
        assert exc.status == 400 and "\n" not in exc.message, exc.message
        return None
    traces = {}
    for trace_id, batch in split.batches.items():
        held = ExportTraceServiceRequest.FromString(batch.payload)
        spans = [_held(rs, ss, span) for rs in held.resource_spans for ss in rs.scope_spans for span in ss.spans]
        assert batch.span_count == len(spans)
        traces[trace_id] = {"service": batch.service_name, "spans": spans, "root": (batch.root_ended, batch.root_name)}
    return {"rejected": split.rejected, "reasons": split.reasons, "traces": traces}


def several_traces(recorder, *, invalid: bool = True) -> bytes:
    """A request of three traces in two scopes, one span (when `invalid`) without a valid span id."""
    for _ in range(3):
        agent_turn(recorder.tracer, tool_calls=2)
    request = encode_spans(recorder.take())
    spans = request.resource_spans[0].scope_spans[0].spans
    moved = request.resource_spans[0].scope_spans.add()
    moved.scope.name = "second scope"
    moved.schema_url = "https://opentelemetry.io/schemas/1.26.0"
    moved.spans.extend(spans[::3])
    del spans[::3]
    if invalid:
        spans[1].span_id = b"\x00" * 8
    return request.SerializeToString()


def span_fields(body: bytes) -> list[bytes]:
    """Every Span of a request as its field's bytes (tag, length and message), in order."""
    out = []
    for key, _tag, start, end in protowire.fields(body, 0, len(body)):
        if key == 0x0A:
            for key2, _tag2, start2, end2 in protowire.fields(body, start, end):
                if key2 == 0x12:
                    for key3, tag3, _start3, end3 in protowire.fields(body, start2, end2):
                        if key3 == 0x12:
                            out.append(body[tag3:end3])
    return out


# ---- protobuf: split as the whole parse split it


def test_a_request_of_several_traces_is_split_with_its_spans_byte_for_byte(recorder):
    body = several_traces(recorder)
    split = wire.split_request(body, "protobuf")
    assert walked_split(body) == whole_split(body)
    assert len(split.batches) == 3 and split.rejected == 1 and split.accepted == 14
    sent = span_fields(body)
    kept = [field for batch in split.batches.values() for field in span_fields(batch.payload)]
    assert len(kept) == split.accepted and set(kept) <= set(sent)  # the spans' own bytes, not a re-encoding


def test_a_request_of_one_trace_is_its_own_payload(recorder):
    agent_turn(recorder.tracer, tool_calls=3)
    body = encode_spans(recorder.take()).SerializeToString()
    [batch] = wire.split_request(body, "protobuf").batches.values()
    assert batch.payload == body and batch.span_count == 7 and batch.root_ended


def test_split_by_trace_of_a_parsed_message_is_the_split_of_its_bytes(recorder):
    body = several_traces(recorder)
    by_message = wire.split_by_trace(ExportTraceServiceRequest.FromString(body))
    by_bytes = wire.split_request(body, "protobuf")
    assert {t: b.payload for t, b in by_message.batches.items()} == {t: b.payload for t, b in by_bytes.batches.items()}


# Skeletons upb reads one way or the other: its verdict is the receiver's, whatever the layer it sits in.
SKELETONS = [
    b"",
    b"\x0a\x00",  # an empty ResourceSpans
    b"\x0a\x02\x12\x00" * 3,  # empty ScopeSpans
    b"\x08\x01",  # field 1 as a varint: a field upb does not know, kept
    b"\x0d\x01\x02\x03\x04",  # and as a fixed32
    b"\x0b\x08\x01\x0c",  # a group, closed
    b"\x0b\x0b\x0c\x0c",  # nested groups
    b"\x0b\x1c",  # a group closed by another field's end tag
    b"\x0b",  # a group never closed
    b"\x04",  # an end-group tag outside a group
    b"\x0e",  # wire type 6
    b"\x0a\x02\x12",  # a ScopeSpans cut short
    b"\x0a\x01\x0a",  # a Resource cut short
    b"\x0a\x03\x1a\x01\xff",  # a schema_url that is not UTF-8
    b"\x0a\x03\x0a\x01\xff",  # a Resource that does not parse
    b"\x0a\x02\x10\x01",  # ResourceSpans field 2 as a varint
    b"\x0a\x04\x12\x02\x10\x05",  # ScopeSpans field 2 as a varint
    b"\x0a\x06\x12\x04\x12\x02\x08\x01",  # a Span's trace id as a varint
    b"\x0a\x06\x12\x04\x12\x02\x0a\x01",  # a Span cut short
    b"\x0a\x04\x12\x02\x23\x24",  # an unknown group inside a ScopeSpans
    b"\x0a\x02\x04\x00",  # an end-group tag inside a ResourceSpans
    b"\x1a\x01\x80",  # an unknown length-delimited field: its bytes are not read
    b"\x0a\x80\x00",  # a length written in two bytes
    b"\x0a\x80\x80\x80\x80\x80\x00",  # and in six
    b"\xf8\xff\xff\xff\x0f\x00",  # the largest field number
    b"\xf8\xff\xff\xff\x1f\x00",  # past it
    b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f",  # a 10-byte varint
    b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an 11-byte one
    b"\x00",  # field number 0
]


@pytest.mark.parametrize("body", SKELETONS, ids=[s.hex() or "empty" for s in SKELETONS])
def test_a_skeleton_is_accepted_or_refused_as_upb_decides(body):
    assert walked_split(body) == whole_split(body)


def test_bodies_changed_at_random_are_accepted_or_refused_as_upb_decides(recorder):
    """Cut, flipped and spliced bytes of a real request (a fixed seed): every verdict and every split the whole
    parse's."""
    body = several_traces(recorder) + b"\x1b\x08\x01\x1c"  # and an unknown group at the end
    rng = random.Random(35)
    decided = set()
    for _ in range(400):
        data = bytearray(body)
        at = rng.randrange(len(data))
        change = rng.choice(["cut", "flip", "insert", "delete"])
        if change == "cut":
            del data[at:]
        elif change == "flip":
            data[at] = rng.randrange(256)
        elif change == "insert":
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        else:
            del data[at]
        expected = whole_split(bytes(data))
        assert walked_split(bytes(data)) == expected, (change, at)
        decided.add(expected is None)
    assert decided == {True, False}  # both verdicts were met


def nested_span(levels: int) -> bytes:
    """A span whose one attribute is `levels` kvlists deep (three messages a level)."""
    span = Span(trace_id=TRACE, span_id=b"\x01" * 8, name="deep")
    value = span.attributes.add(key="d").value
    for _ in range(levels):
        value = value.kvlist_value.values.add(key="k").value
    value.string_value = "leaf"
    return span.SerializeToString()


def request_of(*spans: bytes) -> bytes:
    scope = b"".join(wire._frame(0x12, s) for s in spans)
    return wire._frame(0x0A, wire._frame(0x12, scope))


@pytest.mark.parametrize("levels", [31, 32, 33])
def test_nesting_is_refused_at_the_depth_upb_refused_it_in_the_whole_request(levels):
    """A span parsed alone would be allowed three levels more: it is parsed framed as it sat in the request."""
    body = request_of(nested_span(levels))
    assert walked_split(body) == whole_split(body)


# ---- protobuf: the caps, counted before a piece is built


def span_with_attributes(count: int) -> bytes:
    span = Span(trace_id=TRACE, span_id=b"\x01" * 8, name="wide")
    for i in range(count):
        span.attributes.add(key=f"k{i}").value.int_value = 1
    return span.SerializeToString()


def test_a_span_past_the_attribute_cap_is_refused_with_413_in_one_line(client, operator_key):
    response = post(client, request_of(span_with_attributes(otlp_json.MAX_ITEMS + 1)), operator_key)
    assert response.status_code == 413, response.content[:300]
    _code, message = status_of(response)
    assert "a span holds a list of more than 10000 items" in message and "\n" not in message, message
    assert_nothing_stored()


def test_a_span_at_the_attribute_cap_is_received(client, operator_key):
    body = request_of(span_with_attributes(otlp_json.MAX_ITEMS))
    assert len(body) > 2 * otlp_json.MAX_ITEMS  # long enough to be counted first
    assert post(client, body, operator_key).status_code == 200
    assert ReceivedTrace.objects.count() == 1


def test_a_resource_past_the_attribute_cap_is_refused(recorder):
    agent_turn(recorder.tracer)
    request = encode_spans(recorder.take())
    for i in range(otlp_json.MAX_ITEMS + 1):
        request.resource_spans[0].resource.attributes.add(key=f"r{i}").value.bool_value = True
    with pytest.raises(wire.WireError) as refused:
        wire.split_request(request.SerializeToString(), "protobuf")
    assert refused.value.status == 413 and "a resource holds a list of more than" in refused.value.message


def test_a_span_of_more_messages_than_its_size_allows_is_refused():
    """30 lists of 10,000 empty values: no list past the cap, but 300,000 messages (15 MB once built) in 600 KB."""
    span = Span(trace_id=TRACE, span_id=b"\x01" * 8)
    for i in range(30):
        values = span.attributes.add(key=f"a{i}").value.array_value.values
        for _ in range(otlp_json.MAX_ITEMS):
            values.add()
    with pytest.raises(wire.WireError) as refused:
        wire.split_request(request_of(span.SerializeToString()), "protobuf")
    assert refused.value.status == 413 and "more attributes and values than its size allows" in refused.value.message


# ---- OTLP/JSON: a long span read a piece at a time, as it was read decoded whole


def json_outcome(body: bytes) -> tuple[Any, ...]:
    try:
        message = wire.parse_request(body, "json")
        split = wire.split_request(body, "json")
    except wire.WireError as exc:
        assert "\n" not in exc.message
        return ("refused", exc.status)
    summary = sorted((t, b.span_count, b.root_ended, b.root_name, b.service_name) for t, b in split.batches.items())
    return (message.SerializeToString(deterministic=True), split.rejected, split.reasons, summary)


def kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


SPAN = {"traceId": TRACE.hex(), "spanId": "00000000000000a1", "name": "s"}
NESTED = {"arrayValue": {"values": [{"intValue": "1"}, {"kvlistValue": {"values": [kv("x", {"boolValue": True})]}}]}}


def spans_json(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> bytes:
    rs: dict[str, Any] = {"scopeSpans": [{"scope": {"name": "s"}, "spans": list(spans)}]}
    if resource is not None:
        rs["resource"] = resource
    return json.dumps({"resourceSpans": [rs]}).encode()


def raw_span(members: str) -> bytes:
    """A request of one span written by hand (members given twice, trailing commas): its ids, then `members`."""
    span = f'{{"traceId": "{TRACE.hex()}", "spanId": "00000000000000a1", {members}}}'
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()


ATTRIBUTE = '{"key": "a", "value": {"stringValue": "1"}}'
EIGHT = ", ".join([ATTRIBUTE] * 8)


def long_spans() -> list[bytes]:
    """Spans whose objects are longer than a small window: each walked a piece at a time."""
    return [
        spans_json({**SPAN, "attributes": [kv("a", {"stringValue": "x"}), kv("n", NESTED)]}),
        spans_json({**SPAN, "attributes": [kv("a", {"stringValue": "x", "intValue": "3"})]}),  # two of a oneof
        spans_json({**SPAN, "attributes": [kv("a", {**NESTED, "stringValue": "x"})]}),
        spans_json({**SPAN, "attributes": [kv("a", {**NESTED, "array_value": {"values": []}})]}),
        spans_json({**SPAN, "attributes": [None, kv("a", NESTED)]}),
        spans_json({**SPAN, "attributes": [1, kv("a", NESTED)]}),
        spans_json({**SPAN, "attributes": {"key": "a", "value": NESTED}}),  # not a list
        spans_json({**SPAN, "attributes": [kv("a", {"intValue": "not an int"}), kv("n", NESTED)]}),
        spans_json({**SPAN, "links": [{"traceId": TRACE.hex(), "spanId": "00000000000000b1", "attributes": []}] * 3}),
        spans_json({**SPAN, "links": [{"traceId": "not hex", "spanId": "00000000000000b1", "attributes": []}] * 3}),
        spans_json({**SPAN, "events": [{"name": "e", "timeUnixNano": "5", "attributes": [kv("n", NESTED)]}] * 2}),
        spans_json({**SPAN, "unknownMember": [{"a": [1, 2, 3, {"b": "c" * 30}]}]}),  # ignored, but checked
        spans_json({**SPAN, "[an.extension]": [{"a": [1, 2, 3, {"b": "c" * 30}]}]}),  # refused, as ParseDict does
        spans_json({**SPAN, "status": {"code": 2, "message": "m" * 60}}),
        spans_json({**SPAN, "status": [{"code": 2, "message": "m" * 60}]}),
        spans_json({**SPAN, "name": {"x": "y" * 60}}),
        spans_json(SPAN, resource={"attributes": [kv("service.name", {"stringValue": "svc"}), kv("n", NESTED)]}),
        spans_json(SPAN, resource={"attributes": [kv("service.name", {"stringValue": 5}), kv("n", NESTED)]}),
        raw_span(f'"attributes": [{ATTRIBUTE}], "attributes": [{ATTRIBUTE}, {ATTRIBUTE}]'),  # the last counts
        raw_span(f'"attributes": [{ATTRIBUTE}, {ATTRIBUTE}], "attributes": null'),
        raw_span('"status": {"message": "%s"}, "status": {"code": 1}' % ("m" * 60)),
        raw_span(f'"attributes": [{ATTRIBUTE}, {ATTRIBUTE}, ]'),  # malformed
        raw_span(f'"attributes": [{ATTRIBUTE}, {ATTRIBUTE}]]'),
        raw_span(f'"attributes": [{EIGHT}], "x": [}}'),  # malformed after a list past the cap: "not JSON" first
        raw_span(f'"attributes": [{EIGHT}], "kind": "NOT_A_KIND"'),  # past the cap and refused by ParseDict: 413
    ]


def test_a_span_read_a_piece_at_a_time_is_what_it_was_decoded_whole(recorder, monkeypatch):
    """A window of 40 characters walks every object longer than that a piece at a time: each body gets the answer
    and the message (or the status) the whole decode gave it, under the caps (6 items a list) as within them."""
    bodies = [*variants(exporter_json(recorder)), *long_spans()]
    for max_items in (otlp_json.MAX_ITEMS, 6):
        monkeypatch.setattr(otlp_json, "MAX_ITEMS", max_items)
        whole = [json_outcome(b) for b in bodies]
        monkeypatch.setattr(otlp_json, "WINDOW_CHARS", 40)
        monkeypatch.setattr(otlp_json, "WINDOW_MIN", 16)
        walked = [json_outcome(b) for b in bodies]
        monkeypatch.undo()
        for body, expected, got in zip(bodies, whole, walked, strict=True):
            assert got == expected, (max_items, body[:200])
    assert ("refused", 413) in whole  # the caps were met, and walked past


def test_a_json_span_past_the_attribute_cap_is_refused_an_attribute_at_a_time(monkeypatch):
    decoded: list[int] = []
    check = wire._JsonReader._check

    def counted(self, value, what, depth=1):
        decoded.append(1)
        return check(self, value, what, depth)

    monkeypatch.setattr(wire._JsonReader, "_check", counted)
    body = spans_json({**SPAN, "attributes": [kv(f"k{i}", {"intValue": "1"}) for i in range(3 * otlp_json.MAX_ITEMS)]})
    with pytest.raises(wire.WireError) as refused:
        wire.split_request(body, "json")
    assert refused.value.status == 413 and "a span holds a list of more than 10000 items" in refused.value.message
    assert len(decoded) <= otlp_json.MAX_ITEMS + 10  # each attribute decoded alone, and none checked past the cap


# ---- what the split keeps beside the spans' bytes, within the body's size


def tiny_span(i: int, trace: bytes) -> bytes:
    return Span(trace_id=trace, span_id=(i + 1).to_bytes(8, "big"), name="s").SerializeToString()


@pytest.mark.parametrize("shape", ["scopes", "resources", "traces"])
def test_many_tiny_scopes_resources_or_traces_are_refused_past_what_the_size_allows(shape):
    """100,000 of them, one 33-byte span apiece: kept whole they came to 20-25 times the body (tracemalloc)."""
    n = 100_000
    if shape == "scopes":  # in one ResourceSpans
        scopes = (wire._frame(0x12, wire._frame(0x12, tiny_span(i, TRACE))) for i in range(n))
        body = wire._frame(0x0A, b"".join(scopes))
    elif shape == "resources":
        body = b"".join(request_of(tiny_span(i, TRACE)) for i in range(n))
    else:  # each its own trace, in one scope
        body = request_of(*(tiny_span(i, (i + 1).to_bytes(16, "big")) for i in range(n)))
    with pytest.raises(wire.WireError) as refused:
        wire.split_request(body, "protobuf")
    assert refused.value.status == 413, refused.value.message
    assert "more resources, scopes and traces than its size allows" in refused.value.message


def test_an_sdk_batch_of_one_span_traces_is_received(recorder):
    for _ in range(512):
        with recorder.tracer.start_as_current_span("GET /items", attributes={"http.route": "/items"}):
            pass
    body = encode_spans(recorder.take()).SerializeToString()
    split = wire.split_request(body, "protobuf")
    assert len(split.batches) == 512 and split.accepted == 512
