"""Reading and validating a run bundle (`n17q.run-bundle/1`), one line at a time.

Nothing here stores anything: the reader yields validated events so the caller can write them in
batches inside one transaction, and every refusal is a `BundleError` naming the file, line and field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, TypeVar

from . import compatibility
from . import vocabulary as v
from .canonical import is_digest
from .identifiers import INT32_MAX, INT64_MAX, INT64_MIN, id_problem, run_id_problem

# A line longer than this is refused rather than parsed: no event needs it, and it bounds memory.
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_EVENTS = 2_000_000
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
# JSON nested deeper than this is refused: no event needs it, and everything that reads an event back
# (the reference walk, the database's JSON encoder) recurses once per level.
MAX_JSON_DEPTH = 100
# Identifiers and the other short strings the database keeps in columns of this width (n17q_engine.identifiers).
MAX_ID_CHARS = 200
# A BIGINT column holds `seq`; every integer field of the vocabulary is kept to 64 bits too.
_INT64 = (INT64_MIN, INT64_MAX)
T = TypeVar("T")
# Only the vocabulary's numeric fields are bounded: a field of type "any" holds any JSON value (kept as JSON, never
# in an integer column), at the top level as deep inside.
_BOUNDED_TYPES = frozenset({v.INT, v.NUMBER})
MAX_MESSAGE_CHARS = 1000
# `run.title` (DESIGN §10): one line a person reads as the run's name, so bounded and printable.
MAX_TITLE_CHARS = 300

# What would break a refusal over lines (everything str.splitlines splits on), make it unprintable, or
# unencodable as UTF-8 (lone surrogates): such characters in a name or value are shown escaped.
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _one_line(text: str) -> str:
    text = _NOT_ONE_LINE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), text)
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "\u2026"


class BundleError(ValueError):
    """A bundle was refused. `str()` is one line a person can act on.

    Field names and messages can quote the bundle (keys, values, archive member names), so the line is
    made printable here, once: control and line-separator characters are escaped, and it is capped.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None):
        self.file, self.line, self.field, self.reason = file, line, field, message
        where = []
        if file:
            where.append(file if line is None else f"{file} line {line}")
        if field:
            where.append("field " + (field if len(field) <= MAX_ID_CHARS else field[:MAX_ID_CHARS] + "\u2026"))
        super().__init__(_one_line((": ".join([", ".join(where), message])) if where else message))


class _NotJSON(ValueError):
    """A value json.loads would accept but JSON (RFC 8259) and the database do not."""


def _no_constants(name: str) -> Any:
    raise _NotJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJSON(f"the number {text[:40]} is too large for a double")
    return value


# One decoder for every line: json.loads with hooks would build a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_no_constants, parse_float=_finite_float)

# Escapes that decode to characters no database text column holds: NUL, and UTF-16 surrogates (a lone
# one cannot be encoded as UTF-8). A raw NUL or surrogate cannot reach the decoder (strict JSON and
# strict UTF-8 refuse them), so only a line with such an escape needs its strings checked.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def _check_decoded(value: Any, err: Any) -> None:
    """Refuse values nested deeper than MAX_JSON_DEPTH and strings holding NUL or a lone surrogate."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                raise err(where or None, "holds a NUL character or a lone UTF-16 surrogate, which is not text")
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > MAX_JSON_DEPTH:
            raise err(where or None, f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(item, dict):
            for key, sub in item.items():
                path = f"{where}.{key}" if where else key
                if _UNSTORABLE.search(key):
                    raise err(path, "the key holds a NUL character or a lone UTF-16 surrogate, which is not text")
                stack.append((sub, depth + 1, path))
        else:
            stack.extend((sub, depth + 1, f"{where}[{i}]") for i, sub in enumerate(item))


def load_json(text: str, err: Any, *, check: bool = True) -> Any:
    """json.loads for untrusted text: every failure is `err(field, message)`, never another exception.

    Also refused: NaN and infinities, nesting past MAX_JSON_DEPTH, NUL and lone surrogates. `check=False`
    skips the walk over the decoded value when the text shows it cannot hold any of those.
    """
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError:
        raise
    except _NotJSON as exc:
        raise err(None, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise err(None, f"not valid JSON (nested deeper than {MAX_JSON_DEPTH} levels)") from None
    except ValueError as exc:  # an integer past Python's int/str digit limit
        raise err(None, f"not valid JSON ({str(exc).split(':')[0]})") from None
    if check or _SUSPECT_ESCAPE.search(text) or text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        _check_decoded(value, err)
    return value


@dataclass(frozen=True, slots=True)
class BlobEntry:
    digest: str
    media_type: str
    size: int
    role: str
    retention: str
    # Listed without bytes because the console's retention sweep removed them (`blobs.<digest>.expired`, an object:
    # the deletion record as the console wrote it). Only this console's own reconstructions write it, and the
    # importer accepts it only for a digest the console holds a deletion record for (docs/retention.md).
    expired: bool = False


@dataclass(frozen=True, slots=True)
class Manifest:
    run: dict[str, Any]
    blobs: dict[str, BlobEntry]


def parse_iso(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError("not a string")
    parsed = datetime.fromisoformat(value)  # Python 3.11 reads a trailing "Z" itself
    if parsed.tzinfo is None:
        raise ValueError("no timezone")
    if parsed.year in (1, 9999):
        try:
            # Stored as UTC: a time whose UTC form leaves years 1-9999 (0001-01-01T00:00+01:00) cannot be.
            parsed.astimezone(UTC)
        except OverflowError:
            raise ValueError("out of range") from None
    return parsed


# JSON decodes to exactly these types, so `type(value) in ...` is an exact test (and keeps bool out of int).
_PYTYPES: dict[str, tuple[type, ...] | None] = {
    v.ANY: None,
    v.STR: (str,),
    v.INT: (int,),
    v.NUMBER: (int, float),
    v.BOOL: (bool,),
    v.LIST: (list,),
    v.DICT: (dict,),
}


def _type_ok(value: Any, type_: str) -> bool:
    allowed = _PYTYPES[type_]
    return allowed is None or type(value) in allowed


def check_field(value: Any, spec: v.Field, *, name: str, err: Any) -> None:
    if value is None:
        if not spec.nullable:
            raise err(name, "must not be null")
        return
    if not _type_ok(value, spec.type):
        raise err(name, f"must be {spec.type}, got {type(value).__name__}")
    if spec.enum is not None and value not in spec.enum:  # noqa: SIM102 - the prefix test reads better apart
        if not any(isinstance(value, str) and value.startswith(p) and len(value) > len(p) for p in spec.prefixes):
            allowed = " | ".join(spec.enum + tuple(p + "<name>" for p in spec.prefixes))
            raise err(name, f"{value!r} is not one of {allowed}")
    if spec.items is not None:
        for i, item in enumerate(value):
            if not _type_ok(item, spec.items):
                raise err(f"{name}[{i}]", f"must be {spec.items}, got {type(item).__name__}")


def is_run_id(value: Any) -> bool:
    """Whether `value` can name a run, a harness's or a replay's (docs/identifiers.md)."""
    return run_id_problem(value) is None


# What a title cannot hold: control characters (line breaks and tabs included), line and paragraph separators,
# and the bidirectional embeddings, overrides and isolates that make text read other than it is stored.
_NOT_A_TITLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def title_problem(value: Any) -> str | None:
    """Why `value` cannot be a run's title (DESIGN §10), or None when it can. Surrounding spaces are allowed (the
    title is kept stripped) and an empty title is no title: the run is named by its id."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if len(value.strip()) > MAX_TITLE_CHARS:
        return f"must be at most {MAX_TITLE_CHARS} characters"
    bad = _NOT_A_TITLE.search(value)
    if bad is not None:
        return f"must be one line of printable text (holds U+{ord(bad.group()):04X})"
    return None


def run_title(run: dict[str, Any]) -> str:
    """The title of a validated manifest's `run`, stripped; "" when it has none."""
    title = run.get("title")
    return title.strip() if isinstance(title, str) else ""


def parse_manifest(raw: bytes, *, file: str = "manifest.json") -> Manifest:
    def err(field: str | None, message: str) -> BundleError:
        return BundleError(message, file=file, field=field)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise err(None, f"invalid UTF-8 at byte {exc.start}") from None
    try:
        data = load_json(text, err)
    except json.JSONDecodeError as exc:
        raise err(None, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, dict):
        raise err(None, "must be a JSON object")
    fmt = data.get("format")
    if fmt != v.BUNDLE_FORMAT:
        raise err("format", f"unknown format {fmt!r}; this console reads {v.BUNDLE_FORMAT}")
    run = data.get("run")
    if not isinstance(run, dict):
        raise err("run", "must be an object")
    validate_run(run, err)
    blobs_raw = data.get("blobs", {})
    if not isinstance(blobs_raw, dict):
        raise err("blobs", "must be an object keyed by digest")
    blobs: dict[str, BlobEntry] = {}
    for digest, meta in blobs_raw.items():
        where = f"blobs.{digest}"
        if not is_digest(digest):
            raise err(where, "key must be sha256:<64 lowercase hex>")
        if not isinstance(meta, dict):
            raise err(where, "must be an object")
        size = meta.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise err(f"{where}.size", "must be a non-negative integer")
        for key, longest in (("media_type", MAX_ID_CHARS), ("role", MAX_ID_CHARS), ("retention", 100)):
            if not isinstance(meta.get(key), str):
                raise err(f"{where}.{key}", "must be a string")
            if len(meta[key]) > longest:
                raise err(f"{where}.{key}", f"must be at most {longest} characters")
        expired = meta.get("expired")
        if expired is not None and not isinstance(expired, dict):
            raise err(f"{where}.expired", "must be an object (the console's deletion record) or absent")
        blobs[digest] = BlobEntry(
            digest, meta["media_type"], size, meta["role"], meta["retention"], expired=expired is not None
        )
    return Manifest(run=run, blobs=blobs)


def validate_run(run: dict[str, Any], err: Any) -> None:
    def need(key: str, type_: type | tuple[type, ...], *, nullable: bool = False) -> Any:
        value = run.get(key)
        if value is None and nullable:
            return None
        if not isinstance(value, type_) or isinstance(value, bool):
            raise err(f"run.{key}", "is required" if key not in run else f"has the wrong type ({type(value).__name__})")
        return value

    def short(where: str, value: Any) -> None:
        # Kept in a column of MAX_ID_CHARS characters.
        if value is not None and len(value if isinstance(value, str) else str(value)) > MAX_ID_CHARS:
            raise err(where, f"must be at most {MAX_ID_CHARS} characters")

    run_id = need("id", str)
    problem = run_id_problem(run_id)
    if problem is not None:
        raise err("run.id", problem)
    task = need("task", dict)
    if not isinstance(task.get("id"), str):
        raise err("run.task.id", "must be a string")
    short("run.task.id", task["id"])
    if "revision" not in task:
        raise err("run.task.revision", "is required")
    short("run.task.revision", task["revision"])
    env = need("environment", str)
    if env not in v.ENVIRONMENTS:
        raise err("run.environment", f"{env!r} is not one of {' | '.join(v.ENVIRONMENTS)}")
    mode = need("mode", str)
    if mode not in v.MODES:
        raise err("run.mode", f"{mode!r} is not one of {' | '.join(v.MODES)}")
    scenario = need("scenario", dict, nullable=True)
    if scenario is not None and not isinstance(scenario.get("name"), str):
        raise err("run.scenario.name", "must be a string")
    if scenario is not None:
        short("run.scenario.name", scenario["name"])
        version = scenario.get("version")
        # Kept in a 32-bit column (runs.models Run.scenario_version); no scenario version is larger (package.py).
        if type(version) is int and not -(2**31) <= version <= INT32_MAX:
            raise err("run.scenario.version", f"must be at most {INT32_MAX}")
    model = need("model", dict)
    for key in ("name", "version"):
        if not isinstance(model.get(key), str):
            raise err(f"run.model.{key}", "must be a string")
        short(f"run.model.{key}", model[key])
    short("run.policy_revision", need("policy_revision", str))
    try:
        parse_iso(need("created_at", str))
    except ValueError:
        raise err("run.created_at", "must be an ISO-8601 time with a timezone") from None
    short("run.parent_run", need("parent_run", str, nullable=True))
    isolation = run.get("isolation")
    if isolation is not None and isolation not in v.ISOLATION_LEVELS:
        raise err("run.isolation", f"{isolation!r} is not one of {' | '.join(v.ISOLATION_LEVELS)}")
    title = run.get("title")
    problem = None if title is None else title_problem(title)
    if problem is not None:
        raise err("run.title", problem)
    rules = run.get("compatibility_rules")
    rules_problem = None if rules is None else compatibility.rules_problem(rules)
    if rules_problem is not None:
        raise err("run.compatibility_rules" + rules_problem[0], rules_problem[1])


def validate_event(obj: Any, *, line: int, file: str = "events.jsonl") -> dict[str, Any]:
    """Check one decoded event against the vocabulary and return it."""
    _validate_event(obj, line=line, file=file)
    return obj


_MISSING = object()
_OBJECT_ID_WHAT = {
    "attempt.started": "an attempt id",
    "workspace.created": "a workspace id",
    "artifact.created": "an artifact id",
}
# Per kind, each field with its spec, the Python types that pass it, whether those types are all its spec asks (no
# enumeration, no item type) and whether an integer in it is kept to 64 bits: looked up once, not per event.
_COMPILED = {
    kind: tuple(
        (
            name,
            spec,
            _PYTYPES[spec.type],
            spec.enum is None and spec.items is None,
            spec.type in _BOUNDED_TYPES,
        )
        for name, spec in fields.items()
    )
    for kind, fields in v.KINDS.items()
}


def _clock(at: dict[str, Any], clock: str, err: Any) -> datetime:
    try:
        return parse_iso(at.get(clock))
    except (TypeError, ValueError):
        raise err(f"at.{clock}", "must be an ISO-8601 time with a timezone") from None


def _validate_event(obj: Any, *, line: int, file: str) -> tuple[datetime, datetime]:
    """Check one decoded event; return its logical and wall times, parsed once for the caller too."""

    def err(field: str | None, message: str) -> BundleError:
        return BundleError(message, file=file, line=line, field=field)

    if not isinstance(obj, dict):
        raise err(None, "an event must be a JSON object")
    seq = obj.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise err("seq", "must be an integer")
    if not _INT64[0] <= seq <= _INT64[1]:
        raise err("seq", "must fit in 64 bits")
    event_id = obj.get("id")
    problem = id_problem(event_id, what="an event id")
    if problem is not None:
        raise err("id", problem)
    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise err("kind", "must be a string")
    spec = v.KINDS.get(kind)
    if spec is None:
        raise err("kind", f"unknown kind {kind!r}")
    at = obj.get("at")
    if not isinstance(at, dict):
        raise err("at", "must be an object {logical, wall}")
    logical = _clock(at, "logical", err)
    # Most harnesses write one text for both clocks: it is parsed once (the same text, the same time and verdict).
    wall_text = at.get("wall")
    wall = logical if type(wall_text) is str and wall_text == at["logical"] else _clock(at, "wall", err)
    if "attempt" not in obj:
        raise err("attempt", "is required (an attempt id or null)")
    attempt = obj["attempt"]
    if attempt is not None and not (isinstance(attempt, str) and attempt):
        raise err("attempt", "must be an attempt id or null")
    if kind == "attempt.started" and attempt is None:
        raise err("attempt", "attempt.started must name the attempt it starts")
    introduces = v.INTRODUCTIONS.get(kind)
    if introduces is not None and isinstance(obj.get(introduces), str):
        problem = id_problem(obj[introduces], what=_OBJECT_ID_WHAT[kind])
        if problem is not None:
            raise err(introduces, problem)
    for name, field_spec, allowed, plain, bounded in _COMPILED[kind]:
        value = obj.get(name, _MISSING)
        if value is _MISSING:
            if field_spec.required:
                raise err(name, f"is required for {kind}")
            continue
        # The common case in one test; anything unusual goes through the full check and its messages.
        if not (plain and (allowed is None or type(value) in allowed)):
            check_field(value, field_spec, name=name, err=err)
        if bounded and type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise err(name, "must fit in 64 bits")
    for name in v.BLOB_FIELDS.get(kind, ()):
        value = obj.get(name)
        if value is not None and not is_digest(value):
            raise err(name, "must be sha256:<64 lowercase hex> or null")
    for name in v.DIGEST_FIELDS.get(kind, ()):
        value = obj.get(name)
        if value is not None and not is_digest(value):
            raise err(name, "must be sha256:<64 lowercase hex> or null")
    for name in v.TIME_FIELDS.get(kind, ()):
        value = obj.get(name)
        if value is not None:
            try:
                parse_iso(value)
            except (TypeError, ValueError):
                raise err(name, "must be an ISO-8601 time with a timezone or null") from None
    if kind == "tool.result":
        for path, absence in obj["absent"].items():
            if absence not in v.ABSENCE_KINDS:
                raise err(f"absent.{path}", f"{absence!r} is not one of {' | '.join(v.ABSENCE_KINDS)}")
        freshness = obj.get("freshness")
        if freshness is not None and (
            not isinstance(freshness, dict) or freshness.get("state") not in v.FRESHNESS_STATES
        ):
            raise err("freshness.state", f"must be one of {' | '.join(v.FRESHNESS_STATES)}")
    if kind == "command.receipt" and obj["post_tree"] is None and obj["completion"] == "completed":
        # Only an unfinished command may leave its post-run tree unknown (DESIGN §10).
        raise err("post_tree", "must name the post-run tree when completion is completed (null only otherwise)")
    if kind == "workspace.created" and obj["derived_from"] is not None:
        derived = obj["derived_from"]
        if not isinstance(derived.get("workspace_id"), str):
            raise err("derived_from.workspace_id", "must be a workspace id")
        if derived.get("relation") not in v.DERIVATION_RELATIONS:
            raise err("derived_from.relation", f"must be one of {' | '.join(v.DERIVATION_RELATIONS)}")
        if not isinstance(derived.get("content_equal"), bool):
            raise err("derived_from.content_equal", "must be true or false")
    return logical, wall


def _line_error(file: str, line: int, field: str | None, message: str) -> BundleError:
    return BundleError(message, file=file, line=line, field=field)


def iter_event_lines(stream: BinaryIO, *, file: str = "events.jsonl") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, validated event) from a byte stream, checking order and uniqueness."""
    for record in iter_event_records(stream, file=file):
        yield record.line, record.event


def iter_lines(stream: BinaryIO, *, chunk: int = 1 << 20, digest: Any = None) -> Iterator[bytes]:
    """The stream's lines (each with its newline, the last perhaps without), read a megabyte at a time.

    Reading in large blocks keeps the reader off the GIL's queue while the import's writer thread is
    busy; a line longer than MAX_LINE_BYTES is yielded cut at MAX_LINE_BYTES + 1 bytes and no newline,
    so the caller can refuse it without holding more than that. `digest` (a hashlib object) is fed every byte read.
    """
    pending = b""
    while True:
        block = stream.read(chunk)
        if digest is not None:
            digest.update(block)
        if not block:
            break
        data = pending + block if pending else block
        lines = data.split(b"\n")
        pending = lines.pop()
        for line in lines:
            if len(line) > MAX_LINE_BYTES:
                yield line[: MAX_LINE_BYTES + 1]
                return
            yield line + b"\n"
        if len(pending) > MAX_LINE_BYTES:
            yield pending[: MAX_LINE_BYTES + 1]
            return
    if pending:
        yield pending


def _checked_lines(stream: BinaryIO, digest: Any) -> Iterator[bytes]:
    """The lines of `iter_lines` for a stream another reader has checked (`iter_checked_records`): the same lines, in
    the same order, each without its line feed (its text is stripped anyway: no copy of each line to add it back). A
    line past MAX_LINE_BYTES is the other reader's to refuse, before this one's caller parses it; the bytes are fed to
    `digest` as they are read, all of them."""
    pending = b""
    while True:
        block = stream.read(1 << 20)
        if digest is not None:
            digest.update(block)
        if not block:
            break
        data = pending + block if pending else block
        lines = data.split(b"\n")
        pending = lines.pop()
        if len(data) <= MAX_LINE_BYTES:
            yield from lines  # no line of it can be too long
        else:
            for line in lines:
                if len(line) > MAX_LINE_BYTES:
                    yield line[: MAX_LINE_BYTES + 1]
                    return
                yield line
        if len(pending) > MAX_LINE_BYTES:
            yield pending[: MAX_LINE_BYTES + 1]
            return
    if pending:
        yield pending


def iter_checked_records(
    stream: BinaryIO, checked: Callable[[int], T], *, digest: Any = None
) -> Iterator[tuple[EventRecord, T]]:
    """The records of a stream whose every line another reader validates (`iter_event_records`, run ahead of this
    one: `runs.secret_scan.EventsAhead`), each with what `checked(line)` answers for it. A line is parsed only once
    `checked` has returned for it; `checked` raises for a line the other reader refused. The same decoding and clocks
    as `iter_event_records`, without repeating its checks. `digest` (a hashlib object) is fed every byte read."""
    line_no = 0
    decode = _DECODER.raw_decode
    last_text: Any = None
    last_time: Any = None
    for raw in _checked_lines(stream, digest):
        line_no += 1
        verdict = checked(line_no)
        text = raw.decode("utf-8").strip()
        # The other reader parsed this very line (its digest is compared with these bytes' at the end) and found one
        # JSON value and nothing after it: parsed as it is, without the decoder's whitespace passes around it.
        event = decode(text)[0]
        at = event["at"]
        logical_text = at["logical"]
        # Events of one moment (a span's proposal and its token charge) write the same time: parsed once, and the
        # same object, which the importer converts once for its column too.
        if logical_text != last_text:
            last_text, last_time = logical_text, parse_iso(logical_text)
        logical = last_time
        wall_text = at.get("wall")
        wall = logical if type(wall_text) is str and wall_text == logical_text else parse_iso(wall_text)
        yield EventRecord(line_no, event, text, logical, wall), verdict
    if line_no == 0:
        checked(1)  # an empty file: the other reader's refusal ("no events")


class EventRecord(NamedTuple):
    line: int
    event: dict[str, Any]
    text: str  # the line's JSON, as the harness wrote it: what the importer stores
    logical: datetime
    wall: datetime


def iter_event_records(stream: BinaryIO, *, file: str = "events.jsonl", digest: Any = None) -> Iterator[EventRecord]:
    """Yield each validated event of a byte stream with its text and parsed times.

    Keeping the text saves serializing every event a second time, and the times are parsed once.
    Memory stays bounded by one line plus a set of ids, whatever the file's size. `digest` (a hashlib object) is fed
    every byte read.
    """
    last_seq: int | None = None
    seen: set[str] = set()
    objects: dict[str, str] = {}
    line_no = 0
    for raw in iter_lines(stream, digest=digest):
        line_no += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise BundleError(f"line longer than {MAX_LINE_BYTES} bytes", file=file, line=line_no)
        if line_no > MAX_EVENTS:
            raise BundleError(f"more than {MAX_EVENTS} events", file=file, line=line_no)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BundleError(f"invalid UTF-8 at byte {exc.start} of the line", file=file, line=line_no) from None
        stripped = text.strip()
        if not stripped:
            raise BundleError("empty line (one event per line, no blank lines)", file=file, line=line_no)
        try:
            obj = load_json(text, partial(_line_error, file, line_no), check=False)
        except json.JSONDecodeError as exc:
            truncated = not raw.endswith(b"\n") or exc.msg.startswith(("Expecting", "Unterminated"))
            what = "truncated or malformed JSON" if truncated else "malformed JSON"
            raise BundleError(f"{what} ({exc.msg} at column {exc.colno})", file=file, line=line_no) from None
        logical, wall = _validate_event(obj, line=line_no, file=file)
        event = obj
        seq = event["seq"]
        if last_seq is not None and seq <= last_seq:
            raise BundleError(
                f"seq {seq} does not increase (previous {last_seq})", file=file, line=line_no, field="seq"
            )
        last_seq = seq
        event_id = event["id"]
        if event_id in seen or event_id in objects:
            raise BundleError(f"duplicate id {event_id!r}", file=file, line=line_no, field="id")
        seen.add(event_id)
        introduced = v.introduced_object(event)
        if introduced is not None:
            obj_kind, obj_id = introduced
            field = v.INTRODUCTIONS[event["kind"]]
            if obj_id in seen or obj_id in objects:
                prior = objects.get(obj_id, "event")
                raise BundleError(
                    f"duplicate id {obj_id!r} (already names a {prior})", file=file, line=line_no, field=field
                )
            objects[obj_id] = obj_kind
        # A last line without its newline is accepted only as a complete JSON value (a cut-off write
        # fails the parser above and is reported as truncated).
        yield EventRecord(line_no, event, stripped, logical, wall)
    if line_no == 0:
        raise BundleError("no events", file=file)


def hash_file(path: Path, *, chunk: int = 1 << 20) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            size += len(block)
            h.update(block)
    return "sha256:" + h.hexdigest(), size


def verify_blobs(root: Path, manifest: Manifest) -> dict[str, Path]:
    """Check every listed blob exists with its digest and size, and that nothing unlisted is there.

    Every file is hashed, also one whose digest the caller's store holds already: a listed digest is a claim on
    bytes, and only the bytes prove it (a file of the right size is not the blob). The one blob listed without bytes
    is one marked `expired` (bytes the console's retention sweep removed); whether the console holds a deletion
    record for it is the console's check."""
    blob_dir = root / "blobs" / "sha256"
    found: dict[str, Path] = {}
    for digest, entry in manifest.blobs.items():
        where = f"blobs/sha256/{digest.removeprefix('sha256:')}"
        path = blob_dir / digest.removeprefix("sha256:")
        if entry.expired:
            if path.exists() or path.is_symlink():
                raise BundleError("listed as expired in manifest.json, yet its bytes are here", file=where)
            continue
        if not path.is_file() or path.is_symlink():
            raise BundleError("missing blob listed in manifest.json", file=where)
        actual, size = hash_file(path)
        if actual != digest:
            raise BundleError(f"bad digest: content hashes to {actual}", file=where)
        if size != entry.size:
            raise BundleError(f"size {size} differs from manifest.json's {entry.size}", file=where)
        found[digest] = path
    if blob_dir.is_dir():
        for name in sorted(os.listdir(blob_dir)):
            if "sha256:" + name not in manifest.blobs:
                raise BundleError("blob not listed in manifest.json", file=f"blobs/sha256/{name}")
    return found
