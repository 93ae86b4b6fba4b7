"""Captured HTML, shown sanitized: the one function that turns a captured page into markup the console shows.

A captured page is evidence, not content the console trusts. What it may keep is structure and text: no
scripts, no styles, no event handlers, no `hx-*` (or `data-hx-*`) attributes htmx would act on, no live
links, no images or frames that would fetch anything. Every attribute is dropped (an `<a>` keeps its text,
not its `href`), and the template puts the result inside an `hx-disable` container as a second guard. The raw
bytes are only ever a download (`Content-Disposition: attachment`), never rendered.
"""

from __future__ import annotations

import bleach

ALLOWED_TAGS = frozenset(
    {
        "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "dd", "del", "dfn", "div", "dl", "dt",
        "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q",
        "s", "samp", "small", "span", "strong", "sub", "sup", "table", "tbody", "td", "tfoot", "th", "thead",
        "time", "tr", "u", "ul", "var",
    }
)  # fmt: skip

_CLEANER = bleach.Cleaner(
    tags=ALLOWED_TAGS,
    attributes={},  # no attribute survives: no handlers, no href/src, no hx-*, no style
    protocols=[],
    strip=True,  # a refused tag is removed (its text stays, as text), not shown escaped
    strip_comments=True,
)


def sanitize_captured_html(html: str) -> str:
    """Captured HTML reduced to inert structure and text. The result is safe to mark safe in a template."""
    return _CLEANER.clean(html)


def looks_like_html(body: object, content_type: str) -> bool:
    if not isinstance(body, str):
        return False
    if "html" in content_type.lower():
        return True
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html")) or ("<body" in head)
