"""Secrets inside containers: a zip's members (stored, deflate, zstd), gzip, zlib and zstd streams, base64 runs that
hold one of these, and JSON strings that hold JSON, each opened, scanned with the rules of `scanning`, and the
container rebuilt with its members masked (issue 32, point 1).

Why: a kept original is stored as the bytes it came as. An Inspect `.eval` log is a zip whose members Inspect writes
with zstd (method 93, through `zipfile_zstd` over the `zstandard` package); scanned as bytes, its compressed members
show the rules nothing, and a token masked in every event survived in the original. Here each member is unpacked,
masked, and packed again the same way (same names, same compression method, same order), so the original stays a
valid log of the same shape; a member nothing was found in is copied as its compressed bytes, untouched.

What cannot be rebuilt masked is answered None, never passed through unread: an encrypted member, a compression
method other than stored, deflate and zstd, a zip that needs zip64 or is corrupt, and anything past the bounds
below. The bounds hold by construction: declared sizes are checked before anything is unpacked, every unpacking
stops one byte past what is left of the budget (a zip bomb, or a member that lies about its size, never unpacks
past it), and containers nest at most MAX_NESTING deep.

Django-free and database-free, like `scanning` (the import-linter contract of n17q_secrets).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import Any

from n17q_engine import zip_members
from n17q_engine.inflate import InflateError, inflate

from . import scanning

# Everything one call unpacks, all members and all levels together: a kept original is at most 64 MiB
# (runs/secret_scan.py MAX_SCANNED_BLOB_BYTES), and Inspect's samples compress about tenfold.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
# One member, read whole to be scanned: the blob scan's own cap.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
# A zip's members: the most a zip without zip64 records can hold (the rebuilt zip is written without them).
MAX_MEMBERS = 0xFFFF
# Containers inside containers (a gzip in a zip member, base64 of a zip in a JSON string...).
MAX_NESTING = 4
# A JSON string is read as JSON only when it looks like an object or an array this long at least.
_MIN_NESTED_JSON = 16

ZIP_STORED, ZIP_DEFLATED, ZIP_ZSTANDARD = zip_members.ZIP_STORED, zip_members.ZIP_DEFLATED, zip_members.ZIP_ZSTANDARD
_KNOWN_METHODS = (ZIP_STORED, ZIP_DEFLATED, ZIP_ZSTANDARD)
_LOCAL = zip_members.LOCAL_HEADER
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # central directory header, 46 bytes
_END = struct.Struct("<4s4H2LH")  # end of central directory, 22 bytes
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Base64 runs long enough to hold a container (a zip's smallest is 22 bytes; a gzip's 20).
# A whole base64 run (nothing of the alphabet before it) that starts as the base64 of a zip, a gzip, a zstd or a zlib
# stream (its usual levels) starts.
_B64_CONTAINER = re.compile(r"(?<![A-Za-z0-9+/_-])(?:UEsD|H4sI|KLUv|eJ|eN|eF|eA)[A-Za-z0-9+/_-]{26,}={0,2}")


class Unmaskable(Exception):
    """A container that cannot be opened, scanned and rebuilt whole: why, in one line."""


@dataclass
class _Budget:
    left: int

    def take(self, n: int, what: str) -> None:
        if n > self.left:
            raise Unmaskable(f"{what} unpacks past the {MAX_UNPACKED_BYTES} bytes a container may unpack to")
        self.left -= n

    def cap(self) -> int:
        return min(MAX_MEMBER_BYTES, self.left)


def mask_container(data: bytes, *, where: str, findings: list[dict[str, str]]) -> bytes | None:
    """`data` with every secret found masked, inside every container it is or holds; the same object when nothing
    was found. None when it is (or holds) a container that cannot be rebuilt masked (`mask_container_or_raise`
    says why). Findings name the member: `<where>!<member name>` and the path inside it."""
    try:
        return mask_container_or_raise(data, where=where, findings=findings)
    except Unmaskable:
        return None


def mask_container_or_raise(data: bytes, *, where: str, findings: list[dict[str, str]]) -> bytes:
    """`mask_container`, raising Unmaskable (one line: why) where that answers None."""
    found: list[dict[str, str]] = []
    masked = _mask(data, where, found, _Budget(MAX_UNPACKED_BYTES), 0)
    findings.extend(found)  # all or nothing: a container refused halfway reports no findings of what is not stored
    return masked


def container_kind(data: bytes) -> str | None:
    """ "zip", "gzip", "zstd" or "zlib" when `data` starts as one does, else None."""
    head = data[:4]
    if head in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == _ZSTD_MAGIC:
        return "zstd"
    # zlib: deflate with a window of at most 32 KiB, no preset dictionary, and the header's check bits right.
    zlib_header = len(data) >= 6 and data[0] & 0x0F == 8 and data[0] >> 4 <= 7 and not data[1] & 0x20
    if zlib_header and (data[0] << 8 | data[1]) % 31 == 0:
        return "zlib"
    return None


def _mask(data: bytes, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> bytes:
    kind = container_kind(data)
    if kind is not None and depth >= MAX_NESTING:
        raise Unmaskable(f"containers nest more than {MAX_NESTING} deep (at {where or 'the top'})")
    if kind == "zip":
        return _mask_zip(data, where, findings, budget, depth)
    if kind == "gzip":
        inner = _gunzip(data, budget, where)
        masked = _mask(inner, where, findings, budget, depth + 1)
        return data if masked is inner else gzip.compress(masked, compresslevel=6, mtime=0)
    if kind == "zstd":
        inner = _unzstd(memoryview(data), budget.cap(), where, declared=None)
        budget.take(len(inner), where or "the zstd stream")
        masked = _mask(inner, where, findings, budget, depth + 1)
        return data if masked is inner else _zstd_compress(masked)
    if kind == "zlib":
        # Two bytes are all a zlib stream's header is, and one binary in a few hundred starts with a pair that passes:
        # a stream that does not read to its end is taken for the bytes it is, unless what it unpacked to so far is
        # found secret. (gzip's magic and header are unambiguous: a gzip stream cut short is refused.)
        stream = zlib.decompressobj()
        unpacked: bytes | None
        try:
            unpacked = stream.decompress(data, budget.cap() + 1)
        except zlib.error:
            unpacked = None  # two bytes that only looked like a zlib header: the data itself
        if unpacked is not None and len(unpacked) > budget.cap():
            raise Unmaskable(f"the zlib stream {where!r} unpacks past {budget.cap()} bytes")
        if unpacked is not None and stream.eof:
            budget.take(len(unpacked), where or "the zlib stream")
            masked = _mask(unpacked, where, findings, budget, depth + 1)
            return data if masked is unpacked else zlib.compress(masked) + stream.unused_data
        if unpacked and _holds_secret(unpacked):
            raise Unmaskable(f"the zlib stream {where!r} is cut short and what it holds is secret")
    return _mask_leaf(data, where, findings, budget, depth)


def _holds_secret(data: bytes) -> bool:
    """Whether the scan finds anything in `data` (what a stream cut short unpacked to before it stopped)."""
    found: list[dict[str, str]] = []
    _mask_leaf(data, "", found, _Budget(0), MAX_NESTING)
    return bool(found)


# --- leaves -------------------------------------------------------------------------------------------------------


def _mask_leaf(data: bytes, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> bytes:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    found: list[dict[str, str]] = []
    if text is None:
        masked_bytes = scanning.mask_binary(data, where, found)
        findings.extend(found)
        return masked_bytes if found else data
    stripped = text.lstrip("\ufeff \t\r\n")[:1]
    if stripped in ("{", "["):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict | list):
            masked_value = mask_nested_json(value, where, found, budget=budget, depth=depth)
            masked_value = scanning.mask_json(masked_value, where, found)
            findings.extend(found)
            return json.dumps(masked_value, ensure_ascii=False).encode("utf-8") if found else data
    masked = _mask_text(text, where, found, budget, depth)
    findings.extend(found)
    return masked.encode("utf-8") if found else data


def _mask_text(text: str, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> str:
    text = _mask_encoded_containers(text, where, findings, budget, depth)
    return scanning.mask_text(text, where, findings)


def _mask_encoded_containers(text: str, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> str:
    """Base64 runs that decode to a container (a zip, gzip, zstd or zlib stream), opened, masked and encoded again.
    Text inside base64 is `scanning.mask_text`'s: it decodes runs that are text, not binary containers."""
    parts: list[str] = []
    last = 0
    for m in _B64_CONTAINER.finditer(text):
        run = m.group()
        urlsafe = "-" in run or "_" in run
        try:
            raw = base64.b64decode(run + "=" * (-len(run) % 4), altchars=b"-_" if urlsafe else None, validate=True)
        except (binascii.Error, ValueError):
            continue
        if container_kind(raw) is None:
            continue
        masked = _mask(raw, f"{where}(decoded)", findings, budget, depth + 1)
        if masked is raw:
            continue
        encoded = base64.b64encode(masked, altchars=b"-_" if urlsafe else None).decode("ascii")
        parts += [text[last : m.start()], encoded if run.endswith("=") else encoded.rstrip("=")]
        last = m.end()
    return "".join([*parts, text[last:]]) if parts else text


def mask_nested_json(
    value: Any,
    where: str,
    findings: list[dict[str, str]],
    *,
    budget: _Budget | None = None,
    depth: int = 0,
) -> Any:
    """`value` with every JSON string that holds JSON (an object or an array: a tool's arguments, a message kept as
    text) masked as JSON, and every string that holds a base64 container masked inside it; the same object when
    nothing was found. In the outer JSON such a value is escaped (`\\"password\\": \\"…\\"`), which the rules that
    read a key and its quoted value do not match; read as the JSON it is, they do."""
    budget = budget or _Budget(MAX_UNPACKED_BYTES)
    if depth >= MAX_NESTING or (depth == 0 and not _worth_walking(value)):
        return value
    if isinstance(value, str):
        return _mask_string(value, where, findings, budget, depth)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, child in value.items():
            masked = mask_nested_json(child, scanning.join(where, key), findings, budget=budget, depth=depth)
            changed |= masked is not child
            out[key] = masked
        return out if changed else value
    if isinstance(value, list):
        items = [
            mask_nested_json(child, scanning.join(where, i), findings, budget=budget, depth=depth)
            for i, child in enumerate(value)
        ]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _worth_walking(value: Any) -> bool:
    """Whether a string of `value` may hold what only a walk finds: a base64 container, or JSON inside a string that
    is itself JSON (escaped quotes in the string). A JSON string holding JSON with plain quotes needs no walk: the
    rules read it as the text it is (`scanning.mask_json`). One pass over all the strings at once, in C."""
    texts, _keys = scanning.strings_and_keys(value)  # keys too: a key holding a container is walked as well
    joined = "\n".join(texts)
    return '\\"' in joined or _B64_CONTAINER.search(joined) is not None


def _mask_string(text: str, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> str:
    if _B64_CONTAINER.search(text):
        found: list[dict[str, str]] = []
        decoded = _mask_encoded_containers(text, where, found, budget, depth)
        if found:
            findings.extend(found)
            text = decoded
    body = text.strip()
    if len(body) < _MIN_NESTED_JSON or (body[0], body[-1]) not in (("{", "}"), ("[", "]")) or '\\"' not in body:
        return text
    try:
        inner = json.loads(body)
    except (ValueError, RecursionError):
        return text
    if not isinstance(inner, dict | list):
        return text
    found = []
    masked = mask_nested_json(inner, f"{where}(json)", found, budget=budget, depth=depth + 1)
    masked = scanning.mask_json(masked, f"{where}(json)", found)
    if not found:
        return text
    findings.extend(found)
    return json.dumps(masked, ensure_ascii=False)


# --- streams ------------------------------------------------------------------------------------------------------


def _gunzip(data: bytes, budget: _Budget, where: str) -> bytes:
    """Members one after another, zero padding after the last: one linear pass (n17q_engine.inflate, issue 35)."""
    try:
        out = inflate(data, "gzip", max_bytes=budget.cap(), zero_padding=True)
    except InflateError as exc:
        if exc.kind == "bytes":
            raise Unmaskable(f"the gzip stream {where!r} unpacks past {budget.cap()} bytes") from None
        if exc.kind == "corrupt":
            raise Unmaskable(f"the gzip stream {where!r} is corrupt ({exc.detail})") from None
        raise Unmaskable(f"the gzip stream {where!r} {exc.message}") from None  # cut short, too many members
    budget.take(len(out), where or "the gzip stream")
    return out


def _unzstd(data: memoryview, cap: int, where: str, *, declared: int | None) -> bytes:
    try:
        out = zip_members.unzstd(data, cap)
    except zip_members.MemberError as exc:
        raise Unmaskable(f"the zstd data of {where!r} {exc}") from None
    if len(out) > cap:
        raise Unmaskable(f"the zstd data of {where!r} unpacks past {cap} bytes")
    if declared is not None and len(out) != declared:
        raise Unmaskable(f"{where!r} unpacks to {len(out)} bytes, not the {declared} its zip entry declares")
    return bytes(out)


def _zstd_compress(data: bytes) -> bytes:
    return bytes(zip_members.zstandard_module().ZstdCompressor(level=3).compress(data))


# --- zip ----------------------------------------------------------------------------------------------------------


@dataclass
class _Member:
    info: zipfile.ZipInfo
    raw: bytes  # the member's compressed bytes, as stored
    crc: int
    size: int


def _mask_zip(data: bytes, where: str, findings: list[dict[str, str]], budget: _Budget, depth: int) -> bytes:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error) as exc:
        raise Unmaskable(f"the zip {where!r} is truncated or corrupt ({exc or exc.__class__.__name__})") from None
    if len(infos) > MAX_MEMBERS:
        raise Unmaskable(f"the zip {where!r} has {len(infos)} members, more than {MAX_MEMBERS}")
    declared = 0
    for info in infos:
        if info.flag_bits & 0x1:
            raise Unmaskable(f"the zip member {info.filename!r} is encrypted: it cannot be scanned")
        if info.compress_type not in _KNOWN_METHODS:
            raise Unmaskable(
                f"the zip member {info.filename!r} uses compression method {info.compress_type}, which is not read "
                "here (stored, deflate and zstd are)"
            )
        if info.file_size > MAX_MEMBER_BYTES:
            raise Unmaskable(
                f"the zip member {info.filename!r} declares {info.file_size} bytes unpacked, more than the "
                f"{MAX_MEMBER_BYTES} a member may be"
            )
        declared += info.file_size
    budget.take(declared, f"the zip {where!r}" if where else "the zip")  # before anything is unpacked
    members: list[_Member] = []
    changed = False
    for info in infos:
        raw = _raw_member(data, info)
        if info.is_dir():
            members.append(_Member(info, raw, info.CRC, info.file_size))
            continue
        content = _read_member(zf, info, raw, where)
        place = f"{where}!{info.filename}"
        masked = _mask(content, place, findings, budget, depth + 1)
        if masked is content:
            members.append(_Member(info, raw, info.CRC, info.file_size))
            continue
        changed = True
        members.append(_Member(info, _compress(masked, info.compress_type), zlib.crc32(masked), len(masked)))
    return _write_zip(members, zf.comment) if changed else data


def _raw_member(data: bytes, info: zipfile.ZipInfo) -> bytes:
    try:
        return bytes(zip_members.raw_member(data, info))  # kept as it is when the member holds nothing
    except zip_members.MemberError as exc:
        raise Unmaskable(f"the zip member {info.filename!r} {exc}") from None


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, raw: bytes, where: str) -> bytes:
    name = f"{where}!{info.filename}" if where else info.filename
    if info.compress_type == ZIP_ZSTANDARD:
        out = _unzstd(memoryview(raw), info.file_size, name, declared=info.file_size)
    else:
        try:
            with zf.open(info) as src:  # stops at the declared size (checked above) and checks the CRC
                out = src.read(info.file_size + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError, struct.error) as exc:
            raise Unmaskable(f"the zip member {name!r} is corrupt ({exc or exc.__class__.__name__})") from None
    if len(out) != info.file_size:
        raise Unmaskable(f"the zip member {name!r} unpacks to {len(out)} bytes, not the {info.file_size} it declares")
    if zlib.crc32(out) != info.CRC:
        raise Unmaskable(f"the zip member {name!r} fails its CRC check (corrupt)")
    return out


def _compress(data: bytes, method: int) -> bytes:
    if method == ZIP_ZSTANDARD:
        return _zstd_compress(data)
    if method == ZIP_DEFLATED:
        deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        return deflate.compress(data) + deflate.flush()
    return data


def _write_zip(members: list[_Member], comment: bytes) -> bytes:
    """The zip of `members` in their order, written from the central directory's view of each (its name, time,
    attributes, method), without data descriptors or extra fields: nothing the masked member's new size and CRC
    would contradict. Refused past what a zip without zip64 records can hold (4 GiB, 65,535 members)."""
    out = io.BytesIO()
    central = io.BytesIO()
    for m in members:
        info = m.info
        name = info.filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", errors="strict")
        flags = info.flag_bits & 0x800  # only "the name is UTF-8": no data descriptor, nothing encrypted
        offset = out.tell()
        if max(offset, len(m.raw), m.size) >= 0xFFFFFFFF:
            raise Unmaskable("the rebuilt zip would need zip64 records")
        dos_time = info.date_time[3] << 11 | info.date_time[4] << 5 | info.date_time[5] // 2
        dos_date = (info.date_time[0] - 1980) << 9 | info.date_time[1] << 5 | info.date_time[2]
        version = max(info.extract_version, 63 if info.compress_type == ZIP_ZSTANDARD else 20)
        out.write(
            _LOCAL.pack(
                b"PK\x03\x04",
                version,
                flags,
                info.compress_type,
                dos_time,
                dos_date,
                m.crc,
                len(m.raw),
                m.size,
                len(name),
                0,
            )
        )
        out.write(name)
        out.write(m.raw)
        central.write(
            _CENTRAL.pack(
                b"PK\x01\x02",
                info.create_version | info.create_system << 8,
                version,
                flags,
                info.compress_type,
                dos_time,
                dos_date,
                m.crc,
                len(m.raw),
                m.size,
                len(name),
                0,
                len(info.comment),
                0,
                info.internal_attr,
                info.external_attr,
                offset,
            )
        )
        central.write(name)
        central.write(info.comment)
    directory = central.getvalue()
    start = out.tell()
    if start + len(directory) >= 0xFFFFFFFF:
        raise Unmaskable("the rebuilt zip would need zip64 records")
    out.write(directory)
    out.write(_END.pack(b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), start, len(comment)))
    out.write(comment)
    return out.getvalue()
