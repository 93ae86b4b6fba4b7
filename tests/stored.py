"""Everything the console stored, as bytes, for tests that a secret reached none of it (issue 32): every value of
every table, and every file under the test's blob store, each also unpacked (zip with stored, deflate
or zstd members, gzip, zlib, zstd) and with its base64 runs decoded, at any depth up to a few levels."""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

_B64 = re.compile(rb"[A-Za-z0-9+/_-]{24,}={0,2}")


def unpacked(data: bytes, depth: int = 0) -> Iterator[bytes]:
    """`data`, and what every container and base64 run in it holds."""
    yield data
    if depth >= 5:
        return
    inner: list[bytes] = []
    head = data[:4]
    try:
        if head == b"PK\x03\x04":
            inner += _zip_members(data)
        elif head[:2] == b"\x1f\x8b":
            inner.append(gzip.decompress(data))
        elif head == b"\x28\xb5\x2f\xfd":
            import zstandard

            inner.append(zstandard.ZstdDecompressor().decompressobj().decompress(data))
        elif head[:1] == b"\x78":
            inner.append(zlib.decompress(data))
    except (OSError, EOFError, zlib.error, zipfile.BadZipFile, ValueError, RuntimeError):
        pass
    for m in _B64.finditer(data):
        run = m.group()
        try:
            inner.append(
                base64.b64decode(run + b"=" * (-len(run) % 4), altchars=b"-_" if b"-" in run or b"_" in run else None)
            )
        except (binascii.Error, ValueError):
            continue
    for piece in inner:
        yield from unpacked(piece, depth + 1)


def _zip_members(data: bytes) -> list[bytes]:
    import zstandard

    out = []
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            if info.compress_type == 93:
                start = info.header_offset + 30
                name_len, extra_len = (
                    int.from_bytes(data[start - 4 : start - 2], "little"),
                    int.from_bytes(data[start - 2 : start], "little"),
                )
                raw = data[start + name_len + extra_len : start + name_len + extra_len + info.compress_size]
                reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
                out.append(reader.read())
            else:
                out.append(zf.read(info))
    return out


def database_values() -> Iterator[bytes]:
    """Every non-null value of every table, as bytes (text as UTF-8)."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # names from the schema
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, memoryview):
                        yield bytes(value)
                    elif isinstance(value, bytes):
                        yield value
                    elif value is not None:
                        yield str(value).encode("utf-8", "surrogatepass")


def files_under(*folders: Path) -> Iterator[bytes]:
    for folder in folders:
        if folder.exists():
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    yield path.read_bytes()


def places_holding(secret: str, blob_store: Path) -> list[str]:
    """Where `secret` is stored (whole), unpacked as above: [] when nowhere."""
    needle = secret.encode("utf-8")
    found = []
    for i, value in enumerate(database_values()):
        if any(needle in piece for piece in unpacked(value)):
            found.append(f"database value #{i}: {value[:120]!r}")
    for value in files_under(blob_store):
        if any(needle in piece for piece in unpacked(value)):
            found.append(f"a file: {value[:120]!r}")
    return found
