"""OTLP/JSON read a piece at a time within caps (issue 35), the one reader both OTLP/JSON doors use: the request's
skeleton (`resourceSpans` -> `scopeSpans` -> `spans`) walked over the text, each span and every other member
decoded alone, none of them ever built past a bound.

Why: `json.loads` of a whole export builds every object at once, and a JSON object costs 50-200 bytes of Python
whatever its text costs: a 37 MB request took the receiver to 14 times its size, a 6 MB span of 160,000 tiny
attributes the converting process to 15 times. Reading span by span is not enough on its own (that one span is the
whole file), so each object or list is decoded by the json module's C scanner (`raw_decode`, the one `json.loads`
uses: numbers, escapes, NaN and error messages as before) over a window of the text: first twice the previous
span's length (so an ordinary span costs one short copy), then WINDOW_CHARS characters: whatever those hold, their
objects are a few MiB. A piece that does not fit its window (a large span) goes to `_large`: here it is walked,
member by member and item by item, each decoded the same way, with its lists, strings, nesting and values counted
against the caps as they are read, so it is refused at the cap, not after it was built; the receiver's reader
(otlp_receiver.wire._JsonReader, a subclass) parses it into its protobuf message a member at a time instead.

`OtlpJsonReader(text).events()` yields what it reads, in the text's order, as (kind, level, key, value):

- (OPEN, level, None, None) / (CLOSE, level, None, None): an object of the skeleton begins / ends (level 0 the
  request, 1 a resourceSpans item, 2 a scopeSpans item);
- (LIST, level, key, None): the object at `level` names its skeleton list (`resourceSpans`, `scopeSpans`, `spans`,
  or a snake_case name) as `key`; its items follow (a list given twice: the second LIST starts it again);
- (MEMBER, level, key, value): any other member of the object at `level`, decoded (a skeleton name whose value is
  not a list comes here too, as json.loads would give it);
- (SPAN, 3, None, value): a span (any JSON value: the caller checks its shape);
- (ITEM, level, None, value): an item of a skeleton list that is not an object (level: the list's items' level), or
  at level 0 a text that is not an object.

Used by the OTLP file door's flattening (`flat.flatten_json`), `read_whole`/`decode_otlp`, the storage gate's
piecewise masking (`n17q_secrets.gate.mask_otlp_json`) and the OTLP/HTTP receiver (`otlp_receiver.wire`).

Refusals are one line: `OtlpJsonTooLarge` past a cap (the receiver's 413), `OtlpJsonInvalid` for text that is not
JSON or too deeply nested (400); both are ConversionErrors, so the file doors say them as they say any other.

The caps, defined here once for both doors (the receiver's protobuf door uses MAX_ITEMS too): MAX_SPANS per export,
MAX_ITEMS per list (attributes, events, links, values: the walk counts them; of a piece decoded whole, the file
door's flattening and the receiver's check count them), MAX_STRING_CHARS per string, MAX_DEPTH of nesting, and
MAX_PIECE_VALUES per span, resource or scope, which bounds the one large span this reader's walk assembles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner json.loads uses
from typing import Any

from n17q_engine.budget import checkpoint

from .. import ConversionError

MAX_SPANS = 100_000  # per export; an SDK's batch is 512, the file budget's file 100,000
MAX_ITEMS = 10_000  # per list: attributes of a span, a resource, a scope, an event or a link; events; links; values
MAX_STRING_CHARS = 8 * 1024 * 1024  # a key or a string value
MAX_DEPTH = 140  # JSON nesting: an attribute value 32 deep (the converter's MAX_ANY_DEPTH) is 136
# JSON values (objects, lists, strings, numbers...) in one span, resource or scope read by the walk: a span of
# 10,000 attributes is about 50,000; this many tiny ones are some 30 MiB of dicts.
MAX_PIECE_VALUES = 250_000
# The characters an object or a list is decoded over at once: first twice the previous span's length (at least
# WINDOW_MIN), then WINDOW_CHARS. Their objects are at most ~30 bytes a character (`[],` is three characters and a
# 56-byte list): 64 Ki characters are ~2 MiB, whatever the text. A string, number or literal is decoded from the
# text itself (its value is no larger than its text).
WINDOW_CHARS = 64 * 1024
WINDOW_MIN = 1024

OPEN, CLOSE, LIST, MEMBER, SPAN, ITEM = "open", "close", "list", "member", "span", "item"
SKELETON = (("resourceSpans", "resource_spans"), ("scopeSpans", "scope_spans"), ("spans",))
SPAN_LEVEL = len(SKELETON)

Event = tuple[str, int, str | None, Any]

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class OtlpJsonTooLarge(ConversionError):
    """Past a cap (the receiver answers 413)."""


class OtlpJsonInvalid(ConversionError):
    """Not JSON, or nested past MAX_DEPTH (the receiver answers 400)."""


def json_error(exc: json.JSONDecodeError) -> OtlpJsonInvalid:
    return OtlpJsonInvalid(f"the OTLP JSON does not parse ({exc.msg} at line {exc.lineno} column {exc.colno})")


class OtlpJsonReader:
    """One OTLP/JSON export's text, read by `events()` (once)."""

    def __init__(self, text: str, *, window: int | None = None) -> None:
        self.text = text
        self.spans = 0
        self.window = WINDOW_CHARS if window is None else window
        self.window_min = min(WINDOW_MIN, self.window)
        self.last_span = 0  # the last span decoded whole's length: the first window of the next
        self._piece_values = 0  # values the walk has read of the current piece
        self._what = "the export"
        self.index = [0, -1, -1, -1]  # per level, the index of the item being read in its skeleton list
        # Where the piece just yielded is in the text: a member from its key's quote, a span or an item itself.
        self.start = self.end = 0

    # -- the skeleton

    def events(self) -> Generator[Event, None, None]:
        text = self.text
        try:
            pos = self._ws(0)
            if text[pos : pos + 1] != "{":
                value, end = self._piece(pos, ITEM, 0)
                self._end(end)
                self.start, self.end = pos, end
                yield ITEM, 0, None, value  # the caller says what it is instead of an object
                return
            end = yield from self._object(pos, 0)
            self._end(end)
        except json.JSONDecodeError as exc:
            raise json_error(exc) from None
        except ConversionError:
            raise
        except ValueError as exc:  # what json.loads raises past its own limits (a number of 5,000 digits)
            raise OtlpJsonInvalid(f"the OTLP JSON does not parse ({' '.join(str(exc).split())[:200]})") from None

    def _object(self, pos: int, level: int) -> Generator[Event, None, int]:
        text = self.text
        names = SKELETON[level]
        yield OPEN, level, None, None
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "}":
            yield CLOSE, level, None, None
            return pos + 1
        while True:
            start = pos
            key, pos = self._key(pos)
            if key in names and text[pos : pos + 1] == "[":
                yield LIST, level, key, None
                pos = yield from self._array(pos, level + 1)
            else:
                value, pos = self._piece(pos, MEMBER, level, key)
                self.start, self.end = start, pos
                yield MEMBER, level, key, value
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "}":
                yield CLOSE, level, None, None
                return pos + 1
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def _array(self, pos: int, level: int) -> Generator[Event, None, int]:
        text = self.text
        index = self.index
        index[level:] = [-1] * (len(index) - level)
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "]":
            return pos + 1
        while True:
            index[level] += 1
            if level == SPAN_LEVEL:
                checkpoint()  # a request's budget (n17q_engine.budget), once per span
                self.spans += 1
                if self.spans > MAX_SPANS:
                    raise OtlpJsonTooLarge(f"the OTLP JSON holds more than {MAX_SPANS} spans: send it in smaller parts")
                start = pos
                value, pos = self._piece(pos, SPAN, level)
                self.start, self.end = start, pos
                yield SPAN, level, None, value
            elif text[pos : pos + 1] == "{":
                pos = yield from self._object(pos, level)
            else:
                start = pos
                value, pos = self._piece(pos, ITEM, level)
                self.start, self.end = start, pos
                yield ITEM, level, None, value
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                return pos + 1
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def _key(self, pos: int) -> tuple[str, int]:
        text = self.text
        if text[pos : pos + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        key, pos = scanstring(text, pos + 1)
        if len(key) > MAX_STRING_CHARS:
            raise OtlpJsonTooLarge(f"the OTLP JSON holds a key of more than {MAX_STRING_CHARS} characters")
        pos = self._ws(pos)
        if text[pos : pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        return key, self._ws(pos + 1)

    def _ws(self, pos: int) -> int:
        match = _WS.match(self.text, pos)
        return match.end() if match else pos

    def _end(self, pos: int) -> None:
        pos = self._ws(pos)
        if pos != len(self.text):
            raise json.JSONDecodeError("Extra data", self.text, pos)

    # -- one piece (a span, a resource, a member), bounded

    def _piece(self, pos: int, kind: str, level: int, key: str | None = None) -> tuple[Any, int]:
        """A SPAN or an ITEM of the skeleton list of items at `level`, or a MEMBER `key` of the skeleton object at
        `level`, decoded within the caps (a refusal names where it is): whole when it fits its window, else by
        `_large`."""
        try:
            decoded = self._decode(pos, self.last_span if kind == SPAN else 0)
        except RecursionError:
            raise self._too_deep(self._where(level, key)) from None
        if decoded is None:
            self._piece_values = 0
            self._what = self._where(level, key)
            return self._large(kind, level, key, pos)
        value, end = decoded
        if kind == SPAN:
            self.last_span = end - pos
        elif type(value) is str and len(value) > MAX_STRING_CHARS:
            raise self._too_long(self._where(level, key))
        return value, end

    def _where(self, level: int, key: str | None) -> str:
        """What a refusal names: the piece's path (`resourceSpans[0].scopeSpans[1].spans[2]`, `...resource`)."""
        where = ".".join(f"{SKELETON[i][0]}[{self.index[i + 1]}]" for i in range(level))
        if key is not None:
            where = f"{where}.{key[:40]}" if where else key[:40]
        return where or "the OTLP JSON"

    def _large(self, kind: str, level: int, key: str | None, pos: int) -> tuple[Any, int]:
        """A piece too long for its window (`_piece`'s arguments): walked, and built within MAX_PIECE_VALUES. A
        reader that does not want it built (the receiver's, which parses it into its message a member at a time)
        walks it its own way."""
        return self._walk(pos, level + 1, self._what)

    def _decode(self, pos: int, hint: int) -> tuple[Any, int] | None:
        """The value at `pos` and the position after it, decoded by the C scanner; None for an object or a list that
        does not end within `window` characters (or is malformed past a window's end: a walk over its parts says
        where). `hint`: its likely length (a span: the previous one's), so an ordinary span costs one short copy."""
        text = self.text
        if text[pos : pos + 1] not in ("{", "["):
            return _DECODER.raw_decode(text, pos)  # a string, a number or a literal: no more than its text
        size = min(self.window, max(self.window_min, 2 * hint))
        while True:
            if pos + size >= len(text):
                return _DECODER.raw_decode(text, pos)
            try:
                value, end = _DECODER.raw_decode(text[pos : pos + size])
            except json.JSONDecodeError:  # cut short by the window
                if size >= self.window:
                    return None
                size = self.window
                continue
            return value, pos + end

    def _value(self, pos: int, depth: int, what: str) -> tuple[Any, int]:
        """A part of a piece being walked: decoded whole when it fits the window (then counted), else walked."""
        try:
            decoded = self._decode(pos, 0)
        except RecursionError:
            raise self._too_deep(what) from None
        if decoded is None:
            return self._walk(pos, depth, what)
        value, end = decoded
        if type(value) is str and len(value) > MAX_STRING_CHARS:
            raise self._too_long(what)
        self._count(value, depth, what)
        return value, end

    def _walk(self, pos: int, depth: int, what: str) -> tuple[Any, int]:
        """An object or a list larger than the window: member by member, item by item, each counted as read."""
        if depth > MAX_DEPTH:
            raise self._too_deep(what)
        text = self.text
        self._tally(1, what)
        if text[pos : pos + 1] == "{":
            out: dict[str, Any] = {}
            pos = self._ws(pos + 1)
            if text[pos : pos + 1] == "}":
                return out, pos + 1
            while True:
                key, pos = self._key(pos)
                out[key], pos = self._value(pos, depth + 1, what)
                pos = self._ws(pos)
                if text[pos : pos + 1] == ",":
                    pos = self._ws(pos + 1)
                    continue
                if text[pos : pos + 1] == "}":
                    return out, pos + 1
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
        items: list[Any] = []
        pos = self._ws(pos + 1)
        if text[pos : pos + 1] == "]":
            return items, pos + 1
        while True:
            if len(items) == MAX_ITEMS:
                raise self._too_many(what)
            item, pos = self._value(pos, depth + 1, what)
            items.append(item)
            pos = self._ws(pos)
            if text[pos : pos + 1] == ",":
                pos = self._ws(pos + 1)
                continue
            if text[pos : pos + 1] == "]":
                return items, pos + 1
            raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def _count(self, value: Any, depth: int, what: str) -> None:
        """The caps over a part of a walked piece that was decoded whole: nesting, list lengths, and its values."""
        values = 0
        stack: list[tuple[Any, int]] = [(value, depth)]
        while stack:
            item, level = stack.pop()
            values += 1
            if isinstance(item, dict):
                if level > MAX_DEPTH:
                    raise self._too_deep(what)
                values += len(item)  # the keys
                stack.extend((inner, level + 1) for inner in item.values())
            elif isinstance(item, list):
                if len(item) > MAX_ITEMS:
                    raise self._too_many(what)
                if level > MAX_DEPTH:
                    raise self._too_deep(what)
                stack.extend((inner, level + 1) for inner in item)
        self._tally(values, what)

    def _tally(self, values: int, what: str) -> None:
        self._piece_values += values
        if self._piece_values > MAX_PIECE_VALUES:
            raise OtlpJsonTooLarge(
                f"{self._what} holds more than {MAX_PIECE_VALUES} JSON values (attributes, events, links and their "
                "values): send it in smaller parts"
            )

    @staticmethod
    def _too_many(what: str) -> OtlpJsonTooLarge:
        return OtlpJsonTooLarge(
            f"{what} holds a list of more than {MAX_ITEMS} items (attributes, events, links or values)"
        )

    @staticmethod
    def _too_long(what: str) -> OtlpJsonTooLarge:
        return OtlpJsonTooLarge(f"{what} holds a string of more than {MAX_STRING_CHARS} characters")

    @staticmethod
    def _too_deep(what: str) -> OtlpJsonInvalid:
        return OtlpJsonInvalid(f"the OTLP JSON is nested more than {MAX_DEPTH} levels deep (in {what})")


def too_many_items(where: str, what: str) -> OtlpJsonTooLarge:
    """The refusal of a list past MAX_ITEMS that the flattening found (a piece small enough to be decoded whole)."""
    return OtlpJsonTooLarge(f"{where} holds more than {MAX_ITEMS} {what}: the most an OTLP export may give one list")


def read_whole(text: str, *, window: int | None = None) -> Any:
    """The value `json.loads(text)` gives (duplicate keys: the last value, at the first one's place), read a piece at a
    time by `OtlpJsonReader`, so within its caps: what `decode_otlp` returns whole, and what tests compare."""
    stack: list[dict[str, Any]] = []
    lists: list[list[Any]] = []
    top: Any = None
    for kind, level, key, value in OtlpJsonReader(text, window=window).events():
        if kind == OPEN:
            obj: dict[str, Any] = {}
            if level:
                lists[level - 1].append(obj)
            else:
                top = obj
            stack.append(obj)
        elif kind == CLOSE:
            stack.pop()
            del lists[level:]
        elif kind == LIST:
            del lists[level:]
            items: list[Any] = []
            stack[level][key] = items  # type: ignore[index]
            lists.append(items)
        elif kind == MEMBER:
            del lists[level:]
            stack[level][key] = value  # type: ignore[index]
        elif level == 0:  # an export that is not an object
            top = value
        else:
            lists[level - 1].append(value)
    return top
