"""Text forms shared by every step of the OTLP format: text the store can hold (`_storable`), one short line a
person reads (`_one_line`), a value as text (`_scalar_text`), nanoseconds as the bundle's ISO time (`_iso`).

The bottom of the package: it imports none of its siblings."""

from __future__ import annotations

import json
import re
import time
from typing import Any

_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]+")


def _storable(text: str) -> str:
    """Text the store can hold: NUL and lone UTF-16 surrogates (which JSON may carry) become U+FFFD."""
    if text.isascii() and "\x00" not in text:  # most texts, without the search (ASCII holds no surrogate)
        return text
    return _UNSTORABLE.sub("\ufffd", text) if _UNSTORABLE.search(text) else text


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _one_line(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else _scalar_text(value)
    line = _NOT_ONE_LINE.sub(" ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


_SECOND_CACHE: dict[int, str] = {}


def _iso(ns: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC with microseconds (the bundle's time form)."""
    seconds, rest = divmod(ns, 1_000_000_000)
    base = _SECOND_CACHE.get(seconds)
    if base is None:
        if len(_SECOND_CACHE) > 4096:
            _SECOND_CACHE.clear()
        base = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        _SECOND_CACHE[seconds] = base
    return f"{base}.{rest // 1000:06d}+00:00"
