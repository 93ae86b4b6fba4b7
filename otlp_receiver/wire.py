"""OTLP/HTTP on the wire (https://opentelemetry.io/docs/specs/otlp/#otlphttp): bodies in, answers out.

Plain functions on bytes, no Django, so that the rules are testable alone. A request body is an
ExportTraceServiceRequest, binary protobuf (`application/x-protobuf`) or OTLP's JSON mapping (`application/json`:
proto3 JSON, except that trace and span ids are hex, not base64), optionally gzip-compressed. It is decoded with the
opentelemetry-proto package and cut into one ExportTraceServiceRequest per trace, each kept as protobuf bytes:
protobuf messages concatenate, so the chunks of one trace joined in order are one valid request again, holding
every span the trace received (the run's original, kept as a blob).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner json.loads uses
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from n17q_engine.budget import checkpoint
from n17q_engine.inflate import InflateError, inflate

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = {PROTOBUF: "protobuf", JSON: "json"}

# google.rpc.Code values the answers use.
INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 3, 16, 7, 8

_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)
MAX_GZIP_MEMBERS = 4096  # gzip members in one body (bgzip writes one a 64 KiB block)
_MAX_REASONS = 3


class WireError(Exception):
    """A request the receiver refuses as a whole: the HTTP status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def body_encoding(content_type: str) -> str | None:
    """ "protobuf" or "json" for the request's Content-Type (parameters such as charset ignored), None otherwise."""
    return MEDIA_TYPES.get(content_type.split(";", 1)[0].strip().lower())


def decompress(body: bytes, content_encoding: str, *, max_bytes: int, max_members: int = MAX_GZIP_MEMBERS) -> bytes:
    """The body without its Content-Encoding, refused past `max_bytes` decoded (a gzip bomb stops at the cap) or
    past `max_members` gzip members; read in one linear pass (n17q_engine.inflate)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise WireError(415, f"Content-Encoding {content_encoding!r} is not supported: send gzip, deflate or none")
    try:
        return inflate(body, encoding, max_bytes=max_bytes, max_members=max_members)
    except InflateError as exc:
        if exc.too_large:
            raise WireError(413, f"the {encoding} body {exc.message}") from None
        raise WireError(400, f"the {encoding} body {exc.message}") from None


def parse_request(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if encoding == "protobuf":
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None
        return request
    try:
        text = _json_text(body)
        _JsonReader(text, len(body)).read_request(request)
    except _TooMuch as exc:
        raise WireError(413, f"the body is refused: {exc}") from None
    except _NotOtlp as exc:
        line = " ".join(str(exc).splitlines())[:300]
        raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in JSON ({line})") from None
    except (ValueError, RecursionError) as exc:
        raise WireError(400, f"the body is not JSON ({exc})") from None
    return request


# ---- OTLP/JSON, read a span at a time (issue 35)
#
# `json.loads` of a whole request then `ParseDict` of the whole dict took a 37 MB body to 14 times its size in
# memory (the dicts of every span at once, then the message). Here the request's skeleton (the resourceSpans,
# scopeSpans and spans lists) is walked over the text, and each span, resource and scope is decoded alone by the
# json module's C scanner (`raw_decode`), checked against the caps below, and parsed into the message by
# `ParseDict` as before, so only one span's dicts are alive at a time and what is accepted or refused is unchanged
# (tests/otlp_receiver/test_bounded_work.py compares it with the whole-document parse).

MAX_SPANS = 100_000  # per request; an SDK's batch is 512
MAX_ITEMS = 10_000  # per list: attributes of a span, a resource, a scope, an event or a link; events; links; values
MAX_STRING_CHARS = 8 * 1024 * 1024  # a key or a string value
MAX_DEPTH = 140  # JSON nesting in a span: an attribute value 32 deep (the converter's MAX_ANY_DEPTH) is 136
# What the parsed message costs, estimated per JSON object (measured with upb: an empty Span about 180 bytes, an
# empty KeyValue about 56, an AnyValue about as much), and how many times the body's size those may come to: real
# spans come to 1 to 3 times (many small attributes the most); empty objects (`{}`, three bytes, is a 180-byte
# span) by the hundred thousand are refused.
_SPAN_COST, _OBJECT_COST = 180, 56
_COST_PER_BYTE = 4
_COST_SLACK = 1 << 20

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_RESOURCE_SPANS = ("resourceSpans", "resource_spans")
_SCOPE_SPANS = ("scopeSpans", "scope_spans")
_SPANS = ("spans",)


class _TooMuch(Exception):
    """Past a cap: 413."""


class _NotOtlp(Exception):
    """JSON, but not an ExportTraceServiceRequest: 400."""


def _json_text(body: bytes) -> str:
    """The body as text, as `json.loads` reads bytes (UTF-8, or UTF-16/32 by their first bytes)."""
    return body.decode(json.detect_encoding(body), "surrogatepass")


class _JsonReader:
    def __init__(self, text: str, size: int) -> None:
        self.text = text
        self.spans = 0
        # The text itself is counted against the budget: a body widened to 4 bytes a character leaves less.
        self.budget = _COST_PER_BYTE * size + _COST_SLACK - max(0, sys.getsizeof(text) - size)
        self.cost = 0

    # -- the skeleton

    def read_request(self, request: ExportTraceServiceRequest) -> None:
        if self.text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", self.text, 0)
        pos = self._ws(0)
        if self.text[pos : pos + 1] != "{":
            _value, end = _DECODER.raw_decode(self.text, pos)  # what json.loads would say of it
            self._end(end)
            raise WireError(400, "the body is not an OTLP ExportTraceServiceRequest: a JSON object was expected")
        pos = self._object(pos, request, _RESOURCE_SPANS, self._resource_spans)
        self._end(pos)

    def _resource_spans(self, pos: int, message: Any) -> int:
        return self._object(pos, message, _SCOPE_SPANS, self._scope_spans)

    def _scope_spans(self, pos: int, message: Any) -> int:
        return self._object(pos, message, _SPANS, self._span)

    def _span(self, pos: int, message: Any) -> int:
        checkpoint()  # the request's budget (n17q_engine.budget), once per span
        span, end = _DECODER.raw_decode(self.text, pos)
        self.spans += 1
        if self.spans > MAX_SPANS:
            raise _TooMuch(f"it holds more than {MAX_SPANS} spans: send smaller batches")
        self.cost += _SPAN_COST - _OBJECT_COST
        self._check(span, "a span")
        if isinstance(span, dict):
            _span_ids_to_base64(span)
        self._parse(span, message)
        return end

    def _object(self, pos: int, message: Any, names: tuple[str, ...], element: Any) -> int:
        """The JSON object at `pos` into `message`: its list named `names` an element at a time, by `element` into
        each new item of that repeated field; every other member decoded whole, checked and parsed as before."""
        text = self.text
        rest: dict[str, Any] = {}
        field = getattr(message, _FIELDS[names[0]])
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "}":
            return pos + 1
        while True:
            if text[pos : pos + 1] != '"':
                raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
            key, pos = scanstring(text, pos + 1)
            pos = self._ws(pos)
            if text[pos : pos + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
            pos = self._ws(pos + 1)
            if key in names:
                del field[:]  # given twice (or as both names): the last one counts, as ParseDict clears it
                rest.pop(key, None)
                if text[pos : pos + 1] == "[":
                    pos = self._array(pos, field, element)
                else:
                    value, pos = _DECODER.raw_decode(text, pos)
                    if value is not None:  # null clears the field, as ParseDict does; anything else it refuses
                        rest[key] = value
            else:
                value, pos = _DECODER.raw_decode(text, pos)
                self._check(value, f"the {key!r} of a {message.DESCRIPTOR.name}")
                rest[key] = value
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "}":
                pos += 1
                break
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        if rest:
            self._parse(rest, message)
        return pos

    def _array(self, pos: int, field: Any, element: Any) -> int:
        text = self.text
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "]":
            return pos + 1
        while True:
            if text[pos : pos + 1] == "{" or element == self._span:
                pos = element(pos, field.add())
            else:  # not an object: decoded whole, and parsed (or refused) by ParseDict as before
                value, pos = _DECODER.raw_decode(text, pos)
                if value is None:
                    raise _NotOtlp("null is not allowed to be used as an element in a repeated field")
                self.cost += _SPAN_COST
                self._check(value, "a value")
                self._parse(value, field.add())
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                return pos + 1
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def _ws(self, pos: int) -> int:
        match = _WS.match(self.text, pos)
        return match.end() if match else pos

    def _end(self, pos: int) -> None:
        pos = self._ws(pos)
        if pos != len(self.text):
            raise json.JSONDecodeError("Extra data", self.text, pos)

    # -- each piece: checked, then parsed

    def _check(self, value: Any, what: str) -> None:
        """The caps, over one decoded piece: nesting, list lengths, string lengths, and what its objects will cost."""
        objects = 0
        stack: list[tuple[Any, int]] = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            if isinstance(item, str):
                if len(item) > MAX_STRING_CHARS:
                    raise _TooMuch(f"{what} holds a string of more than {MAX_STRING_CHARS} characters")
            elif isinstance(item, dict):
                objects += 1
                if depth > MAX_DEPTH:
                    raise _NotOtlp(f"{what} is nested more than {MAX_DEPTH} levels deep")
                for key, inner in item.items():
                    if len(key) > MAX_STRING_CHARS:
                        raise _TooMuch(f"{what} holds a key of more than {MAX_STRING_CHARS} characters")
                    if isinstance(inner, (str, dict, list)):
                        stack.append((inner, depth + 1))
            elif isinstance(item, list):
                if len(item) > MAX_ITEMS:
                    raise _TooMuch(
                        f"{what} holds a list of more than {MAX_ITEMS} items (attributes, events, links or values)"
                    )
                if depth > MAX_DEPTH:
                    raise _NotOtlp(f"{what} is nested more than {MAX_DEPTH} levels deep")
                stack.extend((inner, depth + 1) for inner in item if isinstance(inner, (str, dict, list)))
        self.cost += objects * _OBJECT_COST
        if self.cost > self.budget:
            raise _TooMuch(
                "it holds more spans, attributes and values than its size allows (empty objects by the "
                "hundred thousand)"
            )

    def _parse(self, value: Any, message: Any) -> None:
        try:
            json_format.ParseDict(
                value,
                message,
                ignore_unknown_fields=True,
                # ParseDict's own limit counted from the request, as when it parsed the whole document
                max_recursion_depth=_PARSE_DEPTH - _MESSAGE_DEPTH[message.DESCRIPTOR.name],
            )
        except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise _NotOtlp(str(exc)) from None


_PARSE_DEPTH = 100  # ParseDict's default max_recursion_depth
_MESSAGE_DEPTH = {"ExportTraceServiceRequest": 0, "ResourceSpans": 1, "ScopeSpans": 2, "Span": 3}
_FIELDS = {"resourceSpans": "resource_spans", "scopeSpans": "scope_spans", "spans": "spans"}


def _span_ids_to_base64(span: dict[str, Any]) -> None:
    """OTLP JSON writes ids as hex, proto3 JSON as base64. A span whose id is not hex keeps an empty trace id, and
    is refused by `split_by_trace` like any span without a valid one (partial success), not the whole request."""
    ok = True
    for camel, snake in (
        ("traceId", "trace_id"),
        ("spanId", "span_id"),
        ("parentSpanId", "parent_span_id"),
    ):
        ok &= _convert_id(span, camel, snake)
    for link in _list(span.get("links")):
        if isinstance(link, dict):
            ok &= _convert_id(link, "traceId", "trace_id") & _convert_id(link, "spanId", "span_id")
    if not ok:
        span.pop("trace_id", None)
        span["traceId"] = ""


def _convert_id(obj: dict[str, Any], camel: str, snake: str) -> bool:
    key = camel if camel in obj else snake if snake in obj else None
    if key is None:
        return True
    raw = obj[key]
    if not isinstance(raw, str):
        return False
    try:
        obj[key] = base64.b64encode(bytes.fromhex(raw)).decode("ascii")
    except ValueError:
        return False
    return True


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


@dataclass
class TraceBatch:
    """The spans of one trace in one request: an ExportTraceServiceRequest of their own, as protobuf bytes."""

    trace_id: str  # 32 lowercase hex digits
    payload: bytes
    span_count: int
    root_ended: bool = False
    root_name: str = ""
    service_name: str = ""


@dataclass
class SplitRequest:
    batches: dict[str, TraceBatch] = field(default_factory=dict)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(b.span_count for b in self.batches.values())

    def error_message(self) -> str:
        more = len(self.reasons) - _MAX_REASONS
        return "; ".join(self.reasons[:_MAX_REASONS]) + (f"; and {more} more" if more > 0 else "")


def _refusal(span: Any) -> str | None:
    if len(span.trace_id) != 16 or span.trace_id == _ZERO_TRACE:
        return "a span without a valid 16-byte trace id"
    if len(span.span_id) != 8 or span.span_id == _ZERO_SPAN:
        return f"span {span.name!r} has no valid 8-byte span id"
    if span.parent_span_id and len(span.parent_span_id) != 8:
        return f"span {span.name!r} has a parent span id that is not 8 bytes"
    return None


def _service_name(resource: Any) -> str:
    for attribute in resource.attributes:
        if attribute.key == "service.name" and attribute.value.WhichOneof("value") == "string_value":
            return str(attribute.value.string_value).replace("\x00", "\ufffd")[:200]
    return ""


def split_by_trace(request: ExportTraceServiceRequest) -> SplitRequest:
    """Cut a request into one batch per trace; spans without valid ids are refused (counted, with reasons)."""
    out = SplitRequest()
    # trace id -> [(resource_spans, scope_spans, [spans])]
    grouped: dict[bytes, list[tuple[Any, Any, list[Any]]]] = defaultdict(list)
    roots: dict[bytes, tuple[bool, str]] = {}
    services: dict[bytes, str] = {}
    for rs in request.resource_spans:
        service = _service_name(rs.resource)
        for ss in rs.scope_spans:
            by_trace: dict[bytes, list[Any]] = defaultdict(list)
            for span in ss.spans:
                checkpoint()
                reason = _refusal(span)
                if reason is not None:
                    out.rejected += 1
                    if reason not in out.reasons:
                        out.reasons.append(reason)
                    continue
                by_trace[span.trace_id].append(span)
                if not span.parent_span_id:
                    roots[span.trace_id] = (span.end_time_unix_nano > 0, str(span.name).replace("\x00", "\ufffd")[:200])
            for trace_id, spans in by_trace.items():
                grouped[trace_id].append((rs, ss, spans))
                services.setdefault(trace_id, service)
    whole = len(grouped) == 1 and out.rejected == 0
    for trace_id, parts in grouped.items():
        if whole:
            payload = request.SerializeToString()  # the common case: one trace, every span valid
        else:
            piece = ExportTraceServiceRequest()
            for rs, ss, spans in parts:
                new_rs = piece.resource_spans.add()
                new_rs.resource.CopyFrom(rs.resource)
                new_rs.schema_url = rs.schema_url
                new_ss = new_rs.scope_spans.add()
                new_ss.scope.CopyFrom(ss.scope)
                new_ss.schema_url = ss.schema_url
                new_ss.spans.extend(spans)
            payload = piece.SerializeToString()
        ended, name = roots.get(trace_id, (False, ""))
        hex_id = trace_id.hex()
        out.batches[hex_id] = TraceBatch(
            trace_id=hex_id,
            payload=payload,
            span_count=sum(len(spans) for _rs, _ss, spans in parts),
            root_ended=ended,
            root_name=name,
            service_name=services.get(trace_id, ""),
        )
    return out


def success_body(encoding: str, *, rejected: int = 0, message: str = "") -> bytes:
    """ExportTraceServiceResponse, with partial_success when spans were refused, in the request's encoding."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if encoding == "json":
        return json_format.MessageToJson(response, indent=None).encode("utf-8")
    return response.SerializeToString()


def status_body(encoding: str, code: int, message: str) -> bytes:
    """A google.rpc.Status (code, message; no details), the body OTLP/HTTP wants with a 4xx or 5xx.

    Written by hand: Status is two fields, and googleapis-common-protos, which holds its class, is not a runtime
    dependency of the console."""
    if encoding == "json":
        return json.dumps({"code": code, "message": message}, ensure_ascii=False).encode("utf-8")
    text = message.encode("utf-8")
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def hex_or_none(value: str) -> str | None:
    """A trace id as given on a command line or in a URL: 32 hex digits, lowercased; None if it is not one."""
    value = value.strip().lower()
    if len(value) != 32:
        return None
    try:
        binascii.unhexlify(value)
    except (binascii.Error, ValueError):
        return None
    return value
