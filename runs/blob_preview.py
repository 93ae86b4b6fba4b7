"""A stored blob shown to a person: rendered by its media type, bounded, never trusted.

The detail panel reads at most PREVIEW_BYTES of a blob (the rest is a download), so a 64 MB command log costs
what a 2 KB one does. JSON is pretty-printed and highlighted with its nested members folded, a patch is shown
as a diff, other text with line numbers (Pygments does the highlighting: its lexers know the formats, and its
HTML formatter emits class names the stylesheet colours, so the CSP needs no inline style). Captured HTML goes
through the one sanitizer (console.captured_html: captures and run blobs share it). Raster images are shown
from the blob's own URL, served inline only for the raster types a browser cannot run. Anything else is binary:
its size, digest, the first bytes in hex, and the download.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, HtmlLexer, JsonLexer, TextLexer

from console.captured_html import sanitize_captured_html

from .blob_access import run_blob_open
from .models import RunBlob

PREVIEW_BYTES = 64 * 1024
# Raster formats a browser shows and never runs; an SVG (script inside) is a download like any other bytes.
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_IMAGE_MAGIC = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
# A JSON member longer than this many lines is folded (a <details> closed by default).
FOLD_LINES = 12

_LINES = HtmlFormatter(linenos="table", cssclass="hl", wrapcode=True)
_PLAIN = HtmlFormatter(cssclass="hl", wrapcode=True)


@dataclass
class JsonMember:
    key: str
    html: SafeString
    lines: int
    folded: bool


@dataclass
class BlobPreview:
    digest: str
    media_type: str
    size: int
    role: str
    # "json", "diff", "text", "html", "image", "binary", "missing" (the store does not hold the bytes) or "expired"
    # (the retention sweep removed them: `expiry` says when, under which class, and which record says so).
    render: str
    truncated: bool = False
    shown_bytes: int = 0
    html: SafeString = field(default_factory=lambda: mark_safe(""))
    source_html: SafeString = field(default_factory=lambda: mark_safe(""))  # captured HTML's markup, highlighted
    members: list[JsonMember] = field(default_factory=list)  # a JSON object's top-level members
    hex_head: str = ""
    expiry: Any = None  # runs.retention.Expiry when render == "expired"


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json") or media_type == "application/x-ndjson"


def _is_diff(media_type: str, text: str) -> bool:
    if media_type in ("text/x-diff", "text/x-patch", "application/x-patch", "application/x-diff"):
        return True
    head = text.lstrip()[:200]
    return head.startswith(("diff --git ", "--- ", "Index: ")) and "\n+++ " in text[:2000]


def _is_html(media_type: str, text: str) -> bool:
    if media_type in ("text/html", "application/xhtml+xml"):
        return True
    head = text.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html"))


def _looks_textual(head: bytes, media_type: str) -> bool:
    if media_type.startswith("text/") or _is_json(media_type) or media_type in ("message/rfc822", "application/xml"):
        return True
    if b"\x00" in head[:4096]:
        return False
    try:
        head[:4096].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start > 4090  # only a character cut at the window's edge
    return True


def _decode(data: bytes) -> str:
    # The window may end inside a multi-byte character: drop that tail rather than show a replacement mark.
    return data.decode("utf-8", errors="ignore") if len(data) < 4 else data.decode("utf-8", errors="replace")


def _json_members(value: dict[str, Any]) -> list[JsonMember]:
    members = []
    for key, item in value.items():
        text = json.dumps({key: item}, indent=2, ensure_ascii=False)
        # Drop the wrapping braces: each member reads as a line of the object it belongs to.
        inner = "\n".join(line[2:] for line in text.splitlines()[1:-1])
        lines = inner.count("\n") + 1
        members.append(
            JsonMember(
                key=str(key),
                html=mark_safe(highlight(inner, JsonLexer(), _PLAIN)),
                lines=lines,
                folded=lines > FOLD_LINES,
            )
        )
    return members


def blob_preview(run_blob: RunBlob, *, expiry: Any = None) -> BlobPreview:
    """A blob of a run, as its event's panel shows it: read through the run's own hold (runs.blob_access), so a run
    whose hold ended shows "expired" with `expiry` (the record that ended it), never bytes another run still holds."""
    digest, size = run_blob.blob.digest, run_blob.blob.size
    handle = run_blob_open(run_blob)
    if handle is None:
        preview = blob_preview_of(None, digest=digest, media_type=run_blob.media_type, size=size, role=run_blob.role)
        if run_blob.bytes_removed:
            preview.render, preview.expiry = "expired", expiry
        return preview
    with handle:
        try:
            head: bytes | None = handle.read(PREVIEW_BYTES + 1)
        except OSError:
            head = None
    return blob_preview_of(head, digest=digest, media_type=run_blob.media_type, size=size, role=run_blob.role)


def blob_preview_of(head: bytes | None, *, digest: str, media_type: str, size: int, role: str = "") -> BlobPreview:
    """The preview of a blob whose first bytes are `head` (at most PREVIEW_BYTES + 1 of them; None: not held)."""
    preview = BlobPreview(digest=digest, media_type=media_type, size=size, role=role, render="missing")
    if head is None:
        return preview
    truncated = len(head) > PREVIEW_BYTES or size > PREVIEW_BYTES
    data = head[:PREVIEW_BYTES]
    preview.truncated, preview.shown_bytes = truncated, len(data)
    if media_type in INLINE_IMAGE_TYPES and data.startswith(_IMAGE_MAGIC[media_type]):
        preview.render, preview.shown_bytes = "image", 0
        return preview
    if not _looks_textual(data, media_type):
        preview.render = "binary"
        preview.hex_head = " ".join(f"{b:02x}" for b in data[:256])
        preview.shown_bytes = min(len(data), 256)
        return preview
    text = _decode(data)
    if _is_json(media_type) or (text.lstrip()[:1] in ("{", "[") and not truncated):
        parsed: Any = None
        if not truncated:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict):
            preview.render = "json"
            preview.members = _json_members(parsed)
            return preview
        if parsed is not None:
            preview.render = "json"
            pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
            preview.html = mark_safe(highlight(pretty, JsonLexer(), _LINES))
            return preview
        if _is_json(media_type):
            # Cut short (or not JSON after all): highlighted as it is, with line numbers.
            preview.render = "text"
            preview.html = mark_safe(highlight(text, JsonLexer(), _LINES))
            return preview
    if _is_diff(media_type, text):
        preview.render = "diff"
        preview.html = mark_safe(highlight(text, DiffLexer(), _LINES))
        return preview
    if _is_html(media_type, text):
        preview.render = "html"
        preview.html = mark_safe(sanitize_captured_html(text))
        preview.source_html = mark_safe(highlight(text, HtmlLexer(), _LINES))
        return preview
    preview.render = "text"
    preview.html = mark_safe(highlight(text, TextLexer(), _LINES))
    return preview


def pygments_stylesheet() -> str:
    """The highlighter's colours as a stylesheet (static/highlight.css is generated from this; see its test)."""
    return _PLAIN.get_style_defs(".hl") + "\n"
