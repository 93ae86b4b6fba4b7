"""How many values a JSON document can hold, counted on its bytes before it is parsed (issue 35).

A parsed value costs 50-200 bytes of Python objects whatever its text costs (`{},` is three bytes and a 64-byte
dict), so a document's size does not bound its parse: 60 MB of `{}` is 20 million dicts. These bounds are counted
without parsing, in C-speed passes over the bytes, so that a reader can refuse such a document before it builds it.
"""

from __future__ import annotations

import re

# A JSON string, escapes included (the unrolled form: linear, no backtracking between alternatives).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_TEXT_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def json_values_bound(raw: bytes | str, cap: int | None = None) -> int:
    """At least as many as the JSON values `raw` holds: every value but the first follows a comma or opens after a
    bracket. The quick count includes commas and brackets inside strings; when it passes `cap`, they are counted
    again with the strings left out, so that a document of long texts is not refused for its punctuation."""
    if isinstance(raw, str):
        quick = raw.count(",") + raw.count("[") + raw.count("{") + 1
        if cap is None or quick <= cap:
            return quick
        text = _JSON_TEXT_STRING.sub("", raw)
        return text.count(",") + text.count("[") + text.count("{") + 1
    quick = raw.count(b",") + raw.count(b"[") + raw.count(b"{") + 1
    if cap is None or quick <= cap:
        return quick
    outside = _JSON_STRING.sub(b"", raw)
    return outside.count(b",") + outside.count(b"[") + outside.count(b"{") + 1
