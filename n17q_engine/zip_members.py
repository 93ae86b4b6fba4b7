"""One member of an untrusted zip, read by hand where `zipfile` cannot: its compressed bytes found through its local
header, and a zstd member (Inspect writes its `.eval` logs' members with zstd, which Python 3.11's zipfile does not
read) unpacked under a cap. Shared by the Inspect reader (`formats.inspect_log`) and the secret scan's container
opener (`n17q_secrets.containers`); each names the member and raises its own error with `MemberError`'s reason.
"""

from __future__ import annotations

import struct
import zipfile
from typing import Any

ZIP_STORED, ZIP_DEFLATED, ZIP_ZSTANDARD = 0, 8, 93
LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # zip local file header, 30 bytes
CHUNK = 1 << 20


class MemberError(ValueError):
    """Why a member cannot be read, as the end of a sentence whose subject is the member: "is truncated"."""


def raw_member(data: bytes, info: zipfile.ZipInfo) -> memoryview:
    """The member's compressed bytes, as the central directory places them (checked against the local header)."""
    offset = info.header_offset
    if offset + LOCAL_HEADER.size > len(data):
        raise MemberError("is truncated")
    fields = LOCAL_HEADER.unpack_from(data, offset)
    if fields[0] != b"PK\x03\x04":
        raise MemberError("has no local header (corrupt zip)")
    start = offset + LOCAL_HEADER.size + fields[9] + fields[10]
    end = start + info.compress_size
    if end > len(data):
        raise MemberError("is truncated")
    return memoryview(data)[start:end]


def unzstd(raw: memoryview | bytes, cap: int) -> bytes:
    """`raw` unpacked, across frames (Inspect starts a new frame every so often), reading at most `cap + 1` bytes:
    a result longer than `cap` says the member unpacks past it, however far."""
    zstandard = zstandard_module()
    reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)
    out = bytearray()
    try:
        while len(out) <= cap:
            block = reader.read(min(CHUNK, cap + 1 - len(out)))
            if not block:
                break
            out += block
    except zstandard.ZstdError as exc:
        raise MemberError(f"is corrupt ({exc})") from None
    return bytes(out)


def zstandard_module() -> Any:
    """The zstandard package (MemberError, one line, when it is missing)."""
    try:
        import zstandard  # the stdlib reads zstd only from Python 3.14 (compression.zstd)
    except ImportError:  # pragma: no cover - a runtime dependency (pyproject)
        raise MemberError(
            "is zstd-compressed, and reading it needs the zstandard package, which is not installed"
        ) from None
    return zstandard
