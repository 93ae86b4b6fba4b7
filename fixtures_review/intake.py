"""Capture intake rules, in one place: the `n17q.capture/1` format, redaction, secret scanning, masking.

Pure functions, no Django (an import-linter contract keeps it so): the intake service calls them before
anything is stored, the benchmark and the labelled corpus tests call them directly. It is not part of
`n17q_engine` because detect-secrets imports `requests` (for its optional verification, never used here), and
the engine's contract forbids network clients.

The order is fixed (DESIGN §7):

1. `parse_capture` checks the shape and refuses bad input with a message naming the field.
2. `redact_capture` removes what is secret by *where* it is, whatever it looks like: authorization headers
   and cookies, signed-URL parameters, user info in URLs, secret-named fields at any depth (JSON bodies,
   form-encoded bodies, tool arguments, the proposed transition), inside bodies sent as base64 or
   gzip+base64 too (decoded first, stored decoded). Each redaction is recorded as `{path, rule}`.
3. `scan_capture` looks at every string left (the manifest and every body, binary ones by their printable
   runs) for what is secret by *what it looks like*: detect-secrets' detectors, offline (its verification,
   which would call the providers, is never invoked), plus the project's rules for what it lacks. Every
   finding is masked in the copy that will be stored, so nothing detected is written in the clear; a
   finding keeps its rule, its path and a masked preview, never the value.

Paths name a place in the capture: `request.headers.Authorization`, `response.body.items[0].token`,
`request.url?X-Amz-Signature` (a URL's query parameter), `request.url@userinfo`, `request.body&password` (a
field of a form-encoded body). Keys that are not plain identifiers are quoted: `body["a.b"]`.
"""

from __future__ import annotations

import base64
import binascii
import email.message
import email.parser
import email.utils
import gzip
import hashlib
import hmac
import json
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from n17q_engine import canonical
from n17q_engine.identifiers import INT32_MAX, MAX_ID_CHARS, id_problem, scenario_name_problem
from n17q_engine.vocabulary import CAPTURE_FORMAT
from n17q_secrets.names import MEASURE_SUFFIXES, is_oauth_code, is_secret_header, is_secret_name, is_secret_value_name
from n17q_secrets.names import SECRET_HEADERS as SECRET_HEADERS
from n17q_secrets.names import SIGNED_URL_PARAM_PREFIXES as SIGNED_URL_PARAM_PREFIXES
from n17q_secrets.names import SIGNED_URL_PARAMS as SIGNED_URL_PARAMS
from n17q_secrets.names import is_signed_url_param as is_signed_url_param
from n17q_secrets.scanning import (
    join,
    mask_binary,
    mask_json,
    mask_text,
)

from .record_policy import POLICY_KEYS, RESULT_CLASSES

REDACTED = "[redacted]"
EFFECT_CLASSES = ("read", "mutation")
BODY_ENCODINGS = ("base64", "gzip+base64")
MAX_BODY_BYTES = 32 * 1024 * 1024  # a decoded body larger than this is refused (a gzip bomb, say)

# --- redaction rules -------------------------------------------------------------------------------------------

# Credentials by name (headers, fields, query and fragment parameters, form and multipart fields) are one set of rules
# for every door, in n17q_secrets.names, so the run importer's scan (an OTLP span's `url.full`) knows them too; intake
# re-exports them under the names it always had.
_NON_ALNUM = re.compile(r"[^a-z0-9]")


class CaptureError(ValueError):
    """A capture that cannot be staged; the message names the field at fault. Nothing is stored."""


# --- paths -----------------------------------------------------------------------------------------------------


def split_path(path: str) -> list[str | int]:
    """`response.body.items[0]["a.b"]` -> ["response", "body", "items", 0, "a.b"]; CaptureError if malformed."""
    parts: list[str | int] = []
    i, n = 0, len(path)
    token = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')
    while i < n:
        m = token.match(path, i)
        if not m or (m.group(0).startswith(".") and i == 0):
            raise CaptureError(f"{path!r}: not a path (write it as request.headers.Authorization or body.items[0])")
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
        else:
            parts.append(json.loads(m.group(3)))
        i = m.end()
    if not parts:
        raise CaptureError("an empty path names nothing")
    return parts


def covers(outer: str, inner: str) -> bool:
    """Whether the place `outer` names holds `inner` (itself, a child, a URL's parameter, a form field)."""
    return inner == outer or (inner.startswith(outer) and inner[len(outer)] in ".[?@&")


# --- the format ------------------------------------------------------------------------------------------------


def tool_call_capture(
    *,
    scenario: str,
    tool: str,
    contract_revision: Any,
    connection: str,
    captured_at: str,
    source_revision: Any,
    effect_class: str,
    args: Any,
    status: int,
    body: Any,
    response_headers: dict[str, Any] | None = None,
    proposed_transition: Any = None,
    world_revision: Any = 0,
) -> dict[str, Any]:
    """A capture (`n17q.capture/1`) of one tool call that was never an HTTP exchange: what a run recorded, a copied
    answer, a migrated fixture. Its request is `TOOL tool:<name>` with the call's arguments; its status stands for the
    call's outcome. The console's other doors build theirs here, so they all reach intake in one shape."""
    return {
        "format": CAPTURE_FORMAT,
        "scenario": scenario,
        "tool": tool,
        "contract_revision": contract_revision,
        "connection": connection,
        "captured_at": captured_at,
        "source_revision": source_revision,
        "effect_class": effect_class,
        "request": {"method": "TOOL", "url": f"tool:{tool}", "headers": {}, "body": None, "args": args},
        "response": {"status": status, "headers": response_headers or {}, "body": body},
        "proposed_transition": proposed_transition,
        "world_revision": world_revision,
    }


def parse_capture(raw: bytes | str | dict) -> dict[str, Any]:
    """The capture as a dict, checked against `n17q.capture/1`; CaptureError naming the field otherwise.

    Before the shape, what any value may be (`check_json_values`): integers within 64 bits, finite numbers, at most
    MAX_JSON_DEPTH levels of nesting, valid Unicode (no lone surrogate from a `\\ud800` escape), no NUL."""
    if isinstance(raw, dict):
        data = raw
    else:
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as exc:
            raise CaptureError(f"the capture is not UTF-8 (byte {exc.start})") from None
        try:
            data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_bounded_int)
        except _ValueRefused as exc:
            raise CaptureError(str(exc)) from None
        except (ValueError, RecursionError) as exc:
            raise CaptureError(f"the capture is not JSON: {exc}") from None
    check_json_values(data)
    if not isinstance(data, dict):
        raise CaptureError("the capture must be a JSON object")
    if data.get("format") != CAPTURE_FORMAT:
        raise CaptureError(f"format: expected {CAPTURE_FORMAT!r}, got {data.get('format')!r}")
    allowed = {
        "format",
        "scenario",
        "tool",
        "contract_revision",
        "connection",
        "captured_at",
        "source_revision",
        "effect_class",
        "request",
        "response",
        "proposed_transition",
        "world_revision",
        "retention",  # optional: the retention class the material is kept under (docs/retention.md)
        # Additive (issue 19, the record policy): what the connection recorded, and a capture that failed.
        *POLICY_KEYS,
        "capture_failure",
    }
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise CaptureError(f"{unknown[0]}: not a field of {CAPTURE_FORMAT}")
    for name in ("scenario", "tool", "connection", "captured_at"):
        if not isinstance(data.get(name), str) or not data[name].strip():
            raise CaptureError(f"{name}: required, a non-empty string")
    problem = scenario_name_problem(data["scenario"])
    if problem is not None:
        raise CaptureError(f"scenario: {problem}")
    problem = id_problem(data["tool"], what="a tool name")
    if problem is not None:
        raise CaptureError(f"tool: {problem}")
    # Kept in columns of these widths (fixtures_review.models.StagedRecording).
    if len(data["connection"]) > MAX_ID_CHARS:
        raise CaptureError(f"connection: at most {MAX_ID_CHARS} characters")
    _instant(data["captured_at"], "captured_at")
    retention = data.get("retention")
    if retention is not None and (not isinstance(retention, str) or not retention.strip() or len(retention) > 100):
        raise CaptureError("retention: a retention class name (a non-empty string of at most 100 characters) or absent")
    if data.get("source_revision") is not None and not isinstance(data["source_revision"], str):
        raise CaptureError("source_revision: a string or null")
    if len(data.get("source_revision") or "") > MAX_ID_CHARS:
        raise CaptureError(f"source_revision: at most {MAX_ID_CHARS} characters")
    for name in ("contract_revision", "world_revision"):
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "contract_revision" else 0):
            raise CaptureError(
                f"{name}: required, a {'positive' if name == 'contract_revision' else 'non-negative'} integer"
            )
        if value > INT32_MAX:  # a 32-bit column on PostgreSQL
            raise CaptureError(f"{name}: at most {INT32_MAX}")
    if data.get("effect_class") not in EFFECT_CLASSES:
        raise CaptureError(f"effect_class: one of {', '.join(EFFECT_CLASSES)}, got {data.get('effect_class')!r}")
    _policy_keys(data)
    request, response = data.get("request"), data.get("response")
    failure = data.get("capture_failure")
    if failure is not None:
        if not isinstance(failure, str) or not failure.strip() or len(failure) > 500:
            raise CaptureError("capture_failure: a non-empty string of at most 500 characters, or null")
        if response is not None:
            raise CaptureError("response: a failed capture kept no response; it must be null or left out")
        response = {"status": 599}  # checked below as a placeholder only: nothing of a failed capture is staged
    if not isinstance(request, dict):
        raise CaptureError("request: required, an object {method, url, headers, body, args}")
    unknown = sorted(set(request) - {"method", "url", "headers", "body", "args"})
    if unknown:
        raise CaptureError(f"request.{unknown[0]}: not a field of a capture's request")
    if not isinstance(request.get("method"), str) or not request["method"]:
        raise CaptureError("request.method: required, a string")
    if not isinstance(request.get("url"), str) or not request["url"]:
        raise CaptureError("request.url: required, a string")
    if not isinstance(request.get("args"), dict):
        raise CaptureError("request.args: required, an object (the tool call's arguments)")
    if not isinstance(response, dict):
        raise CaptureError("response: required, an object {status, headers, body}")
    unknown = sorted(set(response) - {"status", "headers", "body"})
    if unknown:
        raise CaptureError(f"response.{unknown[0]}: not a field of a capture's response")
    status = response.get("status")
    if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
        raise CaptureError(f"response.status: an HTTP status 100-599, got {status!r}")
    for where, part in (("request", request), ("response", response)):
        headers = part.get("headers", {})
        if not isinstance(headers, dict):
            raise CaptureError(f"{where}.headers: an object {{name: value}}")
        for name, value in headers.items():
            ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            if not ok:
                raise CaptureError(f"{join(where + '.headers', name)}: a string or a list of strings")
        body = part.get("body")
        if _is_encoded(body):
            if body["encoding"] not in BODY_ENCODINGS:
                raise CaptureError(f"{where}.body.encoding: one of {', '.join(BODY_ENCODINGS)}")
            if not isinstance(body["data"], str):
                raise CaptureError(f"{where}.body.data: a base64 string")
    transition = data.get("proposed_transition")
    if transition is not None and not isinstance(transition, dict):
        raise CaptureError("proposed_transition: an object or null")
    if transition is not None and data["effect_class"] == "read":
        raise CaptureError("proposed_transition: a read changes no world state; it must be null")
    return data


def _policy_keys(data: dict[str, Any]) -> None:
    """The record policy's additive keys: their shape only (what they may be is the connection's to say)."""
    for name in ("source_class", "result_class"):
        value = data.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS):
            raise CaptureError(f"{name}: a non-empty string of at most {MAX_ID_CHARS} characters, or null")
    if data.get("result_class") is not None and data["result_class"] not in RESULT_CLASSES:
        raise CaptureError(f"result_class: one of {', '.join(RESULT_CLASSES)}, got {data['result_class']!r}")
    scope = data.get("account_scope")
    scopes = scope if isinstance(scope, list) else [scope] if scope is not None else []
    # A list is accepted here so that the policy can refuse it as ambiguous (with an audit entry), not as a typo.
    if not all(isinstance(s, str) and len(s) <= MAX_ID_CHARS for s in scopes) or len(scopes) > 100:
        raise CaptureError(f"account_scope: a string of at most {MAX_ID_CHARS} characters, or null")


def observe_request(data: dict[str, Any]) -> dict[str, str]:
    """The safe request observation of a parsed capture that will not be staged (refused, or failed after a live
    read): its tool, method and the digest of its arguments as sent, after redaction and masking (never the digest of a
    secret). No body, URL or header is kept: a URL's path can hold a token as well as a query can."""
    record: list[dict[str, str]] = []
    args = redact_json(data["request"]["args"], "request.args", record.append)
    args = mask_json(args, "request.args", [])
    return {
        "tool": data["tool"],
        "method": str(data["request"]["method"])[:20],
        "request_digest": canonical.request_digest(args),
    }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


MAX_JSON_DEPTH = 64
INT_BOUND = 2**63  # integers are stored and compared as 64-bit ones (PostgreSQL's bigint, a fixture key's digest)


class _ValueRefused(ValueError):
    """A JSON value no capture may hold; the message says which."""


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _ValueRefused(f"the capture holds a number too large to represent ({literal[:40]})")
    return value


def _bounded_int(literal: str) -> int:
    value = int(literal)
    if not -INT_BOUND <= value < INT_BOUND:
        raise _ValueRefused(f"the capture holds an integer beyond 64 bits ({literal[:40]}…)")
    return value


def check_json_values(value: Any, where: str = "the capture") -> None:
    """CaptureError unless every value is one a capture may hold: nesting at most MAX_JSON_DEPTH deep, integers
    within 64 bits, finite numbers, strings and keys of valid Unicode. One pass, no recursion (a hostile nesting
    depth must not become a RecursionError, or minutes of a debug page's frames)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise CaptureError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, child in items:
                if isinstance(key, str):
                    _check_text(key, where, "key")
                if isinstance(child, dict | list):
                    stack.append((child, depth + 1))
                elif isinstance(child, str):
                    _check_text(child, where, "string")
                elif isinstance(child, bool) or child is None:
                    continue
                elif isinstance(child, int) and not -INT_BOUND <= child < INT_BOUND:
                    raise CaptureError(f"{where} holds an integer beyond 64 bits")
                elif isinstance(child, float) and not math.isfinite(child):
                    raise CaptureError(f"{where} holds a number that is not finite")
        elif isinstance(node, str):
            _check_text(node, where, "string")


def _check_text(text: str, where: str, what: str) -> None:
    if "\x00" in text:
        # PostgreSQL stores no NUL in text or JSON; binary content travels as a base64 body.
        raise CaptureError(
            f"{where} holds a {what} with a NUL character (\\u0000), which is not text; send such a body as "
            '{"encoding": "base64", "data": …}'
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise CaptureError(f"{where} holds a {what} that is not valid Unicode (a lone surrogate)") from None


def _instant(value: str, where: str) -> None:
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CaptureError(f"{where}: {value!r} is not an ISO-8601 instant") from None
    if moment.tzinfo is None:
        raise CaptureError(f"{where}: {value!r} has no time zone (write Z or +00:00)")
    try:
        moment.astimezone(UTC)  # stored as UTC: year 1 at +01:00 is before the first representable instant
    except OverflowError:
        raise CaptureError(f"{where}: {value!r} is outside the years 1 to 9999 in UTC") from None


def _is_encoded(body: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(body, dict) and set(body) == {"encoding", "data"}


def decode_body(body: dict[str, Any], where: str) -> bytes:
    try:
        raw = base64.b64decode(body["data"], validate=True)
    except (binascii.Error, ValueError):
        raise CaptureError(f"{where}.data: not base64") from None
    if body["encoding"] == "gzip+base64":
        try:
            decomp = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = decomp.decompress(raw, MAX_BODY_BYTES + 1)
        except zlib.error:
            raise CaptureError(f"{where}.data: not gzip data") from None
        if len(out) > MAX_BODY_BYTES or decomp.unconsumed_tail:
            raise CaptureError(f"{where}: decompresses to more than {MAX_BODY_BYTES} bytes")
        return out
    return raw


# --- redaction -------------------------------------------------------------------------------------------------


@dataclass
class Redacted:
    """A capture after redaction and masking: what may be stored."""

    capture: dict[str, Any]
    original_digest: str  # keyed digest of the capture as it arrived (`original_digest`), "" when none is kept
    redactions: list[dict[str, str]] = field(default_factory=list)  # {path, rule}
    findings: list[dict[str, str]] = field(default_factory=list)  # {rule, path, preview}
    # "request.body" -> "gzip+base64": how a body arrived; it is stored decoded (text or JSON).
    encodings: dict[str, str] = field(default_factory=dict)
    # "response.body" -> bytes of a body that is not text (stored as base64, its secrets masked byte for byte).
    binary: dict[str, bytes] = field(default_factory=dict)


def redact_capture(data: dict[str, Any], *, original_digest: str = "") -> Redacted:
    """Redaction by place. `data` must have passed `parse_capture`; it is not modified (every redaction builds
    new containers; the strings it keeps are shared, being immutable)."""
    cap = dict(data)
    request, response = dict(data["request"]), dict(data["response"])
    cap["request"], cap["response"] = request, response
    out = Redacted(capture=cap, original_digest=original_digest)
    record = out.redactions.append
    request["url"] = redact_url(request["url"], "request.url", record)
    for where, part in (("request", request), ("response", response)):
        part["headers"] = _redact_headers(part.get("headers") or {}, f"{where}.headers", record)
        part["body"] = _redact_body(part.get("body"), f"{where}.body", part["headers"], out)
    request["args"] = redact_json(request["args"], "request.args", record)
    if cap.get("proposed_transition") is not None:
        cap["proposed_transition"] = redact_json(cap["proposed_transition"], "proposed_transition", record)
    return out


Record = Callable[[dict[str, str]], None]


# Headers whose value is a URL or holds URLs: a redirect (`Location`, `Content-Location`, `Refresh: 0; url=…`) or
# links (`Link: <…>; rel="next", <…>; rel="last"`, RFC 8288). A redirect is where the implicit flow hands a token
# over (`#access_token=…`) and a presigned download its signature.
URL_HEADERS = frozenset({"location", "content-location", "refresh", "link"})
_REFRESH_URL = re.compile(r"(?is)^(\s*[\d.]*\s*[;,]?\s*(?:url\s*=\s*)?)(['\"]?)(.*?)\2(\s*)$")
_LINK_TARGET = re.compile(r"<([^>]*)>")


def map_header_urls(name: str, value: Any, where: str, change: Callable[[str, str], str]) -> Any:
    """`value` of header `name` (one value, or a list of them, each at its index) with every URL it holds replaced
    by `change(url, place)`: the whole value of a redirect, `Refresh`'s `url=` part, each `<…>` target of `Link`
    (its place `Link[i]`, in the order written)."""
    if isinstance(value, list):
        return [map_header_urls(name, v, join(where, i), change) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value
    low = name.strip().lower()
    if low in ("location", "content-location"):
        return change(value, where)
    if low == "refresh":
        m = _REFRESH_URL.match(value)
        if not m or not m.group(3):
            return value
        url = change(m.group(3), where)
        return value if url == m.group(3) else f"{m.group(1)}{m.group(2)}{url}{m.group(2)}{m.group(4)}"
    if low == "link":
        seen = iter(range(1 << 30))
        return _LINK_TARGET.sub(lambda m: f"<{change(m.group(1), join(where, next(seen)))}>", value)
    return value


def _redact_headers(headers: dict[str, Any], where: str, record: Record) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in headers.items():
        path = join(where, name)
        if is_secret_header(name):
            out[name] = [REDACTED for _ in value] if isinstance(value, list) else REDACTED
            record({"path": path, "rule": "secret-header"})
        elif name.strip().lower() in URL_HEADERS:

            def redact(url: str, place: str) -> str:
                return redact_url(url, place, record)

            out[name] = map_header_urls(name, value, path, redact)
        else:
            out[name] = value
    return out


def redact_url(url: str, where: str, record: Record) -> str:
    """User info, and signed-URL / secret-named parameters of the query and the fragment (`#access_token=…`, where
    OAuth's implicit and hybrid flows put tokens) replaced; anything unparsable left to the scan."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
        record({"path": f"{where}@userinfo", "rule": "url-userinfo"})
    query = _redact_pairs(parts.query, f"{where}?", record) if parts.query else parts.query
    fragment = parts.fragment
    if fragment and "=" in fragment:
        # A single-page app's route may come first (`#/callback?code=…`): the pairs are what follows its `?`.
        route, sep, pairs = fragment.rpartition("?") if "?" in fragment else ("", "", fragment)
        redacted = _redact_pairs(pairs, f"{where}#", record, in_fragment=True)
        fragment = f"{route}{sep}{redacted}" if redacted != pairs else fragment
    if netloc == parts.netloc and query == parts.query and fragment == parts.fragment:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _redact_pairs(text: str, where: str, record: Record, *, in_fragment: bool = False, form: bool = False) -> str:
    """`name=value&…` (a query, a fragment, a form body) with the values of credential names replaced, each recorded
    at `{where}{name}`; the text itself when nothing is. A form's fields are all `secret-name` (as they always were),
    a URL's signature parameters `signed-url-param`."""
    pairs = parse_qsl(text, keep_blank_values=True)
    names = [name for name, _ in pairs]
    changed = False
    kept = []
    for name, value in pairs:
        if is_signed_url_param(name):
            rule: str | None = "secret-name" if form else "signed-url-param"
        elif is_secret_value_name(name) or is_oauth_code(name, names, in_fragment=in_fragment):
            rule = "secret-name"
        else:
            rule = None
        if rule and value and value != REDACTED:
            kept.append((name, REDACTED))
            record({"path": f"{where}{name}", "rule": rule})
            changed = True
        else:
            kept.append((name, value))
    return urlencode(kept, safe="[]:" if form else "[]", quote_via=quote) if changed else text


def redact_json(value: Any, where: str, record: Record, *, inherited: str | None = None) -> Any:
    """Secret-named fields at any depth: every string leaf under such a name is replaced.

    A number under a secret name is replaced too (`"pin": 4821`, `"otp": 123456`), unless the name says it
    counts or measures something (`password_min_length`, `token_ttl`, `secret_version`); booleans and nulls are
    kept (`password_set: true` says nothing secret). A session or CSRF name (`session`, `sid`, `csrf`) replaces a
    value, not an object; OAuth's `code` is replaced in an OAuth exchange (`is_oauth_code`). Links anywhere lose
    their user info and signed or secret-named parameters (a presigned download, a redirect target).
    """
    if isinstance(value, dict):
        out = {}
        oauth = "code" in value or "Code" in value
        for key, child in value.items():
            rule = inherited
            if rule is None and (
                is_secret_name(key)
                or (
                    (isinstance(child, str) or _is_number(child))
                    and (is_secret_value_name(key) or (oauth and is_oauth_code(key, value, value=child, in_json=True)))
                )
            ):
                rule = "secret-name"
            if rule is not None and _is_number(child) and _measures(key):
                out[key] = child  # a length, a count, a lifetime: not the secret itself
                continue
            # Only what can change is visited (a call per node is most of the cost on a large body).
            if rule is not None or isinstance(child, dict | list) or (isinstance(child, str) and _link_to_check(child)):
                out[key] = redact_json(child, join(where, key), record, inherited=rule)
            else:
                out[key] = child
        return out
    if isinstance(value, list):
        return [
            redact_json(child, join(where, i), record, inherited=inherited)
            if inherited is not None
            or isinstance(child, dict | list)
            or (isinstance(child, str) and _link_to_check(child))
            else child
            for i, child in enumerate(value)
        ]
    if ((isinstance(value, str) and value) or _is_number(value)) and inherited and value != REDACTED:
        record({"path": where, "rule": inherited})
        return REDACTED
    if isinstance(value, str) and _link_to_check(value):
        return redact_url(value, where, record)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _measures(name: str) -> bool:
    norm = _NON_ALNUM.sub("", name.lower())
    return norm.endswith(MEASURE_SUFFIXES)


def _link_to_check(value: str) -> bool:
    """A link that could hold user info or a query parameter to redact."""
    return (
        value[:8].lower().startswith(("http://", "https://"))
        and len(value) < 16384
        and ("@" in value or "?" in value or "#" in value)
    )


_FORM_RE = re.compile(r"^[^=&\s]+=[^&\s]*(?:&[^=&\s]+=[^&\s]*)*$")


def _content_type(headers: dict[str, Any]) -> str:
    for name, value in headers.items():
        if name.lower() == "content-type":
            return (value[0] if isinstance(value, list) and value else str(value)).lower()
    return ""


def _redact_body(body: Any, where: str, headers: dict[str, Any], out: Redacted) -> Any:
    record = out.redactions.append
    if _is_encoded(body):
        raw = decode_body(body, where)
        out.encodings[where] = body["encoding"]
        try:
            text = raw.decode("utf-8")
            if "\x00" in text:  # UTF-16 text, or binary that happens to be valid UTF-8: not storable as text
                raise UnicodeDecodeError("utf-8", raw, 0, 1, "holds NUL")
        except UnicodeDecodeError:
            boundary = _multipart_boundary(headers)
            if boundary:  # a form with a binary file: its text fields are still fields
                raw = redact_multipart(raw, boundary, where, record)
            out.binary[where] = raw
            return {"encoding": "base64", "data": base64.b64encode(raw).decode("ascii")}
        body = text
        if "json" in _content_type(headers) or text.lstrip()[:1] in ("{", "["):
            try:
                body = json.loads(text, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                body = text
    if isinstance(body, str):
        ctype = _content_type(headers)
        boundary = _multipart_boundary(headers)
        if boundary:
            return redact_multipart(body.encode("utf-8"), boundary, where, record).decode("utf-8")
        if "x-www-form-urlencoded" in ctype or (not ctype and _FORM_RE.match(body.strip())):
            return redact_form(body, where, record)
        return body
    return redact_json(body, where, record)


def _multipart_boundary(headers: dict[str, Any]) -> str:
    """The boundary of a `multipart/*` body (RFC 2046), "" when the body is not one."""
    ctype = ""
    for name, value in headers.items():
        if name.lower() == "content-type":
            ctype = value[0] if isinstance(value, list) and value else str(value)
    if not ctype.strip().lower().startswith("multipart/"):
        return ""
    message = email.message.Message()
    message["Content-Type"] = ctype
    boundary = message.get_param("boundary")
    return boundary if isinstance(boundary, str) and 0 < len(boundary) <= 200 else ""


def redact_multipart(data: bytes, boundary: str, where: str, record: Record) -> bytes:
    """A multipart body (a browser's `multipart/form-data` form) with the content of every part whose name is a
    credential's replaced, each recorded at `{where}&{name}` like a form-encoded field: a `password` field, an OAuth
    `code` beside its `state`, a `private_key` file. Everything else is kept byte for byte (the scan then reads the
    whole body, file parts too). A part that does not parse as one is left to the scan."""
    delimiter = b"--" + boundary.encode("latin-1")
    pieces = data.split(delimiter)
    parts: list[tuple[int, int, str]] = []  # (piece, where its content starts, its field name)
    for i, piece in enumerate(pieces[1:], 1):
        if piece.startswith(b"--"):
            break  # the close delimiter: what follows is the epilogue
        end, gap = piece.find(b"\r\n\r\n"), 4
        if end == -1:
            end, gap = piece.find(b"\n\n"), 2
        if end == -1:
            continue
        head = email.parser.BytesHeaderParser().parsebytes(piece[:end].lstrip(b"\r\n") + b"\r\n\r\n")
        name = head.get_param("name", header="content-disposition")
        if name is not None:
            parts.append((i, end + gap, email.utils.collapse_rfc2231_value(name)))
    names = [name for _, _, name in parts]
    changed = False
    for i, start, name in parts:
        piece = pieces[i]
        trail = b"\r\n" if piece.endswith(b"\r\n") else b"\n" if piece.endswith(b"\n") else b""
        content = piece[start : len(piece) - len(trail)]
        if not content or content == REDACTED.encode():
            continue
        if is_secret_value_name(name) or is_signed_url_param(name) or is_oauth_code(name, names):
            pieces[i] = piece[:start] + REDACTED.encode() + trail
            record({"path": f"{where}&{name}", "rule": "secret-name"})
            changed = True
    return delimiter.join(pieces) if changed else data


def redact_form(text: str, where: str, record: Record) -> str:
    return _redact_pairs(text, f"{where}&", record, form=True)


def scan_capture(red: Redacted) -> Redacted:
    """Scan everything left after redaction and mask what is found, in place; returns `red`."""
    findings = red.findings
    cap = red.capture
    for key in list(cap):
        if key in ("request", "response"):
            continue
        cap[key] = mask_json(cap[key], key, findings)
    for where in ("request", "response"):
        part = cap[where]
        for key in list(part):
            path = f"{where}.{key}"
            if path in red.binary:
                masked = mask_binary(red.binary[path], path, findings)
                red.binary[path] = masked
                part[key] = {"encoding": "base64", "data": base64.b64encode(masked).decode("ascii")}
            else:
                if key == "url" and isinstance(part[key], str):
                    part[key] = mask_url(part[key], path, findings)
                elif key == "headers" and isinstance(part[key], dict):
                    part[key] = _mask_header_urls(part[key], path, findings)
                elif key == "body" and isinstance(part[key], str) and _FORM_RE.match(part[key].strip()):
                    part[key] = _mask_pairs(part[key], f"{path}?", findings)  # a form's values, decoded
                part[key] = mask_json(part[key], path, findings)
    return red


def _mask_header_urls(headers: dict[str, Any], where: str, findings: list[dict[str, str]]) -> dict[str, Any]:
    """The URLs of redirect and link headers scanned as a request URL is (`mask_url`: each decoded value on its own),
    before the headers are scanned whole."""
    out = dict(headers)
    for name, value in headers.items():
        if name.strip().lower() not in URL_HEADERS:
            continue
        path = join(where, name)

        def mask(url: str, place: str) -> str:
            return mask_url(url, place, findings)

        out[name] = map_header_urls(name, value, path, mask)
    return out


def mask_url(url: str, where: str, findings: list[dict[str, str]]) -> str:
    """`url` with every secret found in a decoded query or fragment value masked, each value scanned on its own.

    Scanned whole, a URL hides a token from rules that want it to end at a quote, a space or the end of the text
    (in a query it ends at `&`), and a percent-encoded token is not the token. The URL is left byte for byte as
    it was when nothing is found; the caller then scans it whole as well (a webhook URL is a secret as a whole).
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    query = _mask_pairs(parts.query, f"{where}?", findings)
    fragment = _mask_pairs(parts.fragment, f"{where}#", findings)
    if query == parts.query and fragment == parts.fragment:
        return url
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, fragment))


def _mask_pairs(text: str, where: str, findings: list[dict[str, str]]) -> str:
    if not text:
        return text
    pairs = parse_qsl(text, keep_blank_values=True)
    if not pairs:  # a fragment that is not `name=value&…`: the decoded text on its own
        decoded = unquote(text)
        masked = mask_text(decoded, where, findings)
        return text if masked == decoded else quote(masked, safe="[]:/")
    changed = False
    kept = []
    for name, value in pairs:
        masked = mask_text(value, f"{where}{name}", findings) if value else value
        changed = changed or masked != value
        kept.append((name, masked))
    return urlencode(kept, safe="[]:", quote_via=quote) if changed else text


def original_digest(raw: bytes | str | dict, key: bytes) -> str:
    """The capture as it arrived (its bytes; the canonical JSON of a dict), keyed: `hmac:<HMAC-SHA256 hex>`.

    Keyed, it tells the console whether two captures were the same without being an oracle for what was removed:
    a plain digest of a capture whose only secret is a 4-digit PIN gives the PIN back in 10,000 hashes to anyone
    who sees the rest of the capture. The key is the server's (`fixtures_review.staging.capture_digest_key`).
    """
    if isinstance(raw, dict):
        data = canonical.canonical_json(raw)
    else:
        data = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return "hmac:" + hmac.new(key, data, hashlib.sha256).hexdigest()


def intake(raw: bytes | str | dict, *, digest_key: bytes | None = None) -> Redacted:
    """Everything intake does before storage: parse, redact, scan and mask. The original digest is keyed by
    `digest_key` (`original_digest`); without a key none is kept (""), never a plain digest."""
    data = parse_capture(raw)
    digest = original_digest(raw, digest_key) if digest_key is not None else ""
    return scan_capture(redact_capture(data, original_digest=digest))


def body_bytes(body: Any) -> bytes:
    """The bytes of a stored body (a download's content): base64 decoded, text as UTF-8, JSON canonical."""
    if _is_encoded(body):
        return base64.b64decode(body["data"])
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    return canonical.canonical_json(body)


def gzip_b64(data: bytes) -> str:
    """A test and demo helper: bytes as a capture's gzip+base64 body data."""
    return base64.b64encode(gzip.compress(data, mtime=0)).decode("ascii")
