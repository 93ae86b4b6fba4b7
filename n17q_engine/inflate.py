"""Undoing a body's gzip or deflate Content-Encoding in one streaming pass, with caps (issue 35).

A gzip body may hold members one after another (RFC 1952), and the obvious loop (a fresh decompressor on
`unused_data` after each member) copies the whole rest of the body at every member: quadratic, so 8 MB of empty
members took 45 s. Here the input is fed in slices through a memoryview, starting small at each member and doubling
while the member goes on: what zlib copies back as `unused_data` is at most the last slice, itself at most about
twice what the member had read, so the work is linear in the body. The members are counted and capped, and the
output is capped too: at most one byte past `max_bytes` is ever produced (a bomb is refused, not unpacked).
"""

from __future__ import annotations

import re
import zlib

from .budget import checkpoint

# gzip members in one body: concatenated files, or a blocked gzip (bgzip writes one member per 64 KiB).
MAX_MEMBERS = 4096
_FIRST_SLICE = 256  # bytes fed to a new member first: an empty member is about 20
_MAX_SLICE = 1 << 20
_NOT_NUL = re.compile(rb"[^\x00]")


class InflateError(ValueError):
    """A body that does not decompress within the caps. `kind`: "bytes" or "members" (a cap: `too_large`, 413),
    "corrupt" (with zlib's `detail`) or "cut short" (damaged data, 400); `message` is one line that reads after
    "the body"."""

    def __init__(self, kind: str, message: str, *, detail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail = detail

    @property
    def too_large(self) -> bool:
        return self.kind in ("bytes", "members")


def inflate(
    data: bytes, encoding: str, *, max_bytes: int, max_members: int = MAX_MEMBERS, zero_padding: bool = False
) -> bytes:
    """`data` without its "gzip" or "deflate" encoding (HTTP's deflate is a zlib stream, but some clients send it
    raw: both are read). InflateError, one line, past `max_bytes` decoded, past `max_members` gzip members, for a
    stream cut short or data that is not the encoding. `zero_padding`: NUL bytes after a member are skipped (tape
    blocks, some writers), as gzip(1) skips them."""
    if encoding == "gzip":
        wbits = zlib.MAX_WBITS | 16
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS if data[:1] == b"\x78" else -zlib.MAX_WBITS
    else:
        raise ValueError(f"not an encoding inflate reads: {encoding!r}")
    view = memoryview(data)
    out = bytearray()
    pos, members = 0, 0
    while pos < len(view):
        checkpoint()  # the request's budget (n17q_engine.budget), once per member
        members += 1
        if members > max_members:
            raise InflateError("members", f"holds more than {max_members} gzip members")
        stream = zlib.decompressobj(wbits)
        size = _FIRST_SLICE
        while True:
            piece = view[pos : pos + size]
            try:
                out += stream.decompress(piece, max_bytes + 1 - len(out))
            except zlib.error as exc:
                raise InflateError("corrupt", f"cannot be decompressed ({exc})", detail=str(exc)) from None
            if len(out) > max_bytes:
                raise InflateError("bytes", f"decompresses to more than {max_bytes} bytes")
            if stream.eof:
                pos += len(piece) - len(stream.unused_data)
                if zero_padding:
                    after = _NOT_NUL.search(data, pos)
                    pos = after.start() if after else len(view)
                break
            pos += len(piece)
            if pos >= len(view):
                raise InflateError("cut short", "is cut short")
            size = min(size * 2, _MAX_SLICE)
        if encoding == "deflate":
            break  # one stream; what follows it is not read, as before
    return bytes(out)
