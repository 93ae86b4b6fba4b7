"""Digests exactly as DESIGN §3 defines them; every other module takes them from here."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from json import encoder as json_encoder
from typing import Any

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


# One encoder, built once: json.dumps with these arguments builds a new JSONEncoder on every call, which is a
# third of the cost for the small values digested per event.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _c_encode() -> Callable[[Any], str]:
    """`_ENCODER.encode`, minus what it redoes on every call: `JSONEncoder.iterencode` builds a closure and a new
    C encoder each time (a third of the time of a small value). This is that C encoder, built once with the
    arguments `iterencode` gives it for `_ENCODER`, so the text is the same, character for character (tested
    against json.dumps). Its one difference: no reference-cycle bookkeeping, so a value that contains itself
    raises RecursionError rather than ValueError; nothing this package encodes is cyclic (parsed JSON and
    dicts built from it)."""
    make = getattr(json_encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator: the documented path
        return _ENCODER.encode
    c_encoder = make(
        None,  # markers: the cycle check, off
        _ENCODER.default,
        json_encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        _ENCODER.sort_keys,
        _ENCODER.skipkeys,
        _ENCODER.allow_nan,
    )
    join = "".join

    def encode(value: Any) -> str:
        return join(c_encoder(value, 0))

    return encode


_encode = _c_encode()


def canonical_json(value: Any) -> bytes:
    """DESIGN §3: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), UTF-8."""
    return _encode(value).encode("utf-8")


def canonical_line(value: Any) -> str:
    """One line of an events.jsonl, as text: `canonical_json(value)` decoded, with its newline."""
    return _encode(value) + "\n"


def digest_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_json(value: Any) -> str:
    return digest_bytes(canonical_json(value))


def request_digest(normalized_request: Any) -> str:
    """The digest a tool call records for its normalized request (the example bundle's rule).

    A fixture is keyed by (tool, contract revision, this digest): the revision sits beside the digest,
    so the same request under another contract revision is another key.
    """
    return digest_json(normalized_request)


def evidence_set_digest(admission_ids: Iterable[str]) -> str:
    """The digest an approval must carry to bind an intent's exact evidence set."""
    return digest_json(sorted(admission_ids))


def is_digest(value: object) -> bool:
    return isinstance(value, str) and DIGEST_RE.match(value) is not None
