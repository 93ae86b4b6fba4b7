"""What a file that is no run, no OTLP trace and no Inspect log looks like, in a few words (issue 17, point 3).

An import door that refuses a file names what it was given, by its content, never by its name: "a HAR file
(3 entries): import it with `capture`" tells the user which door to take; "manifest.json is missing from the
bundle" for an Inspect `.eval` told them nothing. `describe` reads only the head of the bytes it is given (and
parses JSON whole only when it is small), so it is cheap on any input and never raises.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from typing import Any

# JSON up to this size is parsed to name its shape; a larger document is named from its first bytes.
PARSE_LIMIT = 8 * 1024 * 1024
HEAD = 64 * 1024
MAX_NAMES = 6

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\x7fELF", "an ELF executable"),
    (b"BZh", "a bzip2 file"),
    (b"\xfd7zXZ\x00", "an xz file"),
    (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"Rar!\x1a\x07", "a RAR archive"),
)
_CAPTURE_HINT = "import it with `capture`"


def describe(data: bytes) -> str:
    """One short phrase naming what `data` looks like ("a gzip file (a JSON document inside)", "text (3 lines)")."""
    try:
        return _describe(data)
    except Exception:  # a describer must never be the reason an error message is lost
        return f"binary data ({len(data)} bytes)"


def _describe(data: bytes) -> str:
    if not data:
        return "an empty file"
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return what
    if data[:2] == b"PK":
        return _zip(data)
    if data[:2] == b"\x1f\x8b":
        return _gzip(data)
    if len(data) > 262 and data[257:262] == b"ustar":
        return "a tar archive without manifest.json (uncompressed: a bundle is a folder, .zip or .tar.gz)"
    text = _text(data)
    if text is None:
        return f"binary data ({len(data)} bytes, starting {data[:8].hex(' ')})"
    return _textual(text, data)


def _zip(data: bytes) -> str:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, NotImplementedError):
        return "a damaged or truncated zip archive"
    if not names:
        return "an empty zip archive"
    shown = ", ".join(names[:MAX_NAMES]) + (f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else "")
    return f"a zip archive without manifest.json (members: {shown})"


def _gzip(data: bytes) -> str:
    try:
        inner = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(data[:HEAD], 4096)
    except zlib.error:
        return "a damaged gzip file"
    if len(inner) > 262 and inner[257:262] == b"ustar":
        return "a gzip-compressed tar archive without manifest.json"
    if not inner:
        return "a gzip file"
    what = _describe(inner) if not inner.startswith(b"\x1f\x8b") else "another gzip file"
    # The head of what is inside: JSON cut off there reads as "text"; say only what kind of thing it is.
    if inner.lstrip()[:1] in (b"{", b"["):
        what = "JSON"
    return f"a gzip file ({what} inside)"


def _text(data: bytes) -> str | None:
    head = data[:HEAD]
    for cut in range(4):  # the head may end inside a multi-byte character
        try:
            text = head[: len(head) - cut].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    else:
        return None
    controls = sum(1 for c in text if ord(c) < 32 and c not in "\t\r\n\f")
    return None if controls > max(2, len(text) // 100) else text


def _textual(text: str, data: bytes) -> str:
    size = len(data)
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped[:1] in ("{", "["):
        return _json(stripped, data)
    lowered = stripped[:200].lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return "an HTML page"
    if lowered.startswith("<?xml"):
        return "an XML document"
    if re.search(r"^interactions:\s*$", text, re.MULTILINE) and re.search(r"^version:\s*\d", text, re.MULTILINE):
        return f"a VCR.py cassette (YAML): {_CAPTURE_HINT}"
    lines = text.count("\n") + (not text.endswith("\n"))
    return f"text ({lines} line{'s' if lines != 1 else ''}{'' if size <= HEAD else ' in its first 64 KiB'})"


def _json(text: str, data: bytes) -> str:
    size = len(data)
    value: Any
    if size <= PARSE_LIMIT:
        try:
            value = json.loads(data)
        except ValueError:
            return _json_lines(text) or "text that starts like JSON but does not parse"
    else:
        # Only the head is here: name the document from the keys that open it.
        keys = re.findall(r'^\s*[{,]?\s*"([^"\\]{1,60})"\s*:', text[:4096], re.MULTILINE)
        if text.startswith("{") and keys:
            return _keys_phrase(keys, size)
        return f"a JSON document ({size} bytes)"
    if isinstance(value, dict):
        return _json_object(value)
    if isinstance(value, list):
        return f"a JSON array of {len(value)} item{'s' if len(value) != 1 else ''}"
    return f"a JSON {type(value).__name__} value"


def _json_lines(text: str) -> str | None:
    first = text.split("\n", 1)[0]
    try:
        value = json.loads(first)
    except ValueError:
        return None
    if isinstance(value, dict) and {"seq", "kind", "id"} <= set(value):
        return "a bundle's events.jsonl alone: import the whole bundle (folder, .zip or .tar.gz)"
    return "JSON lines" + (f" (first keys: {', '.join(list(value)[:MAX_NAMES])})" if isinstance(value, dict) else "")


def _json_object(value: dict[str, Any]) -> str:
    log = value.get("log")
    if isinstance(log, dict) and isinstance(log.get("entries"), list):
        n = len(log["entries"])
        return f"a HAR file ({n} entr{'ies' if n != 1 else 'y'}): {_CAPTURE_HINT}"
    if isinstance(value.get("interactions"), list) and "version" in value:
        n = len(value["interactions"])
        return f"a VCR.py cassette ({n} interaction{'s' if n != 1 else ''}): {_CAPTURE_HINT}"
    if {"request", "response"} <= set(value) and ("tool" in value or "scenario" in value):
        return f"an N17Q capture (n17q.capture/1): {_CAPTURE_HINT}"
    if value.get("format") == "n17q.run-bundle/1":
        return "a run bundle's manifest.json alone: import the whole bundle (folder, .zip or .tar.gz)"
    if not value:
        return "an empty JSON object"
    return _keys_phrase(list(value), None)


def _keys_phrase(keys: list[str], size: int | None) -> str:
    shown = ", ".join(k.replace("\n", " ")[:40] for k in keys[:MAX_NAMES])
    more = f" and {len(keys) - MAX_NAMES} more" if len(keys) > MAX_NAMES else ""
    return f"a JSON document with keys {shown}{more}"
