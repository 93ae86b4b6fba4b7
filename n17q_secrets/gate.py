"""The storage gate (issue 32): the one scan-and-mask step every byte the product persists passes first.

DESIGN §7 promises that nothing detected is ever written in the clear. Kept door by door, every door added later
found a way around it; kept here, it is structural: what the gate returns is a `Gated` value (`GatedBytes`,
`GatedText`, `GatedJSON`, `GatedFile`), which only this module can construct, and the storage helpers accept
nothing else (`console.blob_store.blob_put`; the model fields of `console.gated_fields` run the gate themselves on
any other value; `scripts/check_storage_gate.py` fails CI on any other write path).

- `gate_text`, `gate_json`, `gate_bytes`: scan, mask what is found (`[masked:<rule>]` in text, `*` byte for byte in
  a binary), record the findings in the caller's list, return the Gated value.
- `already_masked(value, by=...)`: a value an earlier pass of the same door provably scanned (an event line checked
  ahead by the importer's scan, a blob file `runs.secret_scan.mask_blobs` scanned) is wrapped without a second scan,
  which the 100,000-event import could not afford. Every call names its pass in `by`, and the storage-gate check
  accepts it only in the modules it allowlists (`ALREADY_MASKED_CALLERS` there), so each use stays reviewable.

Django-free (an import contract): the importer's child process and the engine's neighbours can use it.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from n17q_engine.formats import ConversionError
from n17q_engine.formats.otlp import otlp_strings
from n17q_engine.formats.otlp.reader import ITEM, LIST, MEMBER, SPAN, OtlpJsonReader

from . import containers, field_classes, scanning

Findings = list[dict[str, str]]

# Only this module holds it: a Gated value built anywhere else fails at construction (and the CI check names the
# line before it ever runs).
_GATE = object()

PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf"})


class NotStorable(ValueError):
    """A value the gate cannot make safe to store (a container it cannot rebuild masked): keep it out, say so."""


def _check(token: object, kind: str) -> None:
    if token is not _GATE:
        raise TypeError(f"a {kind} is made by n17q_secrets.gate alone (gate_* or already_masked), never directly")


class GatedBytes(bytes):
    """Bytes that passed the gate: what the blob store accepts."""

    __slots__ = ()

    def __new__(cls, data: bytes, token: object = None) -> GatedBytes:
        _check(token, "GatedBytes")
        return super().__new__(cls, data)


class GatedText(str):
    """Text that passed the gate: what a gated column and a raw-SQL append of one accept as is."""

    __slots__ = ()

    def __new__(cls, text: str, token: object = None) -> GatedText:
        _check(token, "GatedText")
        return super().__new__(cls, text)


class GatedJSON:
    """A JSON value that passed the gate (`value`: the masked dict, list or scalar)."""

    __slots__ = ("value",)

    def __init__(self, value: Any, token: object = None) -> None:
        _check(token, "GatedJSON")
        self.value = value

    def __repr__(self) -> str:
        return f"GatedJSON({self.value!r})"


class GatedFile:
    """A file whose bytes passed the gate (a blob a door scanned on disk): the blob store streams it from `path`
    rather than holding up to MAX_SCANNED_BLOB_BYTES in memory for each blob of an import."""

    __slots__ = ("path",)

    def __init__(self, path: Path, token: object = None) -> None:
        _check(token, "GatedFile")
        self.path = path

    def __repr__(self) -> str:
        return f"GatedFile({str(self.path)!r})"


Gated = GatedBytes | GatedText | GatedJSON | GatedFile


# --- the gate -----------------------------------------------------------------------------------------------------


def gate_text(text: str, *, where: str, findings: Findings) -> GatedText:
    if isinstance(text, GatedText):
        return text
    return GatedText(scanning.mask_text(text, where, findings), _GATE)


def gate_json(value: Any, *, where: str, findings: Findings, known: dict[str, str] | None = None) -> GatedJSON:
    if isinstance(value, GatedJSON):
        return value
    return GatedJSON(scanning.mask_json(value, where, findings, known=known), _GATE)


def gate_bytes(data: bytes, *, media_type: str, where: str, findings: Findings) -> GatedBytes:
    """`data` masked for storage as `media_type`. NotStorable when it is a container the gate cannot rebuild
    masked: the caller keeps it out (a kept original: its keyed digest, and the page says it was not kept)."""
    if isinstance(data, GatedBytes):
        return data
    return GatedBytes(mask_bytes(data, media_type=media_type, where=where, findings=findings), _GATE)


def mask_bytes(data: bytes, *, media_type: str, where: str, findings: Findings) -> bytes:
    """What `gate_bytes` stores, as plain bytes, for a scan that must digest the masked bytes before they are stored
    (a run bundle's blobs are renamed to the digest of their masked bytes: runs.secret_scan.mask_blobs). A protobuf
    (and a `+zlib` body) is masked byte for byte by its media type; anything else is opened where it is a container
    (`containers`: zip with deflate or zstd members, gzip, zlib, zstd, base64 runs, JSON strings holding JSON), each
    member masked and the container rebuilt the same way; a text or a binary is masked as it is. NotStorable (one
    line: why) when it cannot be rebuilt masked."""
    base = media_type.split(";", 1)[0].strip().lower()
    if base in PROTOBUF_TYPES or base.endswith("+zlib"):
        return _mask_by_media_type(data, media_type, where, findings)
    try:
        return containers.mask_container_or_raise(data, where=where, findings=findings)
    except containers.Unmaskable as exc:
        raise NotStorable(str(exc)) from None


def mask_otlp_json(data: bytes, *, where: str, findings: Findings) -> bytes:
    """What `mask_bytes` stores for an OTLP/JSON export (an OTLP file's kept original), masked a piece at a time:
    each span, and each other member of the export, its resourceSpans and its scopeSpans, is read alone by the
    engine's bounded reader (`n17q_engine.formats.otlp.reader`, the converter's) and masked as the JSON it is (JSON
    strings holding JSON and containers opened, then `scanning.mask_json`), where `mask_bytes` would build the whole
    document at once: 15 times its size for many small attributes (issue 35). A value found in one piece is masked
    in every piece, as one scan of the whole would. Only the pieces that held something are written again; the rest
    of the bytes stay as they were. Findings name the same paths the whole document's scan names. NotStorable (one
    line) when the reader refuses the export or a container inside it cannot be rebuilt masked."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return mask_bytes(data, media_type="application/json", where=where, findings=findings)
    skip = 1 if text.startswith("\ufeff") else 0
    body = text[skip:] if skip else text
    try:
        found, replaced, known = _mask_otlp_pieces(body, where, None)
        if known:  # what was found anywhere, masked everywhere
            found, replaced, _known = _mask_otlp_pieces(body, where, known)
    except ConversionError as exc:
        raise NotStorable(f"the OTLP JSON cannot be read a piece at a time: {exc}") from None
    except containers.Unmaskable as exc:
        raise NotStorable(str(exc)) from None
    findings.extend(found)
    if not replaced:
        return data
    parts = [text[:skip]]
    last = 0
    for start, end, piece in replaced:
        parts += [body[last:start], piece]
        last = end
    parts.append(body[last:])
    return "".join(parts).encode("utf-8")


# Spans of one list scanned together, up to this many characters of JSON: one pass of the rules over many spans, as
# the whole document's scan makes (one scan per span took 1.7 times as long on an exporter's file).
_SPAN_BATCH_CHARS = 256 * 1024


def _mask_otlp_pieces(
    body: str, where: str, known: dict[str, str] | None
) -> tuple[Findings, list[tuple[int, int, str]], dict[str, str]]:
    """One pass over the export's pieces: the findings, the pieces written again (start, end, text), and the values
    the rules found (`{value: rule}`)."""
    reader = OtlpJsonReader(body)
    budget = containers._Budget(containers.MAX_UNPACKED_BYTES)  # one budget for the whole export, as one scan has
    list_keys = ["", "", ""]  # the skeleton list each open level's object named
    found: Findings = []
    replaced: list[tuple[int, int, str]] = []
    hits: dict[str, str] = {}
    batch: list[tuple[int, int, Any]] = []  # spans of one list: (start, end, value)
    batch_chars = 0
    batch_first = 0  # the first one's index in its list
    batch_path = ""  # the list's path

    def scan(piece: Any, path: str) -> tuple[Any, Findings]:
        piece_found: Findings = []
        nested = containers.mask_nested_json(piece, path, piece_found, budget=budget)
        masked = scanning.mask_json(nested, path, piece_found, known=known)
        if piece_found and isinstance(nested, dict | list):
            strings, _keys = scanning.strings_and_keys(nested)
            for rule, value_found in scanning.scan_text("\n".join(strings)):
                hits.setdefault(value_found, rule)
        return masked, piece_found

    def flush() -> None:
        nonlocal batch_chars
        if not batch:
            return
        masked, batch_found = scan([value for _start, _end, value in batch], batch_path)
        if batch_found:
            prefix = batch_path + "["
            for finding in batch_found:  # the batch's index -> the span's index in its list
                head, _bracket, rest = finding["path"][len(prefix) :].partition("]")
                if finding["path"].startswith(prefix) and head.isdigit():
                    finding["path"] = f"{prefix}{int(head) + batch_first}]{rest}"
            found.extend(batch_found)
            for (start, end, value), after in zip(batch, masked, strict=True):
                text = json.dumps(after, ensure_ascii=False)
                if text != json.dumps(value, ensure_ascii=False):
                    replaced.append((start, end, text))
        batch.clear()
        batch_chars = 0

    for kind, level, key, value in reader.events():
        if kind == SPAN:
            if not batch:
                batch_first = reader.index[level]
                batch_path = _skeleton_path(where, level - 1, list_keys, reader.index)
                batch_path = scanning.join(batch_path, list_keys[level - 1])
            batch.append((reader.start, reader.end, value))
            batch_chars += reader.end - reader.start
            if batch_chars >= _SPAN_BATCH_CHARS:
                flush()
            continue
        flush()
        if kind == LIST:
            list_keys[level] = key or ""
        elif kind in (MEMBER, ITEM):
            path = _skeleton_path(where, level, list_keys, reader.index)
            masked, piece_found = scan({key: value} if kind == MEMBER else value, path)
            if piece_found:
                found.extend(piece_found)
                text = json.dumps(masked, ensure_ascii=False)
                replaced.append((reader.start, reader.end, text[1:-1] if kind == MEMBER else text))
    flush()
    replaced.sort()
    return found, replaced, hits


def _skeleton_path(where: str, level: int, list_keys: list[str], index: list[int]) -> str:
    """The path of the skeleton object (or item) at `level`, as the whole document's scan names it."""
    path = where
    for i in range(level):
        path = scanning.join(scanning.join(path, list_keys[i]), index[i + 1])
    return path


def _mask_by_media_type(raw: bytes, media_type: str, where: str, findings: Findings) -> bytes:
    base, _, compression = media_type.split(";", 1)[0].strip().lower().partition("+zlib")
    if _ == "+zlib" and not compression:
        # A body kept compressed (the OTLP receiver's buffered requests): opened, masked as what it holds, and
        # compressed again only when something was masked. Bytes that are not zlib are masked as they are.
        try:
            inner = zlib.decompress(raw)
        except zlib.error:
            return scanning.mask_binary(raw, where, findings)
        before = len(findings)
        masked = _mask_by_media_type(inner, base, where, findings)
        return zlib.compress(masked) if len(findings) > before else raw
    if media_type.split(";", 1)[0].strip().lower() in PROTOBUF_TYPES:
        # Masked byte for byte and never past a value: the body still parses, and the byte ranges a converted run's
        # events name in it (an OTLP original) still hold their spans. An OTLP request is scanned by its texts.
        pairs: list[tuple[str, str]] = []
        texts = otlp_strings(raw, pairs)
        if texts is None:
            return scanning.mask_binary(raw, where, findings, strings=[])
        strings, complete = texts
        return scanning.mask_binary(
            raw,
            where,
            findings,
            strings=strings,
            printable_runs=not complete,
            named=field_classes.secret_pair_values(pairs),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return scanning.mask_binary(raw, where, findings)
    before = len(findings)
    if "json" in media_type.lower() or text.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict | list):
            masked_value = scanning.mask_json(value, where, findings)
            return json.dumps(masked_value, ensure_ascii=False).encode("utf-8") if len(findings) > before else raw
    masked_text = scanning.mask_text(text, where, findings)
    return masked_text.encode("utf-8") if len(findings) > before else raw


# --- values an earlier pass of the same door scanned ----------------------------------------------------------------


def already_masked(value: Any, *, by: str) -> Any:
    """`value` wrapped as Gated without a second scan, because `by` (the pass, named as `module.function`) scanned
    and masked it on its way here. Only for the callers the storage-gate check allowlists; `by` is required so a
    reader sees which scan each use relies on."""
    if not by:
        raise ValueError("already_masked needs `by`: the scan that masked the value")
    if type(value) is str:
        # The import's path, once per event: str.__new__ skips GatedText's check, which this module need not pass.
        return _new_text(GatedText, value)
    if isinstance(value, GatedBytes | GatedText | GatedJSON | GatedFile):
        return value
    if isinstance(value, str):
        return GatedText(value, _GATE)
    if isinstance(value, bytes | bytearray | memoryview):
        return GatedBytes(bytes(value), _GATE)
    if isinstance(value, Path):
        return GatedFile(value, _GATE)
    return GatedJSON(value, _GATE)


def already_masked_texts(values: list[str], *, by: str) -> list[GatedText]:
    """`already_masked` for a batch of texts (an import's event lines), one call a batch."""
    if not by:
        raise ValueError("already_masked_texts needs `by`: the scan that masked the values")
    return [v if isinstance(v, GatedText) else _new_text(GatedText, v) for v in values]


_new_text = str.__new__
