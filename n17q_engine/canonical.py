"""Digests exactly as DESIGN §3 defines them; every other module takes them from here."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


# One encoder, built once: json.dumps with these arguments builds a new JSONEncoder on every call, which is a
# third of the cost for the small values digested per event.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> bytes:
    """DESIGN §3: json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), UTF-8."""
    return _ENCODER.encode(value).encode("utf-8")


def canonical_line(value: Any) -> str:
    """One line of an events.jsonl, as text: `canonical_json(value)` decoded, with its newline."""
    return _ENCODER.encode(value) + "\n"


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
