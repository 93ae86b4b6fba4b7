"""Digests as people read them: shortened to an algorithm and 8 hex digits, the whole value a click away."""

from __future__ import annotations

import re
from typing import Any

# A whole digest inside text: sha256:<64 hex> (content) or hmac:<64 hex> (a keyed identity).
DIGEST_IN_TEXT = re.compile(r"\b(?:sha256|hmac):[0-9a-f]{64}\b")
_PREFIXES = ("sha256:", "hmac:")


def digest_short(digest: Any) -> str:
    """A digest as people read it: its algorithm and the first 8 hex digits; anything else as it is."""
    text = str(digest or "")
    for prefix in _PREFIXES:
        if text.startswith(prefix) and len(text) > len(prefix) + 8:
            return text[: len(prefix) + 8] + "…"
    return text
