"""HAR files and VCR.py cassettes as captures: recognising them, reading their exchanges, converting each one into an
`n17q.capture/1` dict (docs/formats/recordings.md has the tables).

Pure, no Django, like `intake`: the staging service (`fixtures_review.captures.recordings_stage`) sends every dict
this module builds through the same intake as a native capture (parse, redact by place, scan and mask), then
stores them all or none. Nothing here stores or logs anything.

What an HTTP exchange cannot say (the scenario, the tool, its contract revision, its effect class) comes from
`Fields` given by the caller (command flags, API form fields) or from a `Mapping` (a small YAML or JSON file of
rules matching method and URL to those fields). Per field the most specific wins: the matching rule, then the
mapping's defaults, then the caller's fields. An exchange no rule matches is reported as skipped with its URL
(redacted and masked), never staged under a guessed tool.

The tool call's arguments are derived from the request (docs/formats/recordings.md, "Arguments"): the query
parameters, then the fields of a JSON-object or form-encoded body, then what the rule's path template or URL
pattern captured; a rule's `arguments` list keeps only the names it lists.

Parsing is bounded: a document larger than MAX_RECORDING_BYTES (YAML: MAX_YAML_BYTES) is refused, YAML is read
with a safe loader only and a document that uses anchors and aliases (the "billion laughs" shape) is refused, as
is one with more than MAX_ENTRIES exchanges. Memory is bounded too (issue 35): a parsed value costs many times its
text, so a JSON document's values are counted on its bytes before it is parsed (MAX_RECORDING_VALUES) and a YAML
document's nodes by a streaming pass of the parser before anything is built (MAX_YAML_NODES); a body longer than
intake's cap is refused before it is decoded, a JSON body holding more than MAX_BODY_VALUES values before it is
parsed, and the bodies of one file may decode to MAX_DECODED_BYTES in all.

Exchanges are read one at a time (issue 35, part C): `load` walks the document's skeleton and reads each exchange
alone (JSON: the C scanner `json.loads` runs, per entry; YAML: PyYAML's composer and safe constructor over libyaml's
events, per interaction), checking it and dropping it, and keeps the top level with the list of exchanges standing
in as a `Streamed` (where it is in the text, how many). `iter_exchanges` and `iter_convert` read them again one at a
time. What is accepted or refused, and with which message, is what the whole-document parse gave
(tests/fixtures_review/test_recording_streams.py compares the two), but for the caps on what is built at once: a
YAML cassette's interaction, and the rest of it, in nodes (MAX_YAML_PIECE_NODES), counted by the counting pass; a
JSON recording's exchange, or other top-level value, in values (MAX_PIECE_VALUES), counted on its text when the
document holds more than that in all. Each is refused before it is built.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Iterator
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.decoder import scanstring  # type: ignore[attr-defined]  # the C scanner json.loads uses
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from n17q_engine import patterns
from n17q_engine.budget import checkpoint
from n17q_engine.json_values import json_values_bound
from n17q_engine.vocabulary import CAPTURE_FORMAT

from . import intake
from .intake import EFFECT_CLASSES, CaptureError

MAX_RECORDING_BYTES = 64 * 1024 * 1024
MAX_YAML_BYTES = 32 * 1024 * 1024  # YAML is parsed several times slower than JSON
MAX_ENTRIES = 10_000  # exchanges in one file
MAX_RECORDINGS = 500  # exchanges staged from one file (the rest is a mapping's job to skip)
MAX_MAPPING_BYTES = 1024 * 1024
MAX_RULES = 500
# Rules with a `url` pattern in one mapping: each may hold RE2's budget (patterns.MAX_PATTERN_MEMORY) while it runs,
# so this bounds a mapping's patterns to 64 MiB. Path templates are not counted (their automaton is as small as
# the template).
MAX_URL_PATTERNS = 64
_MAX_NODES = 5_000_000  # values in a parsed YAML document
# Values a JSON document (a HAR file, a JSON cassette, a capture) may hold, counted before it is parsed: 10,000
# exchanges of about 60 values each fit many times over; 60 MB of `{}` (20 million dicts, GBs) does not.
MAX_RECORDING_VALUES = 2_000_000
# Nodes of a YAML cassette, counted by the parser's event stream before any is built: composed, a node costs about
# 550 bytes (a million lines of small flow mappings took 3.8 GB).
MAX_YAML_NODES = 1_000_000
# Nodes composed at once in a YAML cassette read an interaction at a time: one interaction, and the rest of the
# document (its other top-level keys) together. Composed and constructed, 20,000 nodes are about 11 MB; vcrpy's
# interactions hold a few dozen (bodies are one string each).
MAX_YAML_PIECE_NODES = 20_000
MAX_BODY_VALUES = 1_000_000  # values of one JSON body, counted before it is parsed
# Values one exchange of a JSON recording (or another of its top-level values) may hold: each is decoded alone, so
# this bounds what is built at once (a million `{}` in one HAR entry, 3 MB, took the process to 89 MiB). Counted on
# the piece's text before it is decoded, when the document holds more than this in all.
MAX_PIECE_VALUES = 200_000
MAX_DECODED_BYTES = 128 * 1024 * 1024  # the bodies of one file, decoded (gzip and deflate undone), together

# The fields a recording cannot say, and the flag of the `capture` command that gives each one (the API's form
# fields have the fields' own names).
REQUIRED_FIELDS = ("scenario", "tool", "contract_revision", "effect_class")
OPTIONAL_FIELDS = ("connection", "world_revision", "source_revision", "source_class", "account_scope", "result_class")
FLAGS = {name: "--" + name.replace("_", "-") for name in (*REQUIRED_FIELDS, *OPTIONAL_FIELDS)}


class RecordingError(CaptureError):
    """A recording file (or mapping) that cannot be staged; one line naming what is wrong. Nothing is stored."""


# --- the fields a recording cannot say ---------------------------------------------------------------------------


def check_fields(values: MappingABC[str, Any], where: str) -> dict[str, Any]:
    """The known fields of `values` with their types checked (strings from a form or flag are converted); blank
    values are dropped. RecordingError naming `where` and the field otherwise."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in FLAGS:
            raise RecordingError(f"{where}{name}: not a field a recording can be given ({', '.join(FLAGS)})")
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if name in ("contract_revision", "world_revision"):
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value.strip())
            least = 1 if name == "contract_revision" else 0
            if not isinstance(value, int) or isinstance(value, bool) or not least <= value < intake.INT_BOUND:
                kind = "positive" if least else "non-negative"
                raise RecordingError(f"{where}{name}: a {kind} integer, got {value!r}")
        elif name == "effect_class":
            if value not in EFFECT_CLASSES:
                raise RecordingError(f"{where}effect_class: one of {', '.join(EFFECT_CLASSES)}, got {value!r}")
        elif not isinstance(value, str) or len(value) > 200:
            raise RecordingError(f"{where}{name}: a string of at most 200 characters")
        else:
            value = value.strip()
        out[name] = value
    return out


# --- the mapping file --------------------------------------------------------------------------------------------

_TEMPLATE_PART = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Rule:
    """One rule of a mapping: what it matches (all given conditions must hold) and the fields it gives."""

    index: int
    methods: frozenset[str]
    host: str | None
    path: patterns.UserPattern | None  # from a path template: `/api/requests/{request_id}`
    path_prefix: str | None
    url: patterns.UserPattern | None  # on RE2 (n17q_engine/patterns.py), never Python's `re`
    fields: dict[str, Any]
    arguments: tuple[str, ...] | None

    def match(self, method: str, url: str) -> dict[str, str] | None:
        """The arguments the rule captures from the URL when it matches, else None."""
        if self.methods and method.upper() not in self.methods:
            return None
        parts = _split(url)
        if parts is None:
            return None
        captured: dict[str, str] = {}
        if self.host is not None and parts.netloc.rsplit("@", 1)[-1].lower() not in (
            self.host,
            (parts.hostname or "").lower(),
        ):
            return None
        if self.path_prefix is not None and not parts.path.startswith(self.path_prefix):
            return None
        if self.path is not None:
            found = self.path.fullmatch(parts.path)
            if found is None:
                return None
            captured.update(found)
        if self.url is not None:
            hit = self.url.search(url)
            if hit is None:
                return None
            captured.update(hit)
        return captured


@dataclass(frozen=True)
class Mapping:
    defaults: dict[str, Any]
    rules: tuple[Rule, ...]

    def rule_for(self, method: str, url: str) -> tuple[Rule, dict[str, str]] | None:
        for rule in self.rules:
            captured = rule.match(method, url)
            if captured is not None:
                return rule, captured
        return None


_RULE_KEYS = frozenset({"method", "host", "path", "path_prefix", "url", "arguments", *FLAGS})


def parse_mapping(raw: bytes | str) -> Mapping:
    """A mapping file (YAML or JSON; JSON is YAML): `{defaults: {field: value}, rules: [{method, host, path,
    path_prefix, url, arguments, <fields>}]}`. RecordingError naming the rule and key otherwise."""
    if len(raw) > MAX_MAPPING_BYTES:
        raise RecordingError(f"the mapping is larger than {MAX_MAPPING_BYTES} bytes")
    data = _load_yaml(raw, "the mapping")
    if not isinstance(data, dict):
        raise RecordingError("the mapping must be an object {defaults, rules}")
    unknown = sorted(set(data) - {"defaults", "rules"})
    if unknown:
        raise RecordingError(f"mapping: {unknown[0]!s} is not a key of a mapping (defaults, rules)")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise RecordingError("mapping defaults: an object {field: value}")
    rules_in = data.get("rules")
    if not isinstance(rules_in, list) or not rules_in:
        raise RecordingError("mapping rules: required, a non-empty list of rules")
    if len(rules_in) > MAX_RULES:
        raise RecordingError(f"mapping rules: at most {MAX_RULES}")
    with_url = sum(1 for rule in rules_in if isinstance(rule, dict) and rule.get("url") is not None)
    if with_url > MAX_URL_PATTERNS:
        raise RecordingError(
            f"mapping rules: at most {MAX_URL_PATTERNS} with a url pattern, got {with_url} "
            "(match by method, host, path or path_prefix instead)"
        )
    rules = []
    for i, rule in enumerate(rules_in):
        where = f"mapping rule {i + 1}: "
        if not isinstance(rule, dict):
            raise RecordingError(f"{where}an object (method, host, path, path_prefix, url, and fields)")
        unknown = sorted(str(k) for k in set(rule) - _RULE_KEYS)
        if unknown:
            raise RecordingError(f"{where}{unknown[0]} is not a key of a rule ({', '.join(sorted(_RULE_KEYS))})")
        rules.append(_rule(i + 1, rule, where))
    return Mapping(defaults=check_fields(defaults, "mapping defaults: "), rules=tuple(rules))


def _rule(index: int, rule: dict[str, Any], where: str) -> Rule:
    methods = rule.get("method")
    if methods is None:
        methods = []
    elif isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, list) or not all(isinstance(m, str) and m for m in methods):
        raise RecordingError(f"{where}method: a method or a list of methods")
    text = {}
    for key in ("host", "path", "path_prefix", "url"):
        value = rule.get(key)
        if value is not None and (not isinstance(value, str) or not value or len(value) > 1000):
            raise RecordingError(f"{where}{key}: a non-empty string of at most 1000 characters")
        text[key] = value
    path = None
    if text["path"] is not None:
        if not text["path"].startswith("/"):
            raise RecordingError(f"{where}path: a path template starting with / (e.g. /api/requests/{{request_id}})")
        pieces, last, names = [], 0, set()
        for m in _TEMPLATE_PART.finditer(text["path"]):
            if m.group(1) in names:
                raise RecordingError(f"{where}path: {{{m.group(1)}}} appears twice in the template")
            names.add(m.group(1))
            pieces.append(patterns.escape(text["path"][last : m.start()]))
            pieces.append(f"(?P<{m.group(1)}>[^/]+)")
            last = m.end()
        pieces.append(patterns.escape(text["path"][last:]))
        try:
            path = patterns.compile_pattern("".join(pieces), field=f"{where}path")
        except patterns.PatternError as exc:
            raise RecordingError(str(exc)) from None
    url = None
    if text["url"] is not None:
        try:
            url = patterns.compile_pattern(text["url"], field=f"{where}url")
        except patterns.PatternError as exc:
            raise RecordingError(str(exc)) from None
    arguments = rule.get("arguments")
    if arguments is not None and (
        not isinstance(arguments, list) or not all(isinstance(a, str) and a for a in arguments)
    ):
        raise RecordingError(f"{where}arguments: a list of argument names")
    if not any((methods, *text.values())):
        raise RecordingError(f"{where}it matches nothing in particular: give method, host, path, path_prefix or url")
    fields = check_fields({k: v for k, v in rule.items() if k in FLAGS}, where)
    return Rule(
        index=index,
        methods=frozenset(m.upper() for m in methods),
        host=text["host"].lower() if text["host"] else None,
        path=path,
        path_prefix=text["path_prefix"],
        url=url,
        fields=fields,
        arguments=tuple(arguments) if arguments is not None else None,
    )


# --- reading a recording file ------------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One HTTP request and its response as a recording file holds them (bodies as bytes, headers as lists)."""

    index: int  # 1-based, in the file's order
    method: str
    url: str
    request_headers: dict[str, list[str]]
    request_body: bytes | None
    status: int
    response_headers: dict[str, list[str]]
    response_body: bytes | None
    started: str | None  # an ISO-8601 instant, when the file says when


@dataclass(frozen=True)
class Streamed:
    """A file's list of exchanges, read one at a time where it stands in the text rather than held parsed: `start`
    is where the JSON array opens, or which occurrence of a top-level `interactions` sequence a YAML cassette uses
    (the last, as a parsed mapping keeps); `count` its items, counted when the file was read."""

    start: int
    count: int


@dataclass
class RecordingFile:
    kind: str  # "har" | "vcr"
    # The document's top level, parsed, except its list of exchanges (a HAR file's log.entries, a cassette's
    # interactions), which is a `Streamed` read from `text` again one exchange at a time (issue 35).
    data: dict[str, Any]
    text: str = ""
    syntax: str = "json"  # "json" | "yaml"

    @property
    def label(self) -> str:
        return "HAR file" if self.kind == "har" else "VCR cassette"


# A cassette's top-level key, anywhere in the document (a YAML file may define anchors before it).
_YAML_CASSETTE = re.compile(rb"(?m)^interactions[ \t]*:")
# A cassette vcrpy wrote before 1.0: a top-level list of {request, response}, its YAML requests tagged as vcrpy's
# Request objects. vcrpy itself reads one only after its migration command rewrote it.
_PRE_1_0_CASSETTE = re.compile(
    rb'\A\s*(?:\[\s*\{\s*"(?:request|response)"\s*:|- request:[ \t]*!!python/object:vcr\.request\.Request)'
)
PRE_1_0_REFUSAL = (
    "a cassette written by vcrpy before 1.0, which vcrpy reads only once migrated: run `python -m vcr.migration "
    "PATH` (vcrpy's command; it rewrites the file in place, so keep a copy) and capture the migrated file"
)


def load(raw: bytes) -> RecordingFile | None:
    """The recording file `raw` holds, recognised by content, or None when it is neither a HAR file nor a VCR
    cassette (the caller then reads it as a native capture, whose own errors are the useful ones).

    The whole document is read and checked here, as a whole-document parse would, but its exchanges one at a time,
    each dropped once checked: what is held is the top level and where the exchanges stand in the text."""
    head = raw[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        if len(raw) > MAX_RECORDING_BYTES:
            raise RecordingError(f"the file is larger than {MAX_RECORDING_BYTES} bytes")
        values = json_values_bound(raw, MAX_RECORDING_VALUES)
        if values > MAX_RECORDING_VALUES:
            raise RecordingError(
                f"the document holds up to {values} JSON values, more than the {MAX_RECORDING_VALUES} a capture or "
                "recording may hold"
            )
        oversized: list[str] = []
        try:
            text = raw.decode("utf-8-sig")
            data = _json_top(text, oversized if values > MAX_PIECE_VALUES else None)
        except (ValueError, RecursionError):
            return None  # not JSON: the native path says so in its own words
        if not isinstance(data, dict) or data.get("format") == CAPTURE_FORMAT:
            return None
        log = data.get("log")
        if isinstance(log, dict) and ("entries" in log or "creator" in log):
            kind = "har"
        elif "interactions" in data:
            kind = "vcr"
        else:
            return None
        if oversized:
            raise RecordingError(oversized[0])
        return RecordingFile(kind, data, text)
    if _YAML_CASSETTE.search(raw):
        if len(raw) > MAX_YAML_BYTES:
            raise RecordingError(f"the YAML cassette is larger than {MAX_YAML_BYTES} bytes (record it as JSON)")
        text = _yaml_text(raw, "the cassette")
        data = _yaml_errors(lambda: _YamlReader(text).top(), "the cassette")
        if isinstance(data, dict) and "interactions" in data:
            return RecordingFile("vcr", data, text, "yaml")
        raise RecordingError("the YAML document is not a VCR cassette: it has no interactions")
    if _PRE_1_0_CASSETTE.match(raw[:4096]):
        raise RecordingError(PRE_1_0_REFUSAL)
    return None


# --- JSON, an exchange at a time: the document's skeleton (its top level, the log, the list of exchanges) walked
# over the text, each exchange decoded alone by the json module's C scanner (`raw_decode`, what `json.loads` runs),
# so what is valid JSON, and what each exchange holds, is what a whole-document parse says.

_JSON_WS = re.compile(r"[ \t\n\r]*")
_JSON_DECODER = json.JSONDecoder(parse_constant=intake._no_constant)


def _json_ws(text: str, pos: int) -> int:
    match = _JSON_WS.match(text, pos)
    return match.end() if match else pos


def _json_top(text: str, oversized: list[str] | None = None) -> Any:
    """The document's top level as `json.loads` would give it, but with a HAR file's `log.entries` and a JSON
    cassette's `interactions` left in the text (`Streamed`), each item decoded, counted and dropped.
    ValueError (JSONDecodeError) for what is not JSON. With `oversized`, each item and member is first counted
    (`_json_piece`), and one holding more than MAX_PIECE_VALUES values is not decoded but said in `oversized`."""
    pos = _json_ws(text, 0)
    if text[pos : pos + 1] != "{":
        value, end = _JSON_DECODER.raw_decode(text, pos)
        _json_end(text, end)
        return value
    top: dict[str, Any] = {}

    def member(key: str, at: int) -> int:
        if key == "log" and text[at : at + 1] == "{":
            log: dict[str, Any] = {}
            top[key] = log
            return _json_object(text, at, lambda k, p: _json_member(text, log, k, p, "entries", oversized))
        return _json_member(text, top, key, at, "interactions", oversized)

    _json_end(text, _json_object(text, pos, member))
    return top


def _json_member(text: str, into: dict[str, Any], key: str, at: int, listed: str, oversized: list[str] | None) -> int:
    """One member into `into` (a key given twice: the last counts, as in `json.loads`); the list named `listed`
    walked an item at a time and kept as where it stands."""
    if key == listed and text[at : at + 1] == "[":
        count = 0
        noun = "HAR entry" if listed == "entries" else "cassette interaction"

        def item(pos: int) -> int:
            nonlocal count
            checkpoint()  # a web request's budget (n17q_engine.budget), if one is open
            count += 1
            return _json_piece(text, pos, f"{noun} {count}", oversized)[1]

        end = _json_array(text, at, item)
        into[key] = Streamed(at, count)
        return end
    into[key], end = _json_piece(text, at, f"the file's {key!r}", oversized)
    return end


# A JSON string (escapes included, unrolled: linear) or a bracket: what `_json_extent` walks.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _json_piece(text: str, at: int, where: str, oversized: list[str] | None) -> tuple[Any, int]:
    """The JSON value at `at`, decoded, and its end; with `oversized`, an array or object holding more than
    MAX_PIECE_VALUES values is not decoded (None), and said in `oversized`."""
    if oversized is not None and text[at : at + 1] in ("[", "{"):
        end = _json_extent(text, at)
        if end is not None:
            values = json_values_bound(text[at:end], MAX_PIECE_VALUES)
            if values > MAX_PIECE_VALUES:
                oversized.append(
                    f"{where} holds up to {values} JSON values, more than the {MAX_PIECE_VALUES} an exchange (or "
                    "another value) of a recording may hold"
                )
                return None, end
    value, end = _JSON_DECODER.raw_decode(text, at)
    return value, end


def _json_extent(text: str, at: int) -> int | None:
    """Where the array or object at `at` ends, by its brackets outside strings, built nothing; None when it does not
    (`raw_decode` then says what is wrong)."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text, at):
        char = text[token.start()]
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return token.end()
    return None


def _json_items(text: str, start: int) -> Iterator[Any]:
    """The items of the JSON array at `start`, decoded one at a time (the file was checked whole by `load`)."""
    pos = _json_ws(text, start + 1)
    if text[pos : pos + 1] == "]":
        return
    while True:
        value, pos = _JSON_DECODER.raw_decode(text, pos)
        yield _handed([value], value := None)
        pos = _json_ws(text, pos)
        if text[pos : pos + 1] != ",":
            return
        pos = _json_ws(text, pos + 1)


def _json_object(text: str, pos: int, member: Any) -> int:
    """The JSON object at `pos`: `member(key, value position) -> end of the value` for each member; its end."""
    pos = _json_ws(text, pos + 1)
    if text[pos : pos + 1] == "}":
        return pos + 1
    while True:
        if text[pos : pos + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, pos)
        key, pos = scanstring(text, pos + 1)
        pos = _json_ws(text, pos)
        if text[pos : pos + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
        pos = _json_ws(text, member(key, _json_ws(text, pos + 1)))
        if text[pos : pos + 1] == ",":
            pos = _json_ws(text, pos + 1)
            continue
        if text[pos : pos + 1] == "}":
            return pos + 1
        raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def _json_array(text: str, pos: int, item: Any) -> int:
    pos = _json_ws(text, pos + 1)
    if text[pos : pos + 1] == "]":
        return pos + 1
    while True:
        pos = _json_ws(text, item(pos))
        if text[pos : pos + 1] == ",":
            pos = _json_ws(text, pos + 1)
            continue
        if text[pos : pos + 1] == "]":
            return pos + 1
        raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)


def _json_end(text: str, pos: int) -> None:
    pos = _json_ws(text, pos)
    if pos != len(text):
        raise json.JSONDecodeError("Extra data", text, pos)


# --- YAML ----------------------------------------------------------------------------------------------------------

_YamlLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"


def _yaml_text(raw: bytes | str, what: str) -> str:
    try:
        return raw.decode("utf-8-sig") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise RecordingError(f"{what} is not UTF-8 (byte {exc.start})") from None


def _yaml_errors(read: Any, what: str) -> Any:
    """`read()`, its YAML errors as one line naming `what`."""
    try:
        return read()
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:300]
        raise RecordingError(f"{what} is not valid YAML or JSON: {first}") from None
    except RecursionError:
        raise RecordingError(f"{what} is nested too deeply") from None


def _load_yaml(raw: bytes | str, what: str) -> Any:
    """A small YAML document (a mapping file) read whole with a safe loader only (no Python tags); a document using
    aliases is refused before anything walks it, so an alias bomb costs what its text costs."""
    text = _yaml_text(raw, what)

    def read() -> Any:
        _count_yaml_nodes(text, what)
        # yaml.safe_load with libyaml: CSafeLoader constructs exactly what SafeLoader does (no Python tags), several
        # times faster; SafeLoader itself when libyaml is absent.
        return yaml.load(text, Loader=_YamlLoader)

    data = _yaml_errors(read, what)
    _refuse_aliases(data, what)
    return data


def _count_yaml_nodes(text: str, what: str) -> None:
    """The document's nodes counted from the parser's events, which hold one node at a time: more than
    MAX_YAML_NODES, or an alias, is refused before any node is composed. (YAMLError passes to the caller.)"""
    nodes = 0
    for event in yaml.parse(text, Loader=_YamlLoader):
        if isinstance(event, yaml.AliasEvent):
            raise RecordingError(f"{what} uses YAML anchors and aliases, which are refused (write each value)")
        if isinstance(event, yaml.ScalarEvent | yaml.SequenceStartEvent | yaml.MappingStartEvent):
            nodes += 1
            if nodes > MAX_YAML_NODES:
                raise RecordingError(f"{what} holds more than {MAX_YAML_NODES} YAML nodes")


def _count_cassette_nodes(text: str) -> None:
    """`_count_yaml_nodes` for a cassette read an interaction at a time, counting also what `_YamlReader` composes at
    once: the nodes of each interaction (an item of a plain top-level `interactions` sequence) and those outside
    them, each at most MAX_YAML_PIECE_NODES; refused from the events, before anything is composed."""
    what = "the cassette"
    resolver = Resolver()
    nodes = rest = piece = 0
    stack: list[list[Any]] = []  # per open collection: [is a mapping, children seen]
    streamed = 0  # the depth of the items of the interactions sequence being read, 0 when none is
    key_is_interactions = False
    for event in yaml.parse(text, Loader=_YamlLoader):
        if isinstance(event, yaml.AliasEvent):
            raise RecordingError(f"{what} uses YAML anchors and aliases, which are refused (write each value)")
        if isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            stack.pop()
            if len(stack) < streamed:
                streamed = 0
            continue
        if not isinstance(event, yaml.ScalarEvent | yaml.SequenceStartEvent | yaml.MappingStartEvent):
            continue
        nodes += 1
        if nodes > MAX_YAML_NODES:
            raise RecordingError(f"{what} holds more than {MAX_YAML_NODES} YAML nodes")
        if len(stack) == 1 and stack[0][0]:  # a key or a value of the top-level mapping
            if stack[0][1] % 2 == 0:
                key_is_interactions = isinstance(event, yaml.ScalarEvent) and _str_scalar(resolver, event)
            elif key_is_interactions and isinstance(event, yaml.SequenceStartEvent) and event.tag in (None, "!"):
                streamed = 2
            stack[0][1] += 1
        if streamed and len(stack) >= streamed:
            piece = 1 if len(stack) == streamed else piece + 1
            if piece > MAX_YAML_PIECE_NODES:
                raise RecordingError(f"{what} holds an interaction of more than {MAX_YAML_PIECE_NODES} YAML nodes")
        else:
            rest += 1
            if rest > MAX_YAML_PIECE_NODES:
                raise RecordingError(
                    f"{what} holds more than {MAX_YAML_PIECE_NODES} YAML nodes outside its interactions"
                )
        if not isinstance(event, yaml.ScalarEvent):
            stack.append([isinstance(event, yaml.MappingStartEvent), 0])


def _bytes_of(value: Any) -> bytes:
    """A body vcrpy pickled (a BytesIO's buffer, an iterator's chunks) as the bytes it held; anything else refused."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    if isinstance(value, list) and all(isinstance(v, str | bytes) for v in value):
        return b"".join(v.encode("utf-8") if isinstance(v, str) else v for v in value)
    raise RecordingError("a pickled request body holds something other than bytes or text")


def _str_scalar(resolver: Resolver, event: Any) -> bool:
    """A scalar event that composes to the string `interactions` (as `_YamlReader._interactions` sees its node)."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
    return bool(tag == _STR_TAG and event.value == "interactions")


class _YamlReader(Composer, SafeConstructor, Resolver):
    """A YAML cassette read an interaction at a time: libyaml's parser gives the events (as CSafeLoader's does), and
    PyYAML's own composer, resolver and safe constructor (SafeLoader's: no Python tags) build one interaction, which
    is handed out and dropped before the next is composed. The rest of the top-level mapping is composed and
    constructed as a whole-document load would, the interactions standing in as a `Streamed`.

    `top()` reads and checks the whole document (nodes counted and aliases refused first, `_count_cassette_nodes`);
    `items(n)` reads the n-th top-level `interactions` sequence again, an interaction at a time."""

    # The benign Python tags vcrpy's own cassette loader (vcr/serializers/yamlserializer.py, _CassetteLoader) still
    # reads, each built here as plain data and nothing else: `!!python/unicode` and `!!python/str` (text written by
    # vcrpy under Python 2) as the scalar's text, `!!python/tuple` (tornado's header pairs) as a list, a pickled
    # `_io.BytesIO` body as its bytes and an `iter` body as its items joined. Every other Python tag (objects,
    # applications of any other callable, modules, names) stays refused, as SafeLoader refuses it.
    yaml_constructors = {
        **SafeConstructor.yaml_constructors,
        "tag:yaml.org,2002:python/unicode": SafeConstructor.construct_yaml_str,
        "tag:yaml.org,2002:python/str": SafeConstructor.construct_yaml_str,
        "tag:yaml.org,2002:python/tuple": lambda self, node: self.construct_sequence(node, deep=True),
        "tag:yaml.org,2002:python/object/new:_io.BytesIO": lambda self, node: _bytes_of(
            (self.construct_mapping(node, deep=True).get("state") or [b""])[0]
        ),
        "tag:yaml.org,2002:python/object/apply:builtins.iter": lambda self, node: _bytes_of(
            (self.construct_mapping(node, deep=True).get("args") or [[]])[0]
        ),
    }

    def __init__(self, text: str) -> None:
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.text = text
        self._events = iter(yaml.parse(text, Loader=_YamlLoader))
        self._event: Any = None
        self._stand_ins: dict[int, tuple[Any, Streamed]] = {}

    # -- the events, as PyYAML's Parser hands them to its Composer

    def check_event(self, *choices: Any) -> bool:
        event = self.peek_event()
        return event is not None and (not choices or isinstance(event, choices))

    def peek_event(self) -> Any:
        if self._event is None:
            self._event = next(self._events, None)
            if isinstance(self._event, yaml.AliasEvent):  # refused by the count before; never composed here
                raise RecordingError("the cassette uses YAML anchors and aliases, which are refused (write each value)")
        return self._event

    def get_event(self) -> Any:
        event = self.peek_event()
        self._event = None
        return event

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        stand_in = self._stand_ins.get(id(node))
        if stand_in is not None and stand_in[0] is node:
            return stand_in[1]
        return super().construct_object(node, deep=deep)

    # -- reading

    def top(self) -> Any:
        """The document as `yaml.load` gives it, its streamed interactions as `Streamed` (each one composed,
        constructed and dropped)."""
        _count_cassette_nodes(self.text)
        self.get_event()  # StreamStartEvent
        if self.check_event(yaml.StreamEndEvent):
            return None
        self.get_event()  # DocumentStartEvent
        if self._streamable_mapping():
            node = self._top_mapping()
        else:
            node = self.compose_node(None, None)
        self.get_event()  # DocumentEndEvent
        if not self.check_event(yaml.StreamEndEvent):
            event = self.get_event()
            raise ComposerError(
                "expected a single document in the stream", node.start_mark, "but found another document",
                event.start_mark,
            )  # fmt: skip
        self.anchors = {}
        return self.construct_document(node)

    def items(self, occurrence: int) -> Iterator[Any]:
        """The interactions of the `occurrence`-th top-level `interactions` sequence, one at a time."""
        self.get_event()  # StreamStartEvent
        self.get_event()  # DocumentStartEvent
        self.get_event()  # MappingStartEvent of the top level (`top` said it is one)
        seen = 0
        while not self.check_event(yaml.MappingEndEvent):
            key = self.compose_node(None, None)
            if self._interactions(key):
                seen += 1
                if seen == occurrence:
                    yield from self._sequence()
                    return
            self._skip()

    def _streamable_mapping(self) -> bool:
        event = self.peek_event()
        return isinstance(event, yaml.MappingStartEvent)

    def _interactions(self, key: Any) -> bool:
        """A top-level key `interactions` whose value is a plain sequence (a tagged one is composed whole)."""
        if not (isinstance(key, yaml.ScalarNode) and key.tag == _STR_TAG and key.value == "interactions"):
            return False
        event = self.peek_event()
        return isinstance(event, yaml.SequenceStartEvent) and event.tag in (None, "!")

    def _top_mapping(self) -> Any:
        """Composer.compose_mapping_node for the top level, each plain `interactions` sequence read an interaction at
        a time and stood in for by a node that constructs to its `Streamed`."""
        start = self.get_event()
        self._anchor(start)
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(yaml.MappingNode, None, start.implicit)
        node = yaml.MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        occurrence = 0
        while not self.check_event(yaml.MappingEndEvent):
            key = self.compose_node(node, None)
            if self._interactions(key):
                occurrence += 1
                at = self.peek_event().start_mark
                count = sum(1 for _ in self._sequence())
                stand_in = yaml.SequenceNode("tag:yaml.org,2002:seq", [], at, at)
                self._stand_ins[id(stand_in)] = (stand_in, Streamed(occurrence, count))
                node.value.append((key, stand_in))
            else:
                node.value.append((key, self.compose_node(node, key)))
        node.end_mark = self.get_event().end_mark
        return node

    def _sequence(self) -> Iterator[Any]:
        """The plain sequence ahead, an item at a time: each composed and constructed alone."""
        self._anchor(self.get_event())
        while not self.check_event(yaml.SequenceEndEvent):
            checkpoint()  # a web request's budget (n17q_engine.budget), if one is open
            item = self.compose_node(None, None)
            self._forget_nodes()
            yield _handed([self.construct_document(item)], item := None)
        self.get_event()

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if event.anchor is not None:
            self._anchor(event, register=False)  # the composer registers it
        return super().compose_node(parent, index)

    def _anchor(self, event: Any, *, register: bool = True) -> None:
        """A duplicate anchor refused in the words of the parser's own composer (libyaml's, or PyYAML's)."""
        if event.anchor is None:
            return
        if event.anchor in self.anchors:
            named = "" if _YamlLoader is not yaml.SafeLoader else f" {event.anchor!r}"
            raise ComposerError(
                f"found duplicate anchor{named}; first occurrence", self.anchors[event.anchor].start_mark,
                "second occurrence", event.start_mark,
            )  # fmt: skip
        if register:
            self.anchors[event.anchor] = _anchored(event.start_mark)

    def _forget_nodes(self) -> None:
        """An interaction's anchors kept by name only, so that its nodes go with it."""
        self.anchors = {name: _anchored(node.start_mark) for name, node in self.anchors.items()}

    def _skip(self) -> None:
        """The value ahead, its events read and dropped (checked by `top` before)."""
        depth = 0
        while True:
            event = self.get_event()
            if isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                depth += 1
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                depth -= 1
            if depth == 0:
                return


def _anchored(mark: Any) -> yaml.Node:
    """An anchor already seen, kept by its place only (a later duplicate is refused naming both places)."""
    return yaml.ScalarNode("", "", mark, None)


def _refuse_aliases(data: Any, what: str) -> None:
    """A YAML alias is the same object reached twice: refuse any container (or long string) seen twice, and
    documents with more than _MAX_NODES values. Iterative: depth costs no recursion."""
    seen: set[int] = set()
    stack = [data]
    nodes = 0
    while stack:
        value = stack.pop()
        nodes += 1
        if nodes > _MAX_NODES:
            raise RecordingError(f"{what} holds more than {_MAX_NODES} values")
        if isinstance(value, dict | list) or (isinstance(value, str | bytes) and len(value) > 64):
            if id(value) in seen:
                raise RecordingError(f"{what} uses YAML anchors and aliases, which are refused (write each value)")
            seen.add(id(value))
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def exchanges(source: RecordingFile) -> list[Exchange]:
    """Every exchange of the file, in order, as a list (`iter_exchanges` reads them one at a time); RecordingError
    naming the entry and field when one is malformed."""
    return list(iter_exchanges(source))


def iter_exchanges(source: RecordingFile) -> Iterator[Exchange]:
    """The file's exchanges one at a time, each read from the text only when the one before has been handed out.
    The list's own faults (not a list, empty, too long) are raised here, before the first is read."""
    if source.kind == "har":
        listed = _exchange_list(
            source,
            source.data["log"].get("entries"),
            "the HAR file",
            "entries",
            not_a_list="the HAR file has no entries list (log.entries)",
        )
        return _har_entries(listed)
    listed = _exchange_list(
        source,
        source.data.get("interactions"),
        "the cassette",
        "interactions",
        not_a_list="the cassette's interactions must be a list",
    )
    return _vcr_interactions(listed)


def _exchange_list(source: RecordingFile, items: Any, holder: str, noun: str, *, not_a_list: str) -> Iterator[Any]:
    """A file's list of exchanges (a HAR file's entries, a cassette's interactions): a list, not empty, at most
    MAX_ENTRIES, then its items one at a time. `not_a_list`: the whole message for a value that is no list."""
    if isinstance(items, Streamed):
        count = items.count
    elif isinstance(items, list):
        count = len(items)
    else:
        raise RecordingError(not_a_list)
    if not count:
        raise RecordingError(f"{holder} holds no {noun}: nothing to stage")
    if count > MAX_ENTRIES:
        raise RecordingError(f"{holder} holds {count} {noun}, more than {MAX_ENTRIES}")
    if isinstance(items, list):
        return iter(items)
    if source.syntax == "yaml":
        return _YamlReader(source.text).items(items.start)
    return _json_items(source.text, items.start)


_END = object()


def _handed(held: list[Any], _dropped: None = None) -> Any:
    """What `held` holds, taken out of it: `yield _handed([value], value := None)` hands `value` out and leaves the
    generator's frame holding nothing of it while the consumer works on it (a large body is then alive once)."""
    return held.pop()


def _each(items: Iterator[Any], read: Any) -> Iterator[Exchange]:
    """`read(i, item)` for each item, numbered from 1, the item and its exchange held by the consumer only.
    (Not `enumerate`: it keeps the last item it gave in a tuple it reuses.)"""
    i = 0
    while True:
        checkpoint()  # a web request's budget (n17q_engine.budget), if one is open
        item = next(items, _END)
        if item is _END:
            return
        i += 1
        yield _handed([read(i, item)], item := None)


def _har_entries(entries: Iterator[Any]) -> Iterator[Exchange]:
    return _each(entries, _har_exchange)


def _har_exchange(i: int, entry: Any) -> Exchange:
    where = f"HAR entry {i}"
    if not isinstance(entry, dict):
        raise RecordingError(f"{where}: an object")
    request, response = entry.get("request"), entry.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        raise RecordingError(f"{where}: request and response are required objects")
    method, url = request.get("method"), request.get("url")
    if not isinstance(method, str) or not method or not isinstance(url, str) or not url:
        raise RecordingError(f"{where}: request.method and request.url are required strings")
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool):
        raise RecordingError(f"{where}: response.status is required, an integer")
    post = request.get("postData")
    request_body = None
    if isinstance(post, dict) and isinstance(post.get("text"), str):
        request_body = _text_bytes(post["text"], post.get("encoding"), f"{where} request.postData")
    content = response.get("content")
    response_body = None
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        response_body = _text_bytes(content["text"], content.get("encoding"), f"{where} response.content")
    started = entry.get("startedDateTime")
    return Exchange(
        index=i,
        method=method,
        url=url,
        request_headers=_har_headers(request.get("headers"), f"{where} request.headers"),
        request_body=request_body,
        status=status,
        response_headers=_har_headers(response.get("headers"), f"{where} response.headers"),
        response_body=response_body,
        started=started if isinstance(started, str) else None,
    )


def _utf8(text: str, where: str) -> bytes:
    """A recorded body's text as the bytes it stood for; a lone surrogate (JSON can carry one) is no text."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordingError(f"{where} holds a lone surrogate (not valid Unicode)") from None


def _body_cap(length: int, where: str) -> None:
    """A body's recorded length against intake's cap on a body (base64 text: the bytes it stands for, at least)."""
    if length > intake.MAX_BODY_BYTES:
        raise RecordingError(f"{where}: more than {intake.MAX_BODY_BYTES} bytes (the cap of one body)")


def _text_bytes(text: str, encoding: Any, where: str) -> bytes:
    _body_cap(len(text) * 3 // 4 if encoding == "base64" else len(text), where)
    if encoding in (None, ""):
        return _utf8(text, f"{where}.text")
    if encoding != "base64":
        raise RecordingError(f"{where}.encoding: base64 or none, got {encoding!r}")
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise RecordingError(f"{where}.text: not base64") from None


def _har_headers(headers: Any, where: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if headers is None:
        return out
    if not isinstance(headers, list):
        raise RecordingError(f"{where}: a list of {{name, value}}")
    for h in headers:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str) or not isinstance(h.get("value"), str):
            raise RecordingError(f"{where}: each header is {{name, value}} with strings")
        out.setdefault(h["name"], []).append(h["value"])
    return out


def _vcr_interactions(interactions: Iterator[Any]) -> Iterator[Exchange]:
    return _each(interactions, _vcr_exchange)


def _vcr_exchange(i: int, item: Any) -> Exchange:
    where = f"cassette interaction {i}"
    if not isinstance(item, dict):
        raise RecordingError(f"{where}: an object {{request, response}}")
    request, response = item.get("request"), item.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        raise RecordingError(f"{where}: request and response are required objects")
    method, url = request.get("method"), request.get("uri") or request.get("url")
    if not isinstance(method, str) or not method or not isinstance(url, str) or not url:
        raise RecordingError(f"{where}: request.method and request.uri are required strings")
    if "status_code" in response and "status" not in response:
        # The httpx stub of older vcrpy wrote `status_code` and `content` (vcrpy reads them still: its
        # httpx_stubs restructures them into status.code and body.string, as here).
        response = {
            **response,
            "status": {"code": response["status_code"]},
            "body": {"string": response.get("content")},
        }
    status = response.get("status")
    code = status.get("code") if isinstance(status, dict) else status
    if not isinstance(code, int) or isinstance(code, bool):
        raise RecordingError(f"{where}: response.status.code is required, an integer")
    body = response.get("body")
    if isinstance(body, dict):
        body = body.get("string")
    recorded = item.get("recorded_at") or response.get("recorded_at")
    if isinstance(recorded, datetime):
        recorded = recorded.isoformat() if recorded.tzinfo else recorded.replace(tzinfo=UTC).isoformat()
    return Exchange(
        index=i,
        method=method,
        url=url,
        request_headers=_vcr_headers(request.get("headers"), f"{where} request.headers"),
        request_body=_vcr_body(request.get("body"), f"{where} request.body"),
        status=code,
        response_headers=_vcr_headers(response.get("headers"), f"{where} response.headers"),
        response_body=_vcr_body(body, f"{where} response.body.string"),
        started=recorded if isinstance(recorded, str) else None,
    )


def _vcr_headers(headers: Any, where: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if headers is None:
        return out
    if isinstance(headers, list) and all(isinstance(p, list) and len(p) == 2 for p in headers):
        # tornado's stub wrote [name, [values]] pairs (`!!python/tuple`), read by vcrpy as such
        pairs: list[tuple[Any, Any]] = [(p[0], p[1]) for p in headers]
    elif isinstance(headers, dict):
        pairs = list(headers.items())
    else:
        raise RecordingError(f"{where}: an object {{name: [values]}}")
    for name, values in pairs:
        if not isinstance(values, list):
            values = [values]
        kept = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, str | int | float):
                raise RecordingError(f"{where}.{name}: strings")
            kept.append(str(v))
        out[str(name)] = kept
    return out


def _vcr_body(body: Any, where: str) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, bytes | str):
        _body_cap(len(body), where)
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return _utf8(body, where)
    raise RecordingError(f"{where}: a string, bytes or null")


# --- converting an exchange ----------------------------------------------------------------------------------------


@dataclass
class Recording:
    """One exchange converted: the capture dict intake will check, and where it came from in the file."""

    index: int
    method: str
    url: str  # redacted and masked: safe to print
    capture: dict[str, Any]
    rule: int | None  # the mapping rule that matched, 1-based


@dataclass
class Converted:
    kind: str
    recordings: list[Recording] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {entry, method, url, reason}


def convert(
    source: RecordingFile,
    *,
    fields: MappingABC[str, Any],
    mapping: Mapping | None = None,
    captured_at: str,
) -> Converted:
    """Every exchange of `source` as a capture dict, or skipped with the reason (no rule matched, no response).

    `fields` are the caller's (flags, form fields; checked with `check_fields`); `captured_at` is the instant for
    exchanges whose file says no time (a VCR cassette keeps none). RecordingError, naming the field and the flag
    that gives it, when an exchange to stage lacks a required field."""
    out = Converted(kind=source.kind)
    out.recordings.extend(
        iter_convert(source, fields=fields, mapping=mapping, captured_at=captured_at, skipped=out.skipped)
    )
    return out


def iter_convert(
    source: RecordingFile,
    *,
    fields: MappingABC[str, Any],
    mapping: Mapping | None = None,
    captured_at: str,
    skipped: list[dict[str, Any]],
) -> Iterator[Recording]:
    """`convert`, an exchange at a time: each Recording handed out before the next exchange is read, the skipped
    ones added to `skipped`. The same faults, in the same order, as `convert`."""
    given = check_fields(fields, "")
    # The file's own faults first, as when every exchange was read before any was converted: an empty cassette
    # needs no flags to be refused, and an exchange that is malformed further on is said before a conversion's
    # fault (`_rest_read`). The exchanges are read one at a time and each dropped once converted.
    items = iter_exchanges(source)
    if mapping is None:
        missing = [name for name in REQUIRED_FIELDS if name not in given]
        if missing:
            _rest_read(items)
            raise RecordingError(
                f"{missing[0]}: required for a recording (a {source.label} does not say it): give {FLAGS[missing[0]]}"
                " or a mapping file (--mapping)"
            )
    staged = 0
    decoded = 0  # the staged bodies' bytes, decoded
    for exchange in items:
        checkpoint()
        try:
            recording, decoded = _convert_one(
                exchange, skipped, staged, given, mapping, captured_at, decoded, source.label
            )
        except RecordingError:
            _rest_read(items)
            raise
        exchange = None  # type: ignore[assignment]  # its bodies go before the capture is handed out
        if recording is not None:
            staged += 1
            yield _handed([recording], recording := None)


def _rest_read(items: Iterator[Exchange]) -> None:
    """The exchanges not read yet, read (and dropped) for their own faults, which a whole-file read would have
    raised first."""
    for _ in items:
        pass


def _convert_one(
    exchange: Exchange,
    skipped: list[dict[str, Any]],
    staged: int,
    given: dict[str, Any],
    mapping: Mapping | None,
    captured_at: str,
    decoded: int,
    label: str,
) -> tuple[Recording | None, int]:
    """`exchange` converted (None when skipped, the reason added to `skipped`; `staged` converted before it), and
    the staged bodies' decoded bytes so far."""
    safe = safe_url(exchange.url)
    captured: dict[str, str] = {}
    merged = dict(given)
    rule_index = None
    if mapping is not None:
        found = mapping.rule_for(exchange.method, exchange.url)
        if found is None:
            skipped.append(_skip(exchange, safe, "no rule of the mapping matches it"))
            return None, decoded
        rule, captured = found
        rule_index = rule.index
        merged.update(mapping.defaults)
        merged.update(rule.fields)
    else:
        rule = None
    if exchange.status < 100 or exchange.status > 599:
        skipped.append(_skip(exchange, safe, f"no response was recorded (status {exchange.status})"))
        return None, decoded
    for name in REQUIRED_FIELDS:
        if name not in merged:
            where = f"rule {rule_index} of the mapping" if rule_index else "the mapping"
            raise RecordingError(
                f"{name}: required for {exchange.method} {safe} (entry {exchange.index}), given neither by "
                f"{where} nor by {FLAGS[name]}"
            )
    if staged >= MAX_RECORDINGS:
        raise RecordingError(
            f"more than {MAX_RECORDINGS} exchanges to stage from one file: split it, or map fewer with --mapping"
        )
    try:
        decoded += _decoded_size(exchange.request_body, exchange.request_headers)
        decoded += _decoded_size(exchange.response_body, exchange.response_headers)
        if decoded > MAX_DECODED_BYTES:
            raise RecordingError(f"the bodies of the {label} decode to more than {MAX_DECODED_BYTES} bytes together")
        args = arguments(exchange, captured, rule.arguments if rule is not None else None)
        capture = _capture(exchange, merged, args, captured_at)
    except RecordingError as exc:
        raise RecordingError(f"entry {exchange.index} ({exchange.method} {safe}): {exc}") from None
    recording = Recording(index=exchange.index, method=exchange.method, url=safe, capture=capture, rule=rule_index)
    return recording, decoded


def _decoded_size(raw: bytes | None, headers: dict[str, list[str]]) -> int:
    """What a body weighs once intake has decoded it (a gzip body is kept compressed here and decoded there)."""
    if not raw:
        return 0
    if raw[:2] == b"\x1f\x8b":
        decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
        size = 0
        try:
            while raw and size <= intake.MAX_BODY_BYTES:
                size += len(decomp.decompress(raw, 1 << 20))
                raw = decomp.unconsumed_tail
        except zlib.error:
            return 0  # intake says what is wrong with it
        return size
    return len(decoded_bytes(raw, headers) or b"")


def _skip(exchange: Exchange, safe: str, reason: str) -> dict[str, Any]:
    return {"entry": exchange.index, "method": exchange.method, "url": safe, "reason": reason}


def _capture(exchange: Exchange, merged: dict[str, Any], args: dict[str, Any], captured_at: str) -> dict[str, Any]:
    parts = _split(exchange.url)
    host = parts.netloc.rsplit("@", 1)[-1] if parts is not None else ""
    return {
        "format": CAPTURE_FORMAT,
        "scenario": merged["scenario"],
        "tool": merged["tool"],
        "contract_revision": merged["contract_revision"],
        "connection": merged.get("connection") or host or "recording",
        "captured_at": _instant(exchange.started) or captured_at,
        "source_revision": merged.get("source_revision"),
        "effect_class": merged["effect_class"],
        "request": {
            "method": exchange.method.upper(),
            "url": exchange.url,
            "headers": _headers(exchange.request_headers),
            "body": body_value(exchange.request_body, exchange.request_headers),
            "args": args,
        },
        "response": {
            "status": exchange.status,
            "headers": _headers(exchange.response_headers),
            "body": body_value(exchange.response_body, exchange.response_headers),
        },
        "proposed_transition": None,
        "world_revision": merged.get("world_revision", 0),
        # The record policy's keys (docs/record-policy.md): left out when not given, so the connection resolves them.
        **{name: merged[name] for name in ("source_class", "account_scope", "result_class") if name in merged},
    }


def _instant(value: str | None) -> str | None:
    """A file's instant when it is one intake accepts (with a zone), else None (the caller's instant is used)."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if moment.tzinfo is not None else None


def _headers(headers: dict[str, list[str]]) -> dict[str, Any]:
    return {name: values[0] if len(values) == 1 else list(values) for name, values in headers.items()}


def _header(headers: dict[str, list[str]], name: str) -> str:
    for key, values in headers.items():
        if key.lower() == name and values:
            return values[0].lower()
    return ""


def decoded_bytes(raw: bytes | None, headers: dict[str, list[str]]) -> bytes | None:
    """A body's bytes with its content coding undone (gzip, deflate), bounded like intake's gzip bodies; the bytes
    as recorded when they are not what the header says (a HAR keeps bodies already decoded)."""
    if not raw:
        return raw
    coding = _header(headers, "content-encoding")
    wbits = None
    if raw[:2] == b"\x1f\x8b":
        wbits = 16 + zlib.MAX_WBITS
    elif coding == "deflate":
        wbits = zlib.MAX_WBITS
    if wbits is None:
        return raw
    try:
        decomp = zlib.decompressobj(wbits)
        out = decomp.decompress(raw, intake.MAX_BODY_BYTES + 1)
    except zlib.error:
        return raw
    if len(out) > intake.MAX_BODY_BYTES or decomp.unconsumed_tail:
        raise RecordingError(f"a body decompresses to more than {intake.MAX_BODY_BYTES} bytes")
    return out


def body_value(raw: bytes | None, headers: dict[str, list[str]]) -> Any:
    """A body as a capture holds it: None when empty; gzip as `gzip+base64` (intake decodes it, bounded, and records
    how it arrived); UTF-8 text as JSON when it is JSON a capture may hold, else as text; other bytes as base64."""
    if not raw:
        return None
    if raw[:2] == b"\x1f\x8b":
        return {"encoding": "gzip+base64", "data": base64.b64encode(raw).decode("ascii")}
    data = decoded_bytes(raw, headers) or b""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}
    if "\x00" in text:
        return {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}
    value = _json_or_none(text, headers)
    return value if value is not None else text


def _json_or_none(text: str, headers: dict[str, list[str]]) -> Any:
    if "json" not in _header(headers, "content-type") and text.lstrip()[:1] not in ("{", "["):
        return None
    values = json_values_bound(text, MAX_BODY_VALUES)
    if values > MAX_BODY_VALUES:
        raise RecordingError(f"a JSON body holds up to {values} JSON values, more than {MAX_BODY_VALUES}")
    try:
        value = json.loads(
            text,
            parse_constant=intake._no_constant,
            parse_float=intake._finite_float,
            parse_int=intake._bounded_int,
        )
        intake.check_json_values(value)
    except (ValueError, RecursionError):
        return None  # kept as text: intake and the reviewer see exactly what was recorded
    return value


def arguments(exchange: Exchange, captured: dict[str, str], keep: tuple[str, ...] | None) -> dict[str, Any]:
    """The tool call's arguments read from the request: query parameters (a repeated one as a list), then the fields
    of a JSON-object body (another JSON body is `body`) or of a form-encoded body, then what the rule's path
    template or URL pattern captured. `keep` (a rule's `arguments`) keeps only the names it lists."""
    args: dict[str, Any] = {}
    parts = _split(exchange.url)
    if parts is not None and parts.query:
        _add_pairs(args, parse_qsl(parts.query, keep_blank_values=True))
    data = decoded_bytes(exchange.request_body, exchange.request_headers)
    if data:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        value = _json_or_none(text, exchange.request_headers) if text else None
        if isinstance(value, dict):
            args.update(value)
        elif value is not None:
            args["body"] = value
        elif text and "x-www-form-urlencoded" in _header(exchange.request_headers, "content-type"):
            _add_pairs(args, parse_qsl(text, keep_blank_values=True))
    args.update(captured)
    if keep is not None:
        args = {name: args[name] for name in keep if name in args}
    return args


def _add_pairs(args: dict[str, Any], pairs: list[tuple[str, str]]) -> None:
    for name, value in pairs:
        if name in args:
            held = args[name]
            args[name] = [*held, value] if isinstance(held, list) else [held, value]
        else:
            args[name] = value


def _split(url: str) -> Any:
    try:
        return urlsplit(url)
    except ValueError:
        return None


def safe_url(url: str) -> str:
    """A URL fit to print in a report: user info and signed or secret-named parameters redacted, anything the
    scan finds masked, at most 300 characters."""
    redacted = intake.redact_url(url, "url", lambda _: None)
    masked = intake.mask_url(redacted, "url", [])
    masked = intake.mask_json(masked, "url", [])
    return masked if len(masked) <= 300 else masked[:299] + "…"


def now_instant() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")
