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
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from n17q_engine.budget import checkpoint

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = {PROTOBUF: "protobuf", JSON: "json"}

# google.rpc.Code values the answers use.
INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, RESOURCE_EXHAUSTED = 3, 16, 7, 8

_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)
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


def decompress(body: bytes, content_encoding: str, *, max_bytes: int) -> bytes:
    """The body without its Content-Encoding, refused past `max_bytes` decoded (a gzip bomb stops at the cap)."""
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise WireError(415, f"Content-Encoding {content_encoding!r} is not supported: send gzip, deflate or none")
    # gzip: its header; deflate: HTTP's "deflate" is a zlib stream, but some clients send raw deflate.
    wbits = zlib.MAX_WBITS | 16 if encoding == "gzip" else (zlib.MAX_WBITS if body[:1] == b"\x78" else -zlib.MAX_WBITS)
    out = bytearray()
    rest = body
    while rest:
        checkpoint()  # the request's budget (n17q_engine.budget), once per member
        stream = zlib.decompressobj(wbits)
        try:
            # At most one byte past the cap is ever produced: a bomb is refused after max_bytes, not unpacked.
            out += stream.decompress(rest, max_bytes + 1 - len(out))
        except zlib.error as exc:
            raise WireError(400, f"the {encoding} body cannot be decompressed ({exc})") from None
        if len(out) > max_bytes:
            raise WireError(413, f"the body decompresses to more than {max_bytes} bytes")
        if not stream.eof:
            raise WireError(400, f"the {encoding} body is cut short")
        rest = stream.unused_data if encoding == "gzip" else b""  # gzip allows members one after another
    return bytes(out)


def parse_request(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if encoding == "protobuf":
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None
        return request
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise WireError(400, f"the body is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise WireError(400, "the body is not an OTLP ExportTraceServiceRequest: a JSON object was expected")
    try:
        json_format.ParseDict(_hex_ids_to_base64(value), request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
        line = " ".join(str(exc).splitlines())[:300]
        raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in JSON ({line})") from None
    return request


def _hex_ids_to_base64(value: dict[str, Any]) -> dict[str, Any]:
    """OTLP JSON writes ids as hex, proto3 JSON as base64. A span whose id is not hex keeps an empty trace id, and
    is refused by `split_by_trace` like any span without a valid one (partial success), not the whole request."""
    for rs in _list(value.get("resourceSpans", value.get("resource_spans"))):
        for ss in _list(_get(rs, "scopeSpans", "scope_spans")):
            for span in _list(_get(ss, "spans", "spans")):
                checkpoint()
                if not isinstance(span, dict):
                    continue
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
    return value


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


def _get(obj: Any, camel: str, snake: str) -> Any:
    return obj.get(camel, obj.get(snake)) if isinstance(obj, dict) else None


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
