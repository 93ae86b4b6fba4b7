"""The protobuf wire format (https://protobuf.dev/programming-guides/encoding/), walked without parsing: where each
field of a message sits, found from its bytes alone. Shared by the OTLP file door (formats/otlp/sources.py: where
each span of a protobuf original sits) and the OTLP/HTTP receiver (otlp_receiver/wire.py: a request split by trace
and checked against its caps a piece at a time, never parsed whole).

`fields` steps over a message's own layer as upb (the protobuf runtime the console uses) reads it: it refuses exactly
the tags, lengths, varints and groups upb refuses and finds the same field boundaries; what is inside a
length-delimited value it does not open (the caller hands it to upb). `length_delimited`, the file door's older and
faster walk, refuses groups too (its caller then falls back)."""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.descriptor import Descriptor, FieldDescriptor


class WireFormatError(ValueError):
    """Bytes a protobuf parser refuses (truncated, a bad wire type or tag, an unmatched group)."""


VARINT, FIXED64, LENGTH_DELIMITED, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5
_MAX_TAG = (1 << 32) - 1


def varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at `pos` (at most 10 bytes, as a parser reads one) and the position after it."""
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireFormatError("a varint is cut short or longer than 10 bytes")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def length_delimited(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field of the message in data[start:end]; the other wire
    types are stepped over. WireFormatError for anything a parser would refuse, and for groups (not walked here)."""
    pos = start
    while pos < end:
        key = data[pos]
        if key < 0x80:  # a one-byte key (fields 1..15), as OTLP's are: read here, not through a call
            pos += 1
        else:
            key, pos = varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireFormatError("field number 0")
        if wire == LENGTH_DELIMITED:
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = varint(data, pos, end)
            value = pos
            pos += size
            if pos > end:
                raise WireFormatError("a length-delimited field runs past its message")
            yield number, value, pos
        elif wire == VARINT:
            _value, pos = varint(data, pos, end)
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        else:
            raise WireFormatError(f"wire type {wire}")
        if pos > end:
            raise WireFormatError("a field runs past its message")


def _tag(data: bytes, pos: int, end: int) -> tuple[int, int]:
    key = data[pos]
    if key < 0x80:
        pos += 1
    else:
        start = pos
        key, pos = varint(data, pos, end)
        if pos - start > 5 or key > _MAX_TAG:  # upb reads a tag as a 32-bit varint
            raise WireFormatError("a tag longer than 32 bits")
    if key >> 3 == 0:
        raise WireFormatError("field number 0")
    return key, pos


def _size(data: bytes, pos: int, end: int) -> tuple[int, int]:
    size = data[pos] if pos < end else 0x80
    if size < 0x80:
        return size, pos + 1
    start = pos
    size, pos = varint(data, pos, end)
    if pos - start > 5 or size >= 1 << 31:
        raise WireFormatError("a length longer than 31 bits")
    return size, pos


def _skip(data: bytes, wire: int, pos: int, end: int) -> int:
    """The position after a value of wire type `wire` (not a group) starting at `pos`."""
    if wire == VARINT:
        if pos < end and data[pos] < 0x80:
            return pos + 1
        return varint(data, pos, end)[1]
    if wire == LENGTH_DELIMITED:
        size, pos = _size(data, pos, end)
        pos += size
    elif wire == FIXED64:
        pos += 8
    elif wire == FIXED32:
        pos += 4
    else:
        raise WireFormatError(f"wire type {wire}")
    if pos > end:
        raise WireFormatError("a field runs past its message")
    return pos


def _group_end(data: bytes, number: int, pos: int, end: int) -> int:
    """The position after the end-group tag that closes group `number` opened just before `pos`."""
    open_groups = [number]
    while pos < end:
        key, pos = _tag(data, pos, end)
        wire = key & 7
        if wire == START_GROUP:
            open_groups.append(key >> 3)
        elif wire == END_GROUP:
            if open_groups.pop() != key >> 3:
                raise WireFormatError("a group closed by another field's end tag")
            if not open_groups:
                return pos
        else:
            pos = _skip(data, wire, pos, end)
    raise WireFormatError("a group is not closed")


def fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(key, tag start, value start, end) of every field of the message in data[start:end], in order; the key is
    the field number << 3 | the wire type; a group is one field (its value the fields inside it, `end` after its
    end tag). WireFormatError where upb refuses the message's own layer."""
    pos = start
    while pos < end:
        tag_start = pos
        key = data[pos]
        if key < 0x80 and key >= 8:  # a one-byte key of field 1..15, as OTLP's are: no call
            pos += 1
        else:
            key, pos = _tag(data, pos, end)
        wire = key & 7
        if wire == LENGTH_DELIMITED:
            size = data[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
            else:
                size, pos = _size(data, pos, end)
            value = pos
            pos += size
            if pos > end:
                raise WireFormatError("a length-delimited field runs past its message")
        elif wire == START_GROUP:
            value = pos
            pos = _group_end(data, key >> 3, pos, end)
        elif wire == END_GROUP:
            raise WireFormatError("an end-group tag outside a group")
        else:
            value = pos
            pos = _skip(data, wire, pos, end)
        yield key, tag_start, value, pos


class CapExceeded(Exception):
    """`count` stopped: a list longer than its cap, or more messages than allowed."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what  # "items" or "messages"


def count(
    data: bytes,
    start: int,
    end: int,
    descriptor: Descriptor,
    *,
    max_items: int,
    max_messages: int,
    max_depth: int = 100,
) -> int:
    """The messages in the message of type `descriptor` in data[start:end] (itself included), walked by its
    descriptor without parsing it: what parsing it would build, known before building it, at the cost of a walk.
    CapExceeded as soon as one message holds more than `max_items` items in one repeated field, or the count passes
    `max_messages`; nothing is opened below `max_depth` levels (a parser refuses that depth itself).
    WireFormatError where the bytes do not walk."""
    counter = [0]
    _count(data, start, end, descriptor, counter, max_items, max_messages, max_depth)
    return counter[0]


_SUBMESSAGES: dict[str, dict[int, tuple[Descriptor | None, bool]]] = {}


def _submessages(descriptor: Descriptor) -> dict[int, tuple[Descriptor | None, bool]]:
    """field number -> (its message type, or None; whether it is repeated)."""
    known = _SUBMESSAGES.get(descriptor.full_name)
    if known is None:
        known = {
            f.number: (
                f.message_type if f.type == FieldDescriptor.TYPE_MESSAGE else None,
                f.is_repeated,
            )
            for f in descriptor.fields
        }
        _SUBMESSAGES[descriptor.full_name] = known
    return known


def _count(
    data: bytes,
    start: int,
    end: int,
    descriptor: Descriptor,
    counter: list[int],
    max_items: int,
    max_messages: int,
    depth: int,
) -> None:
    counter[0] += 1
    if counter[0] > max_messages:
        raise CapExceeded("messages")
    if depth <= 0:
        return
    known = _submessages(descriptor)
    lengths: dict[int, int] = {}
    for key, _tag_start, value, stop in fields(data, start, end):
        number = key >> 3
        sub, repeated = known.get(number, (None, False))
        if repeated:  # a packed list is one field: OTLP's lists are of messages, which are never packed
            n = lengths[number] = lengths.get(number, 0) + 1
            if n > max_items:
                raise CapExceeded("items")
        if sub is not None and key & 7 == LENGTH_DELIMITED:
            _count(data, value, stop, sub, counter, max_items, max_messages, depth - 1)
