"""Redirect-like results (seed 000, "The test suite attacked fallback paths"): a fixture whose answer points
somewhere else is not an observation of the world, it is an invitation to go and look there.

A replay never follows one: the call stops as `incomplete_test_world` (`fixture.missing`, its reason naming the
fixture and the target), with no client built and nothing sent (replay/calls.py, docs/replay-in-ci.md). The answer
to record is the target's, as a fixture of its own.

What reads as a redirect (`redirect_like`): a body with an HTTP status 300-399 (`status`, `status_code`, `code`,
`http_status`) or a redirect field holding a URL
(`location`, `redirect`, `redirect_url`, `redirect_to`, `moved_to`, also inside a `headers` object); a body that is a
"moved to https://…" notice (the whole body, or a top-level text field of it: a search hit that mentions a move
further down is content, not a redirect); and an HTML meta refresh naming a URL. Text is read up to SCAN_CHARS.
"""

from __future__ import annotations

import re
from typing import Any

STATUS_FIELDS = ("status", "status_code", "code", "http_status")
TARGET_FIELDS = ("location", "redirect", "redirect_url", "redirect_to", "moved_to", "url_moved_to")
TEXT_FIELDS = ("message", "text", "body", "detail", "error", "html", "content")
SCAN_CHARS = 64 * 1024
_URL = r"(?:https?:)?//[^\s\"'<>)]+"
_MOVED = re.compile(
    rf"\b(?:moved(?:\s+permanently)?|redirect(?:ed|ing)?|relocated|now\s+lives|has\s+moved)\b[^.\n]{{0,60}}?"
    rf"\b(?:to|at)\s*:?\s*<?(?P<url>{_URL})",
    re.IGNORECASE,
)
_META_REFRESH = re.compile(
    r"<meta[^>]+http-equiv\s*=\s*[\"']?refresh[\"']?[^>]*?content\s*=\s*[\"'][^\"']*?url\s*=\s*'?(?P<url>[^\"'>\s]+)",
    re.IGNORECASE,
)


def _status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _target(fields: dict[str, Any]) -> str | None:
    lowered = {str(k).lower().replace("-", "_"): v for k, v in fields.items()}
    for name in TARGET_FIELDS:
        value = lowered.get(name)
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = value[0]
        if isinstance(value, str) and re.match(_URL, value.strip().removeprefix("https:").removeprefix("http:")):
            return value.strip()[:200]
    return None


def _text(value: str) -> str | None:
    text = value[:SCAN_CHARS]
    for pattern, what in ((_META_REFRESH, "a meta refresh to"), (_MOVED, "a notice that it moved to")):
        found = pattern.search(text)
        if found:
            return f"{what} {found['url'][:200]}"
    return None


def redirect_like(body: Any) -> str | None:
    """What makes a response body a redirect, in words, or None."""
    if isinstance(body, str):
        return _text(body)
    if not isinstance(body, dict):
        return None
    lowered = {str(k).lower(): v for k, v in body.items()}
    headers = lowered.get("headers")
    target = _target(body) or (_target(headers) if isinstance(headers, dict) else None)
    for name in STATUS_FIELDS:
        status = _status(lowered.get(name))
        if status is not None and 300 <= status <= 399:
            return f"HTTP {status}" + (f" to {target}" if target else "")
    if target is not None:
        return f"a redirect to {target}"
    for name in TEXT_FIELDS:
        value = lowered.get(name)
        if isinstance(value, str):
            found = _text(value)
            if found is not None:
                return found
    return None
