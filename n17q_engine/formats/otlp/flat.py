"""Flat spans: one plain dict per span, ids in hex, attributes as Python values, its resource and scope attached
(`flatten_spans` from the OTLP JSON mapping; `_flat_proto_spans` straight from a parsed protobuf request, trace by
trace), and the grouping of flat spans by trace (`iter_traces`). What `mapping.convert_trace` reads."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Iterator
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .. import ConversionError
from .reader import ITEM, LIST, MAX_ITEMS, MEMBER, OPEN, SKELETON, SPAN, OtlpJsonReader, too_many_items
from .text import _storable
from .wire import (
    _SPAN_KIND_NAMES,
    _SPAN_KINDS,
    _STATUS_CODES,
    _STATUS_NAMES,
    MAX_ANY_DEPTH,
    _bulk,
    _camel,
    _json_id,
    _json_type,
    _list,
    _obj,
    _parse_proto,
)

# ---- protobuf -> flat spans directly (convert_otlp's path: the intermediate mapping would cost as much again)


def flatten_protobuf(body: bytes) -> list[dict[str, Any]]:
    """`flatten_spans(decode_otlp(body, content_type=PROTOBUF))`, the same flat spans (tests/engine/test_format_otlp.py
    compares them), read straight from the parsed request: the OTLP JSON mapping in between costs as much again (a
    100-span request: 1.9 ms that way, 0.8 ms this way). What the OTLP receiver reads its buffered requests with.
    ConversionError (one line) for bytes that are not an ExportTraceServiceRequest."""
    with _bulk():
        return _flat_from_proto(_parse_proto(body))


def _flat_from_proto(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Every span of the request, flat, in the request's order."""
    return _flat_proto_spans(
        [
            (r, s, i, span)
            for r, rs in enumerate(request.resource_spans)
            for s, ss in enumerate(rs.scope_spans)
            for i, span in enumerate(ss.spans)
        ],
        request,
    )


# A span of a parsed request by where it sits: (resource index, scope index, span index, the span message).
_ProtoSpan = tuple[int, int, int, Any]


def _proto_traces(request: ExportTraceServiceRequest) -> dict[str, list[_ProtoSpan]]:
    """The request's spans by trace id, in the order each trace first appears, not yet flattened: a file's traces
    are flattened one at a time as their runs are converted (`_flat_proto_spans`), so that the first run is ready
    after its own spans are read, not after the whole file's (and only one trace's flat spans are in memory)."""
    traces: dict[str, list[_ProtoSpan]] = {}
    for r, rs in enumerate(request.resource_spans):
        for s, ss in enumerate(rs.scope_spans):
            for i, span in enumerate(ss.spans):
                raw = span.trace_id
                trace_id = (
                    raw.hex()
                    if len(raw) == 16 and any(raw)
                    else _proto_id(raw, 16, f"resourceSpans[{r}] span {i}: traceId", required=True)
                )
                traces.setdefault(trace_id, []).append((r, s, i, span))
    return traces


def _flat_proto_spans(spans: list[_ProtoSpan], request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    append = flat.append
    resources: dict[int, dict[str, Any]] = {}
    scopes: dict[tuple[int, int], dict[str, Any]] = {}
    for r, s, i, span in spans:
        resource = resources.get(r)
        if resource is None:
            resource = resources[r] = _proto_attrs(request.resource_spans[r].resource.attributes)
        scope = scopes.get((r, s))
        if scope is None:
            ss = request.resource_spans[r].scope_spans[s]
            scope = scopes[(r, s)] = {
                "name": _storable(ss.scope.name),
                "version": _storable(ss.scope.version),
                "attributes": _proto_attrs(ss.scope.attributes),
            }
        where = f"resourceSpans[{r}] span {i}"
        trace_id = _proto_id(span.trace_id, 16, f"{where}: traceId", required=True)
        span_id = _proto_id(span.span_id, 8, f"{where}: spanId", required=True)
        parent = _proto_id(span.parent_span_id, 8, f"{where}: parentSpanId", required=False)
        out: dict[str, Any] = {
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent or None,
            "name": _storable(span.name),
            "kind": _SPAN_KINDS.get(span.kind, "unspecified"),
            "start_ns": span.start_time_unix_nano,
            "end_ns": span.end_time_unix_nano,
            "attributes": _proto_attrs(span.attributes) if len(span.attributes) else {},
            "events": [
                {
                    "name": _storable(e.name),
                    "time_ns": e.time_unix_nano,
                    "attributes": _proto_attrs(e.attributes),
                }
                for e in span.events
            ]
            if len(span.events)
            else [],
            "links": [
                {
                    "trace_id": _proto_id(link.trace_id, 16, f"{where}: link traceId", required=False),
                    "span_id": _proto_id(link.span_id, 8, f"{where}: link spanId", required=False),
                    "attributes": _proto_attrs(link.attributes),
                }
                for link in span.links
            ]
            if len(span.links)
            else [],
            "status": {
                "code": _STATUS_CODES.get(span.status.code, "unset"),
                "message": _storable(span.status.message),
            },
            "resource": resource,
            "scope": scope,
        }
        if span.dropped_attributes_count or span.dropped_events_count or span.dropped_links_count:
            out["dropped"] = {
                name: count
                for name, count in (
                    ("attributes", span.dropped_attributes_count),
                    ("events", span.dropped_events_count),
                    ("links", span.dropped_links_count),
                )
                if count
            }
        append(out)
    return flat


def _proto_id(raw: bytes, size: int, where: str, *, required: bool) -> str:
    if len(raw) == size and any(raw):
        return raw.hex()
    if not raw and not required:
        return ""
    if not raw:
        raise ConversionError(f"{where} is missing (an OTLP span needs a {size}-byte id)")
    raise ConversionError(
        f"{where} is {len(raw)} bytes{' of zeros' if not any(raw) else ''}, not a valid {size}-byte id"
    )


def _proto_attrs(kvs: Any) -> dict[str, Any]:
    return {(_storable(kv.key)): _proto_value(kv.value, 0) for kv in kvs}


def _proto_value(value: Any, depth: int) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return _storable(value.string_value)
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        d = value.double_value
        return d if math.isfinite(d) else ("NaN" if d != d else ("Infinity" if d > 0 else "-Infinity"))
    if depth > MAX_ANY_DEPTH:
        raise ConversionError(f"an attribute value is nested deeper than {MAX_ANY_DEPTH} levels")
    if which == "array_value":
        return [_proto_value(item, depth + 1) for item in value.array_value.values]
    if which == "kvlist_value":
        return {_storable(kv.key): _proto_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


# ---- OTLP/JSON -> flat spans a span at a time (convert_otlp's path: the whole document is never built)


def flatten_json(text: str, *, window: int | None = None) -> list[dict[str, Any]]:
    """`flatten_spans(decode_otlp(body, content_type=JSON_TYPE))`, the same flat spans (tests compare them), read from
    the text a span at a time within the caps of `reader`: only the flat spans are kept, never the document's dicts.
    ConversionError (one line) for a text that is not OTLP/JSON or is past a cap."""
    with _bulk():
        return _flatten_json(text, window)


def _flatten_json(text: str, window: int | None) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    found = False  # a resourceSpans list (the last one named counts, as json.loads keeps the last)
    # Per level (0 the export, 1 a resourceSpans item, 2 a scopeSpans item, 3 a span): the index of the open
    # object (or item) in its list, and where the open object's spans begin in `flat` (a list named again in
    # one object starts over, as the last of a key counts in json.loads).
    index = [0, -1, -1, -1]
    starts = [0, 0, 0]
    resource: dict[str, Any] = {}
    scope: dict[str, Any] = {}
    for kind, level, key, value in OtlpJsonReader(text, window=window).events():
        if kind == SPAN:
            index[3] += 1
            where = f"{_at(2, index)}.spans[{index[3]}]"
            flat.append(_flat_span(_camel(_obj(value, where)), resource, scope, where))
        elif kind == OPEN:
            starts[level] = len(flat)
            if level:
                index[level] += 1
                if level == 1:
                    resource = {}  # filled when its `resource` member is read, before or after its spans
                else:
                    scope = {"name": "", "version": "", "attributes": {}}
        elif kind == LIST or (kind == MEMBER and key in SKELETON[level]):
            if kind == MEMBER and (level or value is not None):  # not a list: refused, as decode_otlp refuses it
                _list(value, f"{_at(level, index)}.{SKELETON[level][0]}".lstrip("."))
            if level == 0:
                found = kind == LIST
            del flat[starts[level] :]
            index[level + 1] = -1
        elif kind == MEMBER and key == ("resource" if level == 1 else "scope" if level == 2 else None):
            where = _at(level, index)
            if level == 1:
                resource.clear()
                resource.update(_attributes(_obj(value, f"{where}.resource").get("attributes"), where))
            else:
                raw = _obj(value, f"{where}.scope")
                scope.update(
                    name=_text(raw.get("name")),
                    version=_text(raw.get("version")),
                    attributes=_attributes(raw.get("attributes"), f"{where}.scope"),
                )
        elif kind == ITEM:  # an item of a skeleton list that is not an object
            if level == 0:
                raise ConversionError(f"the OTLP JSON is a {_json_type(value)}, not an object with resourceSpans")
            index[level] += 1
            raise ConversionError(f"{_at(level, index)} must be an object, got {_json_type(value)}")
    if not found:
        raise ConversionError("the OTLP JSON has no resourceSpans (not an OTLP trace export)")
    return flat


def _at(level: int, index: list[int]) -> str:
    """Where the open object at `level` is: `resourceSpans[r]`, `resourceSpans[r].scopeSpans[s]`."""
    return ".".join(f"{SKELETON[i][0]}[{index[i + 1]}]" for i in range(level))


# ------------------------------------------------------------------------------------------------------ flattening


def flatten_spans(resource_spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One plain dict per span, in the order the export holds them:

    `trace_id`, `span_id` (hex), `parent_span_id` (hex or None), `name`, `kind` (internal | server | client |
    producer | consumer | unspecified), `start_ns`, `end_ns` (int), `attributes` (key -> Python value: AnyValue
    decoded, kvlist -> dict, array -> list, bytes -> base64 text, a non-finite double -> "NaN"/"Infinity" text),
    `events` [{name, time_ns, attributes}], `links` [{trace_id, span_id, attributes}], `status` {code: unset | ok |
    error, message}, `resource` (attributes), `scope` {name, version, attributes}, and `dropped` {attributes, events,
    links} when the producer dropped any. JSON-serialisable, so the receiver can buffer it anywhere. Spans of one
    resource share its `resource` dict (not copied per span)."""
    with _bulk():
        return _flatten(resource_spans)


def _flatten(resource_spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for r, rs in enumerate(_list(resource_spans, "resourceSpans")):
        where = f"resourceSpans[{r}]"
        rs = _camel(_obj(rs, where))
        resource = _attributes(_obj(rs.get("resource") or {}, f"{where}.resource").get("attributes"), where)
        for s, ss in enumerate(_list(rs.get("scopeSpans") or [], f"{where}.scopeSpans")):
            swhere = f"{where}.scopeSpans[{s}]"
            ss = _camel(_obj(ss, swhere))
            scope_raw = _obj(ss.get("scope") or {}, f"{swhere}.scope")
            scope = {
                "name": _text(scope_raw.get("name")),
                "version": _text(scope_raw.get("version")),
                "attributes": _attributes(scope_raw.get("attributes"), f"{swhere}.scope"),
            }
            for i, span in enumerate(_list(ss.get("spans") or [], f"{swhere}.spans")):
                flat.append(
                    _flat_span(_camel(_obj(span, f"{swhere}.spans[{i}]")), resource, scope, f"{swhere}.spans[{i}]")
                )
    return flat


def _flat_span(span: dict[str, Any], resource: dict[str, Any], scope: dict[str, Any], where: str) -> dict[str, Any]:
    trace_id = _flat_id(span.get("traceId"), 32, f"{where}.traceId", required=True)
    span_id = _flat_id(span.get("spanId"), 16, f"{where}.spanId", required=True)
    parent = _flat_id(span.get("parentSpanId"), 16, f"{where}.parentSpanId", required=False)
    status_raw = span.get("status") or {}
    status_raw = _obj(status_raw, f"{where}.status")
    code = status_raw.get("code", 0)
    status = {
        "code": _STATUS_CODES.get(code) if isinstance(code, int) else _STATUS_NAMES.get(code, "unset"),
        "message": _text(status_raw.get("message")),
    }
    if status["code"] is None:
        status["code"] = "unset"
    kind = span.get("kind", 0)
    out: dict[str, Any] = {
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent or None,
        "name": _text(span.get("name")),
        "kind": _SPAN_KINDS.get(kind, "unspecified")
        if isinstance(kind, int)
        else _SPAN_KIND_NAMES.get(kind, "unspecified"),
        "start_ns": _ns(span.get("startTimeUnixNano"), f"{where}.startTimeUnixNano"),
        "end_ns": _ns(span.get("endTimeUnixNano"), f"{where}.endTimeUnixNano"),
        "attributes": _attributes(span.get("attributes"), where),
        "events": [],
        "links": [],
        "status": status,
        "resource": resource,
        "scope": scope,
    }
    events = span.get("events")
    if events:
        if len(_list(events, f"{where}.events")) > MAX_ITEMS:
            raise too_many_items(where, "events")
        for j, event in enumerate(events):
            event = _camel(_obj(event, f"{where}.events[{j}]"))
            out["events"].append(
                {
                    "name": _text(event.get("name")),
                    "time_ns": _ns(event.get("timeUnixNano"), f"{where}.events[{j}].timeUnixNano"),
                    "attributes": _attributes(event.get("attributes"), f"{where}.events[{j}]"),
                }
            )
    links = span.get("links")
    if links:
        if len(_list(links, f"{where}.links")) > MAX_ITEMS:
            raise too_many_items(where, "links")
        for j, link in enumerate(links):
            link = _camel(_obj(link, f"{where}.links[{j}]"))
            out["links"].append(
                {
                    "trace_id": _flat_id(link.get("traceId"), 32, f"{where}.links[{j}].traceId", required=False),
                    "span_id": _flat_id(link.get("spanId"), 16, f"{where}.links[{j}].spanId", required=False),
                    "attributes": _attributes(link.get("attributes"), f"{where}.links[{j}]"),
                }
            )
    dropped = {
        name: count
        for name, key in (
            ("attributes", "droppedAttributesCount"),
            ("events", "droppedEventsCount"),
            ("links", "droppedLinksCount"),
        )
        if isinstance(count := span.get(key), int) and count > 0
    }
    if dropped:
        out["dropped"] = dropped
    return out


def _flat_id(value: Any, hex_len: int, where: str, *, required: bool) -> str:
    """Ids here come from decode_otlp (lowercase hex); hex in other cases and base64 are accepted as well."""
    if isinstance(value, str) and len(value) == hex_len and value.islower() and value.isalnum():
        try:
            int(value, 16)
        except ValueError:
            pass
        else:
            if required and value.strip("0") == "":
                raise ConversionError(f"{where} is all zeros, which OTLP defines as invalid")
            return value
    return _json_id(value, hex_len // 2, where, required=required)


def _ns(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, str) and value.isdigit()) or (isinstance(value, float) and value.is_integer()):
        number = int(value)
    else:
        raise ConversionError(f"{where} must be an integer number of nanoseconds, got {str(value)[:40]!r}")
    if not 0 <= number < 2**64:
        raise ConversionError(f"{where} is out of range for a uint64")
    return number


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = str(value)
    return _storable(value)


def _attributes(kvs: Any, where: str) -> dict[str, Any]:
    if not kvs:
        return {}
    if not isinstance(kvs, list):
        raise ConversionError(f"{where}.attributes must be a list of {{key, value}}, got {_json_type(kvs)}")
    if len(kvs) > MAX_ITEMS:
        raise too_many_items(where or "the resource", "attributes")
    out: dict[str, Any] = {}
    for kv in kvs:
        if not isinstance(kv, dict):
            raise ConversionError(f"{where}.attributes holds a {_json_type(kv)}, not a {{key, value}} object")
        key = kv.get("key")
        if not isinstance(key, str):
            raise ConversionError(f"{where}.attributes holds an attribute without a string key")
        out[_storable(key)] = _any_value(kv.get("value"), f"{where}.attributes[{key[:60]!r}]", 0)
    return out


def _any_value(value: Any, where: str, depth: int) -> Any:
    """An AnyValue (OTLP JSON mapping) as a plain Python value; an empty AnyValue is None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConversionError(f"{where} must be an AnyValue object, got {_json_type(value)}")
    if not value:
        return None
    (key, inner), *rest = value.items()
    if rest:
        raise ConversionError(f"{where} holds more than one value ({', '.join(sorted(value))[:80]})")
    if key in ("stringValue", "string_value"):
        if not isinstance(inner, str):
            raise ConversionError(f"{where}.stringValue must be a string")
        return _storable(inner)
    if key in ("intValue", "int_value"):
        if isinstance(inner, bool) or not isinstance(inner, (int, str)):
            raise ConversionError(f"{where}.intValue must be an integer")
        try:
            number = int(inner)
        except ValueError:
            raise ConversionError(f"{where}.intValue must be an integer, got {str(inner)[:40]!r}") from None
        if not -(2**63) <= number < 2**63:
            raise ConversionError(f"{where}.intValue is out of range for an int64")
        return number
    if key in ("boolValue", "bool_value"):
        if not isinstance(inner, bool):
            raise ConversionError(f"{where}.boolValue must be true or false")
        return inner
    if key in ("doubleValue", "double_value"):
        if isinstance(inner, bool):
            raise ConversionError(f"{where}.doubleValue must be a real")
        if isinstance(inner, (int, float)):
            real = float(inner)
            return (
                real if math.isfinite(real) else ("NaN" if real != real else ("Infinity" if real > 0 else "-Infinity"))
            )
        if inner in ("NaN", "Infinity", "-Infinity"):
            return inner
        raise ConversionError(f"{where}.doubleValue must be a real")
    if depth >= MAX_ANY_DEPTH:
        raise ConversionError(f"{where} is nested deeper than {MAX_ANY_DEPTH} levels")
    if key in ("arrayValue", "array_value"):
        items = _obj(inner, f"{where}.arrayValue").get("values") or []
        if len(_list(items, f"{where}.values")) > MAX_ITEMS:
            raise too_many_items(where, "values")
        return [_any_value(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(_list(items, f"{where}.values"))]
    if key in ("kvlistValue", "kvlist_value"):
        items = _obj(inner, f"{where}.kvlistValue").get("values") or []
        if len(_list(items, f"{where}.values")) > MAX_ITEMS:
            raise too_many_items(where, "values")
        out: dict[str, Any] = {}
        for kv in _list(items, f"{where}.values"):
            kv = _obj(kv, f"{where}.values[]")
            name = kv.get("key")
            if not isinstance(name, str):
                raise ConversionError(f"{where}.kvlistValue holds an entry without a string key")
            out[_storable(name)] = _any_value(kv.get("value"), f"{where}.{name[:60]}", depth + 1)
        return out
    if key in ("bytesValue", "bytes_value"):
        if not isinstance(inner, str):
            raise ConversionError(f"{where}.bytesValue must be base64 text")
        return inner
    raise ConversionError(f"{where} has an unknown value type {key[:40]!r}")


def iter_traces(spans: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Flat spans grouped by trace id, in the order each trace first appears."""
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    yield from traces.values()
