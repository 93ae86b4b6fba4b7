"""Everything the product stored, read back byte for byte and searched for canaries (issue 32, point 2).

`sweep(canaries, since=…)` reads
- the database: every table, every column, every row, through the ORM's connection (PostgreSQL or SQLite), each
  table once;
- for SQLite, the database file and its WAL as raw bytes as well: a row deleted or overwritten stays in a free page
  until the page is reused, so a secret written in clear and masked a moment later is still on the disk. Those hits
  are reported apart (only canaries the rows themselves do not hold);
- the data folder: every file under `settings.DATA_DIR` and under every storage's location (the blob store of a
  test lives outside it) that changed since `since` (a `Snapshot` taken before the canaries were made: a file
  untouched since cannot hold them);

and opens every value on the way: gzip, zlib and zstd streams, zip members (stored, deflate or zstd, the way
Inspect's `.eval` keeps them) and base64 runs, recursively and bounded. A canary counts as found when it or any
8-character piece of it past its public prefix is in the bytes, at any layer.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import ahocorasick
import zstandard

from .canaries import Canary

MAX_DEPTH = 4
MAX_LAYER = 64 << 20  # the most one stream is opened to
MAX_STREAMS = 64  # candidate stream starts tried per value (gzip and zstd magics may also occur by chance)
RAW_STREAMS = 20_000  # stream starts tried in a raw database file
ZIP_ZSTD = 93
BASE64_RUN = re.compile(rb"[A-Za-z0-9+/]{24,}={0,2}|[A-Za-z0-9_-]{24,}={0,2}")
MAGIC = {b"\x1f\x8b\x08": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}
ZLIB_HEADERS = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")


@dataclass(frozen=True)
class Hit:
    area: str  # "database", "data folder" or "sqlite file"
    where: str  # table.column row <id>, or a path; then the layers opened to reach it (" > gzip@0 > zip:member")
    canary: Canary
    piece: str

    def line(self, door: str) -> str:
        shown = self.piece[:4] + "…"  # never the canary itself in a test report
        return f"{door}: {self.canary.shape} in {self.area}: {self.where} (piece {shown})"


class Finder:
    """Every piece of every canary in one Aho-Corasick automaton: one pass per value, whatever the count."""

    def __init__(self, canaries: Iterable[Canary]):
        self.automaton = ahocorasick.Automaton()
        for canary in canaries:
            for piece in canary.pieces():
                self.automaton.add_word(piece, (canary, piece))
        self.automaton.make_automaton()

    def find(self, data: bytes) -> list[tuple[Canary, str]]:
        if not data:
            return []
        seen: dict[str, tuple[Canary, str]] = {}
        for _, (canary, piece) in self.automaton.iter(data.decode("latin-1")):
            seen.setdefault(canary.shape, (canary, piece))
        return list(seen.values())


# ------------------------------------------------------------------------------------------------------ layers


def layers(data: bytes, depth: int = 0, *, streams: int = MAX_STREAMS) -> Iterator[tuple[str, bytes]]:
    """(path of layers, bytes): the value itself, then everything packed in it, depth first. `streams` bounds the
    stream starts tried in this value (a database file holds many rows, each its own stream)."""
    yield "", data
    if depth >= MAX_DEPTH or len(data) < 8:
        return
    for label, inner in _unpacked(data, streams):
        for sub, deeper in layers(inner, depth + 1):
            yield f" > {label}{sub}", deeper


def _unpacked(data: bytes, streams: int) -> Iterator[tuple[str, bytes]]:
    if data[:4] == b"PK\x03\x04" or b"PK\x05\x06" in data[-65557:]:
        members = list(_zip_members(data))
        if members:
            yield from members
            return  # its members are its streams: searching it for magic again only finds them twice
    tried = 0
    starts = {**MAGIC, **dict.fromkeys(ZLIB_HEADERS, "zlib")}
    for magic, kind in starts.items():
        # A zlib stream has no magic, only a two-byte header that random bytes hold too: where it is a value's own
        # encoding it starts the value; inside a larger file (the database's pages) every start is tried, bounded.
        start = data.find(magic) if kind != "zlib" or streams > MAX_STREAMS else (0 if data[:2] == magic else -1)
        while start != -1 and tried < streams:
            tried += 1
            window = data[start : start + MAX_LAYER]
            inner = _unzstd(window) if kind == "zstd" else _inflate(window, 31 if kind == "gzip" else zlib.MAX_WBITS)
            if inner:
                yield f"{kind}@{start}", inner
            start = data.find(magic, start + 1)
    for n, match in enumerate(BASE64_RUN.finditer(data)):
        if n >= 4096:
            break
        decoded = _b64(match.group())
        # Only what decodes to something that is text or a known container is worth a layer of its own.
        if decoded and (_looks_textual(decoded) or _is_container(decoded)):
            yield f"base64@{match.start()}", decoded


def _inflate(data: bytes, wbits: int) -> bytes:
    try:
        d = zlib.decompressobj(wbits)
        return d.decompress(data, MAX_LAYER)
    except zlib.error:
        return b""


def _unzstd(data: bytes) -> bytes:
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=False) as r:
            return r.read(MAX_LAYER)
    except zstandard.ZstdError:
        return b""


def _b64(run: bytes) -> bytes:
    text = run.rstrip(b"=")
    text += b"=" * (-len(text) % 4)
    try:
        if b"-" in text or b"_" in text:
            return base64.urlsafe_b64decode(text)
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _looks_textual(data: bytes) -> bool:
    sample = data[:512]
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in sample)
    return printable >= 0.85 * len(sample)


def _is_container(data: bytes) -> bool:
    return (
        data[:4] == b"PK\x03\x04"
        or data[:3] == b"\x1f\x8b\x08"
        or data[:4] == b"\x28\xb5\x2f\xfd"
        or (data[:2] in ZLIB_HEADERS)
    )


def _zip_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    for info in infos[:10_000]:
        raw = _member_raw(data, info)
        if info.compress_type == ZIP_ZSTD:
            inner = _unzstd(raw)
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            inner = _inflate(raw, -zlib.MAX_WBITS)
        elif info.compress_type == zipfile.ZIP_STORED:
            inner = raw
        else:
            inner = raw  # an unknown method: its bytes as they are
        yield f"zip:{info.filename}", inner


def _member_raw(data: bytes, info: zipfile.ZipInfo) -> bytes:
    offset = info.header_offset
    if data[offset : offset + 4] != b"PK\x03\x04":
        return b""
    name_len, extra_len = struct.unpack("<HH", data[offset + 26 : offset + 30])
    start = offset + 30 + name_len + extra_len
    return data[start : start + info.compress_size]


# ------------------------------------------------------------------------------------------------------ places


def database_values(connection) -> Iterator[tuple[str, bytes]]:
    """(table.column row <id>, the value's bytes) for every non-null value of every table: one SELECT per table."""
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        for table in sorted(tables):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            columns = [c[0] for c in cursor.description]
            for row in cursor.fetchall():
                row_id = row[0]
                for column, value in zip(columns, row, strict=True):
                    if value is None:
                        continue
                    yield f"{table}.{column} row {row_id}", _as_bytes(value)


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return str(value).encode("utf-8", "surrogatepass")


def sqlite_files(connection) -> list[Path]:
    if connection.vendor != "sqlite":
        return []
    name = Path(connection.settings_dict["NAME"])
    return [p for p in (name, Path(f"{name}-wal"), Path(f"{name}-journal")) if p.is_file()]


@dataclass
class Snapshot:
    """The data folders' files before a door's test: (size, mtime, inode) by path."""

    roots: list[Path]
    before: dict[Path, tuple[int, int, int]]

    @classmethod
    def take(cls, roots: Iterable[Path]) -> Snapshot:
        kept: list[Path] = []
        for root in roots:
            root = Path(root).resolve()
            if not any(root == k or root.is_relative_to(k) for k in kept):
                kept = [k for k in kept if not k.is_relative_to(root)] + [root]
        return cls(kept, {p: _stamp(p) for p in _files(kept)})

    def label(self, path: Path) -> str:
        for root in self.roots:
            if path.is_relative_to(root):
                return f"{root.name}/{path.relative_to(root)}"
        return str(path)

    def changed(self, skip: Iterable[Path] = ()) -> Iterator[Path]:
        skipped = {Path(p).resolve() for p in skip}
        for path in _files(self.roots):
            if path in skipped or _other_test_database(path):
                continue
            if self.before.get(path) != _stamp(path):
                yield path


def _files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if not root.exists():
            continue
        for dirpath, _, filenames in os.walk(root):
            for name in filenames:
                path = Path(dirpath, name)
                if path.is_file() and not path.is_symlink():
                    yield path.resolve()


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1, -1)
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _other_test_database(path: Path) -> bool:
    # Other test processes (xdist workers) keep their databases in the same data folder; ours is read as rows
    # and as the sqlite file.
    return path.name.startswith("test-") and ".sqlite3" in path.name


# ------------------------------------------------------------------------------------------------------ the sweep


def search(finder: Finder, area: str, where: str, data: bytes) -> list[Hit]:
    hits = []
    for path, layer in layers(data):
        for canary, piece in finder.find(layer):
            hits.append(Hit(area, where + path, canary, piece))
    return hits


def sweep(canaries: Iterable[Canary], *, connection, snapshot: Snapshot) -> list[Hit]:
    """Every place a canary was found: the database's rows, the data folder, and (apart) the sqlite file."""
    canaries = list(canaries)
    finder = Finder(canaries)
    hits: list[Hit] = []
    for where, data in database_values(connection):
        hits += search(finder, "database", where, data)
    raw = sqlite_files(connection)
    for path in snapshot.changed(skip=raw):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # removed while walking (a cache entry): nothing left to read
        hits += search(finder, "data folder", snapshot.label(path), data)
    in_rows = {h.canary.shape for h in hits if h.area == "database"}
    for path in raw:
        for where, layer in layers(path.read_bytes(), streams=RAW_STREAMS):
            for canary, piece in finder.find(layer):
                if canary.shape not in in_rows:
                    hits.append(Hit("sqlite file", f"{path.name}{where} (a free or overwritten page)", canary, piece))
    return hits
