"""OTLP/HTTP on the wire (https://opentelemetry.io/docs/specs/otlp/#otlphttp): bodies in, answers out.

Plain functions on bytes, no Django, so that the rules are testable alone. A request body is an
ExportTraceServiceRequest, binary protobuf (`application/x-protobuf`) or OTLP's JSON mapping (`application/json`:
proto3 JSON, except that trace and span ids are hex, not base64), optionally gzip-compressed. `split_request` cuts
it into one ExportTraceServiceRequest per trace, each kept as protobuf bytes, without ever holding it parsed whole
(issue 35): protobuf messages concatenate, so the chunks of one trace joined in order are one valid request again,
holding every span the trace received (the run's original, kept as a blob).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner json.loads uses
from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from n17q_engine.budget import checkpoint
from n17q_engine.formats.otlp import reader as otlp_json
from n17q_engine.formats.otlp.reader import (
    CLOSE,
    LIST,
    MEMBER,
    OPEN,
    SKELETON,
    SPAN,
    OtlpJsonInvalid,
    OtlpJsonReader,
    OtlpJsonTooLarge,
)
from n17q_engine.inflate import InflateError, inflate
from n17q_engine.protowire import CapExceeded, WireFormatError, count, fields

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


def split_request(body: bytes, encoding: str) -> SplitRequest:
    """The request cut into one batch per trace (`SplitRequest`), never parsed whole: protobuf walked at the wire
    level and each Resource, scope and span parsed alone (`_ProtobufReader`), OTLP/JSON read a span at a time by
    the engine's OTLP/JSON reader (`_JsonReader`). WireError (400 malformed, 413 past a cap) for a request refused
    as a whole."""
    if encoding == "protobuf":
        return _ProtobufReader(body).read()
    return _finish(_read_json(body), None)


def parse_request(body: bytes, encoding: str) -> ExportTraceServiceRequest:
    """The whole request as one message, for the tests and tools that want one (the receiver splits it without
    building this: `split_request`); accepted and refused as `split_request` does."""
    if encoding == "protobuf":
        _ProtobufReader(body).read()
        return ExportTraceServiceRequest.FromString(body)
    framed = []
    for resource in _read_json(body, ordered=True):
        scopes = b"".join(
            _frame(_SCOPE_SPANS_KEY, scope.head + b"".join(scope.ordered or ())) for scope in resource.scopes
        )
        framed.append(_frame(_RESOURCE_SPANS_KEY, resource.head + scopes))
    return ExportTraceServiceRequest.FromString(b"".join(framed))


def _read_json(body: bytes, *, ordered: bool = False) -> list[_Resource]:
    try:
        text = _json_text(body)
        return _JsonReader(text, len(body), ordered=ordered).read_request()
    except (_TooMuch, OtlpJsonTooLarge) as exc:
        raise WireError(413, f"the body is refused: {exc}") from None
    except OtlpJsonInvalid as exc:  # not JSON, or nested too deep for the reader
        raise WireError(400, f"the body is refused: {exc}") from None
    except _NotOtlp as exc:
        line = " ".join(str(exc).splitlines())[:300]
        raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in JSON ({line})") from None
    except (ValueError, RecursionError) as exc:
        raise WireError(400, f"the body is not JSON ({exc})") from None


# ---- OTLP/JSON, read a span at a time (issue 35)
#
# `json.loads` of a whole request then `ParseDict` of the whole dict took a 37 MB body to 14 times its size in
# memory (the dicts of every span at once, then the message). The request is read by the engine's OTLP/JSON reader
# (n17q_engine.formats.otlp.reader, the file door's too): its skeleton (the resourceSpans, scopeSpans and spans
# lists) walked over the text, each span, resource and scope decoded alone by the json module's C scanner
# (`raw_decode`) within a window, under the one set of caps (MAX_SPANS, MAX_ITEMS, MAX_STRING_CHARS, MAX_DEPTH). What
# is the receiver's: each piece checked against the caps and its object budget, its hex ids made base64, and parsed
# by `ParseDict` as before into a message of its own: a span into a Span, kept as its protobuf bytes in its scope's
# trace (`_Scope`), so only one span's dicts and message are alive at a time and what is accepted or refused is
# unchanged (tests/otlp_receiver/test_bounded_work.py compares it with the whole-document parse).

# What the parsed message costs, estimated per JSON object (measured with upb: an empty Span about 180 bytes, an
# empty KeyValue about 56, an AnyValue about as much), and how many times the body's size those may come to: real
# spans come to 1 to 3 times (many small attributes the most); empty objects (`{}`, three bytes, is a 180-byte
# span) by the hundred thousand are refused.
_SPAN_COST, _OBJECT_COST = 180, 56
_COST_PER_BYTE = 4
_COST_SLACK = 1 << 20
_SKELETON_MESSAGES = (ExportTraceServiceRequest, ResourceSpans, ScopeSpans)
_STREAMED = object()  # a member parsed into its field a piece at a time (`_JsonReader._large`)


class _TooMuch(Exception):
    """Past a cap: 413."""


class _NotOtlp(Exception):
    """JSON, but not an ExportTraceServiceRequest: 400."""


def _json_text(body: bytes) -> str:
    """The body as text, as `json.loads` reads bytes (UTF-8, or UTF-16/32 by their first bytes)."""
    return body.decode(json.detect_encoding(body), "surrogatepass")


class _JsonReader(OtlpJsonReader):
    """The engine's reader, its events made into each ResourceSpans and ScopeSpans (`_Resource`, `_Scope`: their
    other members parsed as a message of their own) and each span parsed alone, as protobuf bytes, into its scope;
    a piece too long for the reader's window parsed into its message a member at a time (`_large`)."""

    def __init__(self, text: str, size: int, *, ordered: bool = False) -> None:
        super().__init__(text)
        self.ordered = ordered
        # The text itself is counted against the budget: a body widened to 4 bytes a character leaves less.
        self.budget = _COST_PER_BYTE * size + _COST_SLACK - max(0, sys.getsizeof(text) - size)
        self.cost = 0
        self.ledger = _Ledger(size)
        # Per skeleton level (the request, a ResourceSpans, a ScopeSpans): the message its members are parsed into,
        # the members kept for ParseDict, the members parsed into their field a piece at a time.
        self.messages: list[Any] = [None] * 3
        self.rests: list[dict[str, Any]] = [{}, {}, {}]
        self.streamed: list[set[str]] = [set(), set(), set()]

    def read_request(self) -> list[_Resource]:
        if self.text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", self.text, 0)
        resources: list[_Resource] = []
        resource: Any = None  # the ResourceSpans and the ScopeSpans being read (each OPEN makes one)
        scope: Any = None
        for kind, level, key, value in self.events():
            if kind == SPAN:
                span = value if isinstance(value, Span) else self._span(value)
                scope.take(span, _frame(0x12, span.SerializeToString()))
            elif kind == OPEN:
                self.messages[level] = _SKELETON_MESSAGES[level]()
                self.rests[level] = {}
                self.streamed[level] = set()
                if level == 1:
                    resource = _Resource(self.ledger)
                elif level == 2:
                    scope = _Scope(self.ledger, ordered=self.ordered)
            elif kind == CLOSE:
                message = self.messages[level]
                if self.rests[level]:
                    self._parse(self.rests[level], message)
                if level == 1:
                    resource.head = message.SerializeToString()
                    resource.service = _service_name(message.resource)
                    resources.append(resource)
                elif level == 2:
                    scope.head = message.SerializeToString()
                    resource.scopes.append(scope)
            elif kind == LIST or (kind == MEMBER and key in SKELETON[level]):
                # given twice (or as both names): the last one counts, as ParseDict clears it
                (resources if level == 0 else resource.scopes if level == 1 else scope).clear()
                self.rests[level].pop(cast(str, key), None)
                if kind == MEMBER and value is not None:  # null clears the field; anything else ParseDict refuses
                    self.rests[level][cast(str, key)] = value
            elif kind == MEMBER:
                self._member(level, cast(str, key), value)
            elif level == 0:
                raise WireError(400, "the body is not an OTLP ExportTraceServiceRequest: a JSON object was expected")
            else:  # an item of resourceSpans or scopeSpans that is not an object: refused by ParseDict as before
                if value is None:
                    raise _NotOtlp("null is not allowed to be used as an element in a repeated field")
                self.cost += _SPAN_COST
                self._check(value, "a value")
                self._parse(value, _SKELETON_MESSAGES[level]())
        return resources

    def _span(self, span: Any) -> Any:
        """A span decoded whole: checked, its ids made base64, parsed into a Span."""
        message = Span()
        self.cost += _SPAN_COST - _OBJECT_COST
        self._check(span, "a span")
        if isinstance(span, dict):
            _span_ids_to_base64(span)
        self._parse(span, message)
        return message

    def _member(self, level: int, key: str, value: Any) -> None:
        """A member of the skeleton object at `level`, decoded whole: checked, and kept for ParseDict if it reads
        it (a member it ignores is dropped once checked)."""
        if value is _STREAMED:
            return
        message = self.messages[level]
        known = _json_fields(message.DESCRIPTOR).get(key)
        self._check(value, f"the {key!r} of a {message.DESCRIPTOR.name}")
        if key in self.streamed[level] and known is not None:  # given again: the last counts
            self.streamed[level].discard(key)
            message.ClearField(known.name)
        if known is not None or _EXTENSION.match(key):
            self.rests[level][key] = value

    # -- a piece too long to decode whole (issue 35): parsed into its message a piece at a time
    #
    # `raw_decode` of one span of 160,000 tiny attributes held 15 times its text in dicts before `_check` refused
    # it. The reader decodes a piece whole only from its window (twice the last span's length first, so an ordinary
    # span costs one short copy); an object or array longer than that comes here, and is walked member by member and
    # element by element, each piece decoded, checked and parsed into its field of the message (a repeated field's
    # items one at a time) and dropped. Refused as the whole decode refused it: malformed JSON first, then a cap (a
    # list past MAX_ITEMS is refused before the rest of it is decoded), then what ParseDict refuses; a member given
    # twice, the last counts; two members of one oneof, refused.

    def _large(self, kind: str, level: int, key: str | None, pos: int) -> tuple[Any, int]:
        if kind == SPAN:
            message = Span()
            unit = _Unit("a span")
            self.cost += _SPAN_COST - _OBJECT_COST
            end = self._stream(pos, unit, message, _MESSAGE_DEPTH["Span"], span=True)
            unit.settle()
            return message, end
        if kind == MEMBER and key not in SKELETON[level]:
            key = cast(str, key)
            message = self.messages[level]
            self.rests[level].pop(key, None)
            self.streamed[level].add(key)
            unit = _Unit(f"the {key!r} of a {message.DESCRIPTOR.name}")
            end = self._stream(pos, unit, message, _MESSAGE_DEPTH[message.DESCRIPTOR.name], key=key)
            unit.settle()
            return _STREAMED, end
        if kind == MEMBER:  # a skeleton list's name, not given a list: walked, then refused as ParseDict does
            self._stream(pos, _Unit("a value", checks=False), None, 0)
            raise _NotOtlp(f"Failed to parse {key} field: repeated field {key} must be in []")
        if level == 0:  # the request, not an object: walked for where it ends, then refused
            return None, self._stream(pos, _Unit("a value", checks=False), None, 0)
        # an item of resourceSpans or scopeSpans that is not an object: walked for the caps, then refused
        self.cost += _SPAN_COST
        unit = _Unit("a value")
        self._stream(pos, unit, None, 0)
        unit.settle()
        raise _NotOtlp("a repeated field's element is not an object")

    def _stream(self, pos: int, unit: _Unit, message: Any, mdepth: int, *, key: str = "", span: bool = False) -> int:
        """The value at `pos` (what one `raw_decode` and `_check` used to take) walked a piece at a time: into
        `message` (which sits `mdepth` messages deep) when `span`, into its field `key` when `key`, else only walked
        and checked. Malformed JSON is raised at once; the caps and ParseDict's refusals are kept in `unit`, for
        `unit.settle()` to raise in the order the whole decode raised them."""
        if span:
            pos = self._stream_object(pos, message, unit, 1, mdepth, span=True)
        elif key:
            pos = self._stream_member(pos, message, key, unit, 1, mdepth)
        else:
            pos = self._stream_value(pos, unit, 1)
        return pos

    def _stream_value(self, pos: int, unit: _Unit, depth: int) -> int:
        """Walk and check the value at `pos` (nesting `depth`), parsing nothing."""
        if self.text[pos : pos + 1] == "{":
            return self._stream_object(pos, None, unit, depth, 0)
        if self.text[pos : pos + 1] == "[":
            return self._stream_array(pos, None, unit, depth, 0)
        value, pos = cast(tuple[Any, int], self._decode(pos, 0))  # not an object or a list: decoded, never None
        self._check_in(unit, value, depth)
        return pos

    def _stream_object(
        self, pos: int, message: Any, unit: _Unit, depth: int, mdepth: int, *, span: bool = False, link: bool = False
    ) -> int:
        text = self.text
        self._count_container(unit, depth, None)
        rest: dict[str, Any] = {}
        streamed: dict[str, str] = {}  # field name -> the member streamed into it
        oneofs: dict[str, str] = {}  # oneof -> the member streamed into it
        fields_by_key = _json_fields(message.DESCRIPTOR) if message is not None else {}
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] != "}":
            while True:
                if text[pos : pos + 1] != '"':
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
                key, pos = scanstring(text, pos + 1)
                if len(key) > otlp_json.MAX_STRING_CHARS and unit.checks:
                    unit.fail(_TooMuch(f"{unit.what} holds a key of more than {otlp_json.MAX_STRING_CHARS} characters"))
                pos = self._ws(pos)
                if text[pos : pos + 1] != ":":
                    raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
                pos = self._ws(pos + 1)
                field = fields_by_key.get(key)
                decoded = self._decode(pos, 0)
                if decoded is not None:
                    value, pos = decoded
                    self._check_in(unit, value, depth + 1)
                    if field is not None and streamed.get(field.name) == key:  # given again: the last counts
                        message.ClearField(field.name)
                        del streamed[field.name]
                        oneofs.pop(field.containing_oneof.name if field.containing_oneof else "", None)
                    if field is not None or (message is not None and _EXTENSION.match(key)):
                        rest[key] = value  # kept for ParseDict; a member it ignores is dropped once checked
                else:
                    rest.pop(key, None)
                    if field is not None and field.containing_oneof is not None:
                        oneof = field.containing_oneof.name
                        if oneofs.setdefault(oneof, key) != key:
                            unit.refuse(_NotOtlp(f"{message.DESCRIPTOR.full_name} has two members of oneof {oneof}"))
                        oneofs[oneof] = key
                    if field is not None:
                        streamed[field.name] = key
                    pos = self._stream_member(pos, message, key, unit, depth + 1, mdepth, link=span and key == "links")
                pos = self._ws(pos)
                if text[pos : pos + 1] == ",":
                    pos = self._ws(pos + 1)
                    continue
                if text[pos : pos + 1] == "}":
                    break
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        for key, value in rest.items():
            field = fields_by_key.get(key)
            oneof = field.containing_oneof.name if field is not None and field.containing_oneof is not None else None
            if value is not None and oneof is not None and oneofs.get(oneof, key) != key:
                unit.refuse(_NotOtlp(f"{message.DESCRIPTOR.full_name} has two members of oneof {oneof}"))
        if span:
            _span_ids_to_base64(rest, links_ok=unit.links_ok)
        elif link:
            unit.links_ok &= _link_ids_to_base64(rest)
        if message is not None and rest:
            self._parse_in(unit, rest, message, mdepth)
        return pos + 1

    def _stream_member(
        self, pos: int, message: Any, key: str, unit: _Unit, depth: int, mdepth: int, *, link: bool = False
    ) -> int:
        """The member `key` of `message`, too long to decode whole, at `pos` (nesting `depth`): into its field, a
        piece at a time, when the field holds what it is; else walked, and refused as ParseDict refuses it."""
        field = _json_fields(message.DESCRIPTOR).get(key) if message is not None else None
        opening = self.text[pos : pos + 1]
        if field is None:  # a member the message does not have: ParseDict ignores it (but the caps do not)
            if message is not None and _EXTENSION.match(key):  # an extension's name, which OTLP's messages refuse
                unit.refuse(_NotOtlp(f"Message type {message.DESCRIPTOR.full_name} does not have extensions"))
            return self._stream_value(pos, unit, depth)
        if field.message_type is None or field.is_repeated != (opening == "["):
            unit.refuse(_NotOtlp(f"Failed to parse {key} field: {opening} is not what it holds"))
            return self._stream_value(pos, unit, depth)
        message.ClearField(field.name)
        if field.is_repeated:
            return self._stream_array(pos, getattr(message, field.name), unit, depth, mdepth + 1, link=link)
        sub = getattr(message, field.name)
        sub.SetInParent()
        return self._stream_object(pos, sub, unit, depth, mdepth + 1)

    def _stream_array(self, pos: int, items: Any, unit: _Unit, depth: int, mdepth: int, *, link: bool = False) -> int:
        """The array at `pos` an element at a time: each into a new item of `items` (a repeated message field whose
        messages sit `mdepth` deep), or only walked and checked when `items` is None."""
        text = self.text
        self._count_container(unit, depth, 0)
        count = last = 0
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "]":
            return pos + 1
        while True:
            count += 1
            if count > otlp_json.MAX_ITEMS and unit.checks:
                self._count_container(unit, depth, count)
            start = pos
            decoded = self._decode(pos, last)
            if decoded is None:
                if items is not None and text[pos : pos + 1] == "{" and unit.parsing:
                    pos = self._stream_object(pos, items.add(), unit, depth + 1, mdepth, link=link)
                else:
                    if items is not None:
                        unit.refuse(_NotOtlp("a repeated field's element is not an object"))
                    pos = self._stream_value(pos, unit, depth + 1)
            else:
                value, pos = decoded
                last = pos - start
                self._check_in(unit, value, depth + 1)
                if items is not None and unit.parsing:
                    if value is None:
                        unit.refuse(_NotOtlp("null is not allowed to be used as an element in a repeated field"))
                    else:
                        if link and isinstance(value, dict):
                            unit.links_ok &= _link_ids_to_base64(value)
                        self._parse_in(unit, value, items.add(), mdepth)
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                return pos + 1
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def _count_container(self, unit: _Unit, depth: int, items: int | None) -> None:
        """An object (`items` None) or an array of `items` walked: its cost, its nesting, its length."""
        if not unit.checks:
            return
        if depth > otlp_json.MAX_DEPTH:
            unit.fail(_NotOtlp(f"{unit.what} is nested more than {otlp_json.MAX_DEPTH} levels deep"))
        if items is None:
            self.cost += _OBJECT_COST
            if self.cost > self.budget:
                unit.fail(_TooMuch(_TOO_MANY_OBJECTS))
        elif items > otlp_json.MAX_ITEMS:
            unit.fail(_TooMuch(f"{unit.what} holds a list of more than {otlp_json.MAX_ITEMS} items {_LISTS}"))

    def _check_in(self, unit: _Unit, value: Any, depth: int) -> None:
        if unit.checks:
            try:
                self._check(value, unit.what, depth)
            except (_TooMuch, _NotOtlp) as exc:
                unit.fail(exc)

    def _parse_in(self, unit: _Unit, value: Any, message: Any, mdepth: int) -> None:
        if unit.parsing:
            try:
                self._parse(value, message, mdepth)
            except _NotOtlp as exc:
                unit.refuse(exc)

    # -- each piece: checked, then parsed

    def _check(self, value: Any, what: str, depth: int = 1) -> None:
        """The caps, over one decoded piece (at nesting `depth` in what `what` names): nesting, list lengths, string
        lengths, and what its objects will cost."""
        objects = 0
        stack: list[tuple[Any, int]] = [(value, depth)]
        while stack:
            item, depth = stack.pop()
            if isinstance(item, str):
                if len(item) > otlp_json.MAX_STRING_CHARS:
                    raise _TooMuch(f"{what} holds a string of more than {otlp_json.MAX_STRING_CHARS} characters")
            elif isinstance(item, dict):
                objects += 1
                if depth > otlp_json.MAX_DEPTH:
                    raise _NotOtlp(f"{what} is nested more than {otlp_json.MAX_DEPTH} levels deep")
                for key, inner in item.items():
                    if len(key) > otlp_json.MAX_STRING_CHARS:
                        raise _TooMuch(f"{what} holds a key of more than {otlp_json.MAX_STRING_CHARS} characters")
                    if isinstance(inner, (str, dict, list)):
                        stack.append((inner, depth + 1))
            elif isinstance(item, list):
                if len(item) > otlp_json.MAX_ITEMS:
                    raise _TooMuch(f"{what} holds a list of more than {otlp_json.MAX_ITEMS} items {_LISTS}")
                if depth > otlp_json.MAX_DEPTH:
                    raise _NotOtlp(f"{what} is nested more than {otlp_json.MAX_DEPTH} levels deep")
                stack.extend((inner, depth + 1) for inner in item if isinstance(inner, (str, dict, list)))
        self.cost += objects * _OBJECT_COST
        if self.cost > self.budget:
            raise _TooMuch(_TOO_MANY_OBJECTS)

    def _parse(self, value: Any, message: Any, depth: int | None = None) -> None:
        """`value` into `message`, which sits `depth` messages deep in the request (its type's place by default)."""
        if depth is None:
            depth = _MESSAGE_DEPTH[message.DESCRIPTOR.name]
        try:
            json_format.ParseDict(
                value,
                message,
                ignore_unknown_fields=True,
                # ParseDict's own limit counted from the request, as when it parsed the whole document
                max_recursion_depth=_PARSE_DEPTH - depth,
            )
        except (json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise _NotOtlp(str(exc)) from None


_PARSE_DEPTH = 100  # ParseDict's default max_recursion_depth
_MESSAGE_DEPTH = {"ExportTraceServiceRequest": 0, "ResourceSpans": 1, "ScopeSpans": 2, "Span": 3}
_TOO_MANY_OBJECTS = (
    "it holds more spans, attributes and values than its size allows (empty objects by the hundred thousand)"
)
_EXTENSION = re.compile(r"\[[a-zA-Z0-9\._]*\]$")  # a member ParseDict reads as an extension's name
_LISTS = "(attributes, events, links or values)"


class _Unit:
    """What one decode of a value decided, when it is walked a piece at a time instead: the first cap it passed
    (`cap`: decoding and checking go on, for a malformed piece later on, but nothing more is parsed) and the first
    refusal of ParseDict (`refusal`); whether its links' ids were all hex."""

    __slots__ = ("cap", "checks", "links_ok", "refusal", "what")

    def __init__(self, what: str, *, checks: bool = True) -> None:
        self.what = what
        self.checks = checks
        self.cap: Exception | None = None
        self.refusal: Exception | None = None
        self.links_ok = True

    @property
    def parsing(self) -> bool:
        return self.cap is None and self.refusal is None

    def fail(self, exc: Exception) -> None:
        if self.cap is None:
            self.cap = exc
        self.checks = False

    def refuse(self, exc: Exception) -> None:
        if self.refusal is None:
            self.refusal = exc

    def settle(self) -> None:
        """Raise what the value's whole decode would have: the first cap it passed, else ParseDict's refusal."""
        if self.cap is not None:
            raise self.cap
        if self.refusal is not None:
            raise self.refusal


_JSON_FIELDS: dict[str, dict[str, Any]] = {}


def _json_fields(descriptor: Any) -> dict[str, Any]:
    """A message's fields by the names ParseDict reads them by (the JSON name, then the field's own)."""
    known = _JSON_FIELDS.get(descriptor.full_name)
    if known is None:
        known = {f.name: f for f in descriptor.fields} | {f.json_name: f for f in descriptor.fields}
        _JSON_FIELDS[descriptor.full_name] = known
    return known


def _span_ids_to_base64(span: dict[str, Any], *, links_ok: bool = True) -> bool:
    """OTLP JSON writes ids as hex, proto3 JSON as base64. A span whose id is not hex keeps an empty trace id, and
    is refused by `split_by_trace` like any span without a valid one (partial success), not the whole request.
    `links_ok`: whether the links walked apart from `span` had hex ids. Whether every id was hex."""
    ok = links_ok
    for camel, snake in (
        ("traceId", "trace_id"),
        ("spanId", "span_id"),
        ("parentSpanId", "parent_span_id"),
    ):
        ok &= _convert_id(span, camel, snake)
    for link in _list(span.get("links")):
        if isinstance(link, dict):
            ok &= _link_ids_to_base64(link)
    if not ok:
        span.pop("trace_id", None)
        span["traceId"] = ""
    return ok


def _link_ids_to_base64(link: dict[str, Any]) -> bool:
    return _convert_id(link, "traceId", "trace_id") & _convert_id(link, "spanId", "span_id")


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


@dataclass(slots=True)
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
    """`split_request` of a message already parsed (tests, and the exporter's own message in the browser tests)."""
    return split_request(request.SerializeToString(), "protobuf")


# ---- cutting a request into traces, a piece at a time (issue 35)
#
# A request parsed whole held 14 times a protobuf body of many tiny spans in memory, and 25 times one of a span with
# a huge attribute count (upb's form of a tiny message is about 50 bytes). Here it is never held whole: each
# ResourceSpans and ScopeSpans is walked at the wire level (n17q_engine.protowire), and the pieces inside them
# (Resource, scope, spans) are parsed by upb a run of at most _CHUNK bytes at a time, framed in the ResourceSpans and
# ScopeSpans they sat in (so upb reads every byte at the depth it read it in the whole request: what is accepted or
# refused is unchanged). What the split needs of each span (ids, parent, name, end) is taken and the span dropped;
# each trace's payload is made of the ORIGINAL bytes, re-framed (protobuf messages concatenate); a request of one
# trace with every span valid is its own payload. A piece long enough to hold a list past MAX_ITEMS (an item takes
# at least 2 bytes) is first counted at the wire level, by its descriptor, and refused with 413 past MAX_ITEMS in
# one list or past what its size allows (_PB_MESSAGE_COST a message), before upb builds it.

_CHUNK = 64 * 1024
# What a split keeps of each scope, resource, and trace in a scope (with its batch), estimated from tracemalloc
# (100,000 one-span scopes of one trace: 756 bytes each; ResourceSpans of one such scope: 864; one-span traces in one
# scope: 827), and how many times the body it may come to: an SDK's batch of 512 one-span traces comes to 3 times.
_KEEP_SCOPE, _KEEP_RESOURCE, _KEEP_ENTRY = 400, 200, 800
_KEEP_PER_BYTE = 4
_KEEP_SLACK = 4 << 20
_PB_MESSAGE_COST = 50  # upb's form of an empty message, measured
_PB_COST_PER_BYTE = 4
_PB_COST_SLACK = 8 << 20
_REQUEST, _RESOURCE_SPANS_KEY, _SCOPE_SPANS_KEY, _SPANS_KEY, _HEAD_KEY = 0, 0x0A, 0x12, 0x12, 0x0A


def _frame(key: int, content: bytes) -> bytes:
    """`content` as a length-delimited field (`key`: its one-byte tag)."""
    return bytes((key,)) + _varint(len(content)) + content


class _Ledger:
    """What a split keeps beside the spans' bytes (each scope, resource, and trace's entry in a scope), estimated
    from what they measured, and refused past _KEEP_PER_BYTE times the body (+ _KEEP_SLACK): a protobuf body of
    100,000 scopes of one span each held 33 times its size in them."""

    __slots__ = ("budget", "kept")

    def __init__(self, size: int) -> None:
        self.budget = _KEEP_PER_BYTE * size + _KEEP_SLACK
        self.kept = 0

    def charge(self, cost: int) -> None:
        self.kept += cost
        if self.kept > self.budget:
            raise _TooMuch("it holds more resources, scopes and traces than its size allows")


class _Scope:
    """One ScopeSpans of a request: its fields but its spans (`head`, protobuf), and its valid spans by trace
    (`traces`: [how many, the root's (ended, name) or None, then the pieces of protobuf the trace's payload is made of:
    (start, end) in the body, flat, or bytes]), with what the split says of the others."""

    __slots__ = ("head", "ledger", "ordered", "reasons", "rejected", "traces")

    def __init__(self, ledger: _Ledger, *, ordered: bool = False) -> None:
        ledger.charge(_KEEP_SCOPE)
        self.ledger = ledger
        self.head = b""
        self.ordered: list[bytes] | None = [] if ordered else None  # every span in order (parse_request's)
        self.clear()

    def clear(self) -> None:
        self.traces: dict[bytes, list[Any]] = {}
        self.rejected = 0
        self.reasons: list[str] = []
        if self.ordered is not None:
            self.ordered.clear()

    def take(self, span: Any, piece: bytes | None = None, start: int = 0, end: int = 0) -> None:
        """Count `span` (a parsed Span) in, with its protobuf field (`piece`), or its field's `start` and `end` in
        the body."""
        if piece is not None and self.ordered is not None:
            self.ordered.append(piece)
        reason = _refusal(span)
        if reason is not None:
            self.rejected += 1
            if reason not in self.reasons:
                self.reasons.append(reason)
            return
        trace = span.trace_id
        entry = self.traces.get(trace)
        if entry is None:
            self.ledger.charge(_KEEP_ENTRY)
            entry = self.traces[trace] = [0, None]
        entry[0] += 1
        if not span.parent_span_id:
            entry[1] = (span.end_time_unix_nano > 0, str(span.name).replace("\x00", "\ufffd")[:200])
        if piece is not None:
            entry.append(piece)
        elif len(entry) > 2 and entry[-1] == start:
            entry[-1] = end  # the next span of the same trace: one range
        else:
            entry += (start, end)


class _Resource:
    """One ResourceSpans of a request: its fields but its scopes (`head`, protobuf), its service, its scopes."""

    __slots__ = ("head", "scopes", "service")

    def __init__(self, ledger: _Ledger) -> None:
        ledger.charge(_KEEP_RESOURCE)
        self.head = b""
        self.service = ""
        self.scopes: list[_Scope] = []


def _finish(resources: list[_Resource], body: bytes | None) -> SplitRequest:
    """The batches: each trace's spans framed in the ResourceSpans and ScopeSpans they came in, in order. `body`: the
    protobuf request the pieces are (start, end) ranges of, and its own payload when it is one trace, all valid."""
    out = SplitRequest()
    grouped: dict[bytes, list[tuple[_Resource, _Scope]]] = {}
    roots: dict[bytes, tuple[bool, str]] = {}
    for resource in resources:
        for scope in resource.scopes:
            out.rejected += scope.rejected
            out.reasons.extend(r for r in scope.reasons if r not in out.reasons)
            for trace, entry in scope.traces.items():
                if entry[1] is not None:
                    roots[trace] = entry[1]
                grouped.setdefault(trace, []).append((resource, scope))
    whole = body is not None and len(grouped) == 1 and out.rejected == 0
    for trace, parts in grouped.items():
        if whole:
            payload = body  # the common case: one trace, every span valid
        else:
            framed = []
            for resource, scope in parts:
                pieces = scope.traces[trace][2:]
                if body is not None:
                    spans = b"".join(body[s:e] for s, e in zip(pieces[::2], pieces[1::2], strict=True))
                else:
                    spans = b"".join(pieces)
                framed.append(_frame(_RESOURCE_SPANS_KEY, resource.head + _frame(_SCOPE_SPANS_KEY, scope.head + spans)))
            payload = b"".join(framed)
        ended, name = roots.get(trace, (False, ""))
        hex_id = trace.hex()
        out.batches[hex_id] = TraceBatch(
            trace_id=hex_id,
            payload=cast(bytes, payload),
            span_count=sum(scope.traces[trace][0] for _resource, scope in parts),
            root_ended=ended,
            root_name=name,
            service_name=parts[0][0].service,
        )
    return out


class _ProtobufReader:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.ledger = _Ledger(len(body))
        self.big = 2 * otlp_json.MAX_ITEMS  # bytes: a piece this long may hold a list past the cap (an item: 2 bytes)

    def read(self) -> SplitRequest:
        body = self.body
        try:
            resources = []
            others = []
            for key, tag, start, end in fields(body, 0, len(body)):
                if key == _RESOURCE_SPANS_KEY:
                    resources.append(self._resource_spans(start, end))
                else:  # a field the request does not know: upb keeps it, and refuses a malformed one
                    others.append(body[tag:end])
            if others:
                self._parse(b"".join(others))
        except WireFormatError as exc:
            raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None
        except _TooMuch as exc:
            raise WireError(413, f"the body is refused: {exc}") from None
        return _finish(resources, body)

    def _parse(self, request: bytes) -> ExportTraceServiceRequest:
        try:
            return ExportTraceServiceRequest.FromString(request)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise WireError(400, f"the body is not an OTLP ExportTraceServiceRequest in protobuf ({exc})") from None

    def _caps(self, start: int, end: int, descriptor: Any, what: str) -> None:
        try:
            count(
                self.body,
                start,
                end,
                descriptor,
                max_items=otlp_json.MAX_ITEMS,
                max_messages=(_PB_COST_PER_BYTE * (end - start) + _PB_COST_SLACK) // _PB_MESSAGE_COST,
            )
        except CapExceeded as exc:
            if exc.what == "items":
                raise WireError(
                    413,
                    f"the body is refused: {what} holds a list of more than {otlp_json.MAX_ITEMS} items {_LISTS}",
                ) from None
            raise WireError(
                413, f"the body is refused: {what} holds more attributes and values than its size allows"
            ) from None

    def _resource_spans(self, start: int, end: int) -> _Resource:
        body = self.body
        resource = _Resource(self.ledger)
        head = []
        for key, tag, value, stop in fields(body, start, end):
            if key == _SCOPE_SPANS_KEY:
                resource.scopes.append(self._scope_spans(value, stop))
                continue
            if key == _HEAD_KEY and stop - value > self.big:
                self._caps(value, stop, Resource.DESCRIPTOR, "a resource")
            head.append(body[tag:stop])
        resource.head = b"".join(head)
        parsed = self._parse(_frame(_RESOURCE_SPANS_KEY, resource.head))
        resource.service = _service_name(parsed.resource_spans[0].resource)
        return resource

    def _scope_spans(self, start: int, end: int) -> _Scope:
        body = self.body
        scope = _Scope(self.ledger)
        head = []
        chunk = start  # where the fields not parsed yet begin
        spans: list[tuple[int, int]] = []  # the spans among them
        for key, tag, value, stop in fields(body, start, end):
            if stop - value > self.big:  # parsed alone, once counted
                self._chunk(scope, chunk, tag, spans)
                if key == _SPANS_KEY:
                    self._caps(value, stop, Span.DESCRIPTOR, "a span")
                elif key == _HEAD_KEY:
                    self._caps(value, stop, InstrumentationScope.DESCRIPTOR, "a scope")
                chunk = tag
            if key == _SPANS_KEY:
                spans.append((tag, stop))
            else:
                head.append(body[tag:stop])
            if stop - chunk > _CHUNK or stop - value > self.big:
                self._chunk(scope, chunk, stop, spans)
                chunk = stop
        self._chunk(scope, chunk, end, spans)
        scope.head = b"".join(head)
        return scope

    def _chunk(self, scope: _Scope, start: int, end: int, spans: list[tuple[int, int]]) -> None:
        """The fields of a ScopeSpans in body[start:end], parsed at the depth they sit at in the request; each of
        its spans counted into `scope`, and `spans` emptied."""
        if start == end:
            return
        parsed = self._parse(_frame(_RESOURCE_SPANS_KEY, _frame(_SCOPE_SPANS_KEY, self.body[start:end])))
        take = scope.take
        for span, piece in zip(parsed.resource_spans[0].scope_spans[0].spans, spans, strict=True):
            checkpoint()  # the request's budget (n17q_engine.budget), once per span
            take(span, None, *piece)
        spans.clear()


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
