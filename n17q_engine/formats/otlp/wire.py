"""Decoding an OTLP export: the body (protobuf or JSON) -> resourceSpans in the OTLP JSON mapping (`decode_otlp`),
the recognition of an OTLP file (`looks_like_otlp`), and the garbage-collector pause every bulk step runs under.

The protobuf is read through the OpenTelemetry project's generated classes and walked field by field (not through
`json_format.MessageToDict`: see the package's docstring); OTLP/JSON is shape-checked, its snake_case field names
read too and its ids checked and lower-cased. Flattening the result into one dict per span is `flat`'s."""

from __future__ import annotations

import base64
import binascii
import gc
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .. import ConversionError
from .reader import read_whole
from .text import _one_line

PROTOBUF = "application/x-protobuf"
JSON_TYPE = "application/json"
MAX_ANY_DEPTH = 32


_SPAN_KINDS = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
_SPAN_KIND_NAMES = {f"SPAN_KIND_{name.upper()}": name for name in _SPAN_KINDS.values()}
_STATUS_CODES = {0: "unset", 1: "ok", 2: "error"}
_STATUS_NAMES = {"STATUS_CODE_UNSET": "unset", "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}
_HEX32 = re.compile(r"^[0-9a-fA-F]{32}$")
_HEX16 = re.compile(r"^[0-9a-fA-F]{16}$")


# ------------------------------------------------------------------------------------------------------ decoding


def decode_otlp(body: bytes, *, content_type: str) -> list[dict[str, Any]]:
    """The resourceSpans of an ExportTraceServiceRequest (`application/x-protobuf` or `application/json`, already
    un-gzipped), in the OTLP JSON mapping (camelCase keys, int64 as strings, enums by name, as MessageToDict gives)
    with traceId/spanId/parentSpanId as lowercase hex. ConversionError (one line) for anything else."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf"):
        with _bulk():
            return _proto_resource_spans(_parse_proto(body))
    if media == "application/json" or media.endswith("+json"):
        with _bulk():
            return _json_resource_spans(_parse_json(body))
    raise ConversionError(
        f"content type {content_type[:80]!r} is not OTLP: send application/x-protobuf or application/json"
    )


def _parse_proto(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ConversionError(
            f"the body is not an OTLP ExportTraceServiceRequest in protobuf (truncated or corrupt: {_short(exc)})"
        ) from None
    return request


def _parse_json(body: bytes) -> Any:
    """The document `json.loads` gives, read a piece at a time within the caps of `reader` (then held whole: the
    file door reads its spans with `flat.flatten_json` instead, which keeps none of it)."""
    return read_whole(_json_text(body))


def _json_text(body: bytes) -> str:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"the OTLP JSON is not UTF-8 (invalid byte at {exc.start})") from None
    return text


def _short(exc: BaseException) -> str:
    return _one_line(str(exc) or exc.__class__.__name__, 200)


# ---- protobuf -> the OTLP JSON mapping (the fields MessageToDict writes, in its forms)


def _proto_resource_spans(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    out = []
    for rs in request.resource_spans:
        item: dict[str, Any] = {}
        if rs.HasField("resource"):
            item["resource"] = _proto_attr_holder(rs.resource)
        scopes = []
        for ss in rs.scope_spans:
            scope_item: dict[str, Any] = {}
            if ss.HasField("scope"):
                scope = _proto_attr_holder(ss.scope)
                if ss.scope.name:
                    scope["name"] = ss.scope.name
                if ss.scope.version:
                    scope["version"] = ss.scope.version
                scope_item["scope"] = scope
            if len(ss.spans):
                scope_item["spans"] = [_proto_span(span) for span in ss.spans]
            if ss.schema_url:
                scope_item["schemaUrl"] = ss.schema_url
            scopes.append(scope_item)
        if scopes:
            item["scopeSpans"] = scopes
        if rs.schema_url:
            item["schemaUrl"] = rs.schema_url
        out.append(item)
    return out


def _proto_attr_holder(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if len(message.attributes):
        out["attributes"] = [_proto_kv(kv) for kv in message.attributes]
    if message.dropped_attributes_count:
        out["droppedAttributesCount"] = message.dropped_attributes_count
    return out


def _proto_kv(kv: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if kv.key:
        out["key"] = kv.key
    if kv.HasField("value"):
        out["value"] = _proto_any(kv.value, 0)
    return out


def _proto_any(value: Any, depth: int) -> dict[str, Any]:
    which = value.WhichOneof("value")
    if which == "string_value":
        return {"stringValue": value.string_value}
    if which == "int_value":
        return {"intValue": str(value.int_value)}
    if which == "bool_value":
        return {"boolValue": value.bool_value}
    if which == "double_value":
        d = value.double_value
        return {"doubleValue": d if math.isfinite(d) else ("NaN" if d != d else ("Infinity" if d > 0 else "-Infinity"))}
    if depth > MAX_ANY_DEPTH:
        raise ConversionError(f"an attribute value is nested deeper than {MAX_ANY_DEPTH} levels")
    if which == "array_value":
        values = [_proto_any(item, depth + 1) for item in value.array_value.values]
        return {"arrayValue": {"values": values} if values else {}}
    if which == "kvlist_value":
        kvs = []
        for kv in value.kvlist_value.values:
            item: dict[str, Any] = {"key": kv.key} if kv.key else {}
            if kv.HasField("value"):
                item["value"] = _proto_any(kv.value, depth + 1)
            kvs.append(item)
        return {"kvlistValue": {"values": kvs} if kvs else {}}
    if which == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")}
    return {}


def _proto_span(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if span.trace_id:
        out["traceId"] = span.trace_id.hex()
    if span.span_id:
        out["spanId"] = span.span_id.hex()
    if span.trace_state:
        out["traceState"] = span.trace_state
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id.hex()
    if span.flags:
        out["flags"] = span.flags
    if span.name:
        out["name"] = span.name
    if span.kind:
        out["kind"] = _KIND_ENUM_NAMES.get(span.kind, span.kind)
    if span.start_time_unix_nano:
        out["startTimeUnixNano"] = str(span.start_time_unix_nano)
    if span.end_time_unix_nano:
        out["endTimeUnixNano"] = str(span.end_time_unix_nano)
    if len(span.attributes):
        out["attributes"] = [_proto_kv(kv) for kv in span.attributes]
    if span.dropped_attributes_count:
        out["droppedAttributesCount"] = span.dropped_attributes_count
    if len(span.events):
        events = []
        for event in span.events:
            item: dict[str, Any] = {}
            if event.time_unix_nano:
                item["timeUnixNano"] = str(event.time_unix_nano)
            if event.name:
                item["name"] = event.name
            item.update(_proto_attr_holder(event))
            events.append(item)
        out["events"] = events
    if span.dropped_events_count:
        out["droppedEventsCount"] = span.dropped_events_count
    if len(span.links):
        links = []
        for link in span.links:
            item = {}
            if link.trace_id:
                item["traceId"] = link.trace_id.hex()
            if link.span_id:
                item["spanId"] = link.span_id.hex()
            if link.trace_state:
                item["traceState"] = link.trace_state
            item.update(_proto_attr_holder(link))
            if link.flags:
                item["flags"] = link.flags
            links.append(item)
        out["links"] = links
    if span.dropped_links_count:
        out["droppedLinksCount"] = span.dropped_links_count
    if span.HasField("status"):
        status: dict[str, Any] = {}
        if span.status.message:
            status["message"] = span.status.message
        if span.status.code:
            status["code"] = _STATUS_ENUM_NAMES.get(span.status.code, span.status.code)
        out["status"] = status
    return out


_KIND_ENUM_NAMES = {number: f"SPAN_KIND_{name.upper()}" for number, name in _SPAN_KINDS.items()}
_STATUS_ENUM_NAMES = {0: "STATUS_CODE_UNSET", 1: "STATUS_CODE_OK", 2: "STATUS_CODE_ERROR"}


# ---- OTLP/JSON -> the same mapping: shape checked, snake_case names read too, ids checked and lower-cased

# OTLP/JSON receivers must accept the protobuf field names as well as lowerCamelCase (the OTLP specification).
_SNAKE = {
    "resource_spans": "resourceSpans",
    "scope_spans": "scopeSpans",
    "schema_url": "schemaUrl",
    "trace_id": "traceId",
    "span_id": "spanId",
    "parent_span_id": "parentSpanId",
    "trace_state": "traceState",
    "start_time_unix_nano": "startTimeUnixNano",
    "end_time_unix_nano": "endTimeUnixNano",
    "time_unix_nano": "timeUnixNano",
    "dropped_attributes_count": "droppedAttributesCount",
    "dropped_events_count": "droppedEventsCount",
    "dropped_links_count": "droppedLinksCount",
}


def _camel(obj: dict[str, Any]) -> dict[str, Any]:
    if any(key in _SNAKE for key in obj):
        return {_SNAKE.get(key, key): value for key, value in obj.items()}
    return obj


def _json_resource_spans(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise ConversionError(f"the OTLP JSON is a {_json_type(doc)}, not an object with resourceSpans")
    doc = _camel(doc)
    resource_spans = doc.get("resourceSpans")
    if resource_spans is None:
        raise ConversionError("the OTLP JSON has no resourceSpans (not an OTLP trace export)")
    out = []
    for r, rs in enumerate(_list(resource_spans, "resourceSpans")):
        where = f"resourceSpans[{r}]"
        rs = _camel(_obj(rs, where))
        scopes = []
        for s, ss in enumerate(_list(rs.get("scopeSpans", []), f"{where}.scopeSpans")):
            swhere = f"{where}.scopeSpans[{s}]"
            ss = _camel(_obj(ss, swhere))
            spans = []
            for i, span in enumerate(_list(ss.get("spans", []), f"{swhere}.spans")):
                spans.append(_json_span(_camel(_obj(span, f"{swhere}.spans[{i}]")), f"{swhere}.spans[{i}]"))
            item = dict(ss)
            item["spans"] = spans
            if "scope" in ss:
                item["scope"] = _obj(ss["scope"], f"{swhere}.scope")
            scopes.append(item)
        item = dict(rs)
        item["scopeSpans"] = scopes
        if "resource" in rs:
            item["resource"] = _obj(rs["resource"], f"{where}.resource")
        out.append(item)
    return out


def _json_span(span: dict[str, Any], where: str) -> dict[str, Any]:
    out = dict(span)
    out["traceId"] = _json_id(span.get("traceId"), 16, f"{where}.traceId", required=True)
    out["spanId"] = _json_id(span.get("spanId"), 8, f"{where}.spanId", required=True)
    parent = _json_id(span.get("parentSpanId"), 8, f"{where}.parentSpanId", required=False)
    if parent:
        out["parentSpanId"] = parent
    else:
        out.pop("parentSpanId", None)
    links = span.get("links")
    if links is not None:
        fixed = []
        for j, link in enumerate(_list(links, f"{where}.links")):
            link = dict(_camel(_obj(link, f"{where}.links[{j}]")))
            link["traceId"] = _json_id(link.get("traceId"), 16, f"{where}.links[{j}].traceId", required=False)
            link["spanId"] = _json_id(link.get("spanId"), 8, f"{where}.links[{j}].spanId", required=False)
            fixed.append(link)
        out["links"] = fixed
    events = span.get("events")
    if events is not None:
        out["events"] = [
            _camel(_obj(event, f"{where}.events[{j}]")) for j, event in enumerate(_list(events, f"{where}.events"))
        ]
    return out


def _json_id(value: Any, size: int, where: str, *, required: bool) -> str:
    """An id as lowercase hex: OTLP/JSON writes hex; base64 (what MessageToDict writes for bytes) is read too."""
    if value is None or value == "":
        if required:
            raise ConversionError(f"{where} is missing (an OTLP span needs a {size}-byte id)")
        return ""
    if not isinstance(value, str):
        raise ConversionError(f"{where} must be a hex string, got {_json_type(value)}")
    if len(value) == size * 2 and (_HEX32 if size == 16 else _HEX16).match(value):
        if value.strip("0") == "":
            raise ConversionError(f"{where} is all zeros, which OTLP defines as invalid")
        return value.lower()
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size:
        return raw.hex()
    raise ConversionError(f"{where} is not a {size}-byte id in hex ({value[:40]!r})")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConversionError(f"{where} must be a list, got {_json_type(value)}")
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConversionError(f"{where} must be an object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__
    )


# ------------------------------------------------------------------------------------------------- recognition


def looks_like_otlp(data: bytes) -> str | None:
    """ "json" for an OTLP/JSON trace export, "protobuf" for an ExportTraceServiceRequest in protobuf, else None.

    JSON: an object whose first 64 KiB name `resourceSpans` (or `resource_spans`) as a list. Protobuf is only tried
    on bytes that start as that message does (field 1, length-delimited: 0x0a) and is taken only when it parses,
    holds at least one span, and every span has a 16-byte trace id and an 8-byte span id: random bytes, zips,
    gzip and text fail one of these."""
    if not data:
        return None
    head = data[: 64 * 1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] == b"{":
        text = head.decode("utf-8", errors="replace")
        return "json" if re.search(r'"resource_?[sS]pans"\s*:\s*\[', text) else None
    if data[:1] != b"\x0a":
        return None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError):
        return None
    spans = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id):
                    return None
                spans += 1
    return "protobuf" if spans else None


@contextmanager
def _bulk() -> Iterator[None]:
    """The cyclic garbage collector paused while a conversion builds its (acyclic) dicts: with hundreds of
    thousands of live objects, its repeated full passes cost more than the conversion itself (measured: 100,000
    spans in 10.3 s with it, 8.3 s without, before the direct protobuf path)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
