"""Blobs shown in the detail panel: rendered by media type, bounded, never trusted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from runs import blob_preview as bp
from runs.models import blob_storage_name

pytestmark = pytest.mark.django_db

STATIC = Path(__file__).resolve().parents[2] / "static"


def _stored(data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    store = storages["blobs"]
    name = blob_storage_name(digest)
    if not store.exists(name):
        store.save(name, ContentFile(data))
    return digest


def _preview(data: bytes, media_type: str) -> bp.BlobPreview:
    head = data[: bp.PREVIEW_BYTES + 1]
    return bp.blob_preview_of(head, digest=_stored(data), media_type=media_type, size=len(data))


def test_it_folds_the_long_members_of_a_json_object_and_highlights_them():
    value = {"status": "open", "items": [{"n": i} for i in range(30)]}
    preview = _preview(json.dumps(value).encode(), "application/json")
    assert preview.render == "json"
    by_key = {m.key: m for m in preview.members}
    assert not by_key["status"].folded and by_key["items"].folded
    assert '<span class="nt">"status"</span>' in by_key["status"].html


def test_it_shows_a_patch_as_a_diff_with_line_numbers():
    patch = b"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"
    preview = _preview(patch, "text/x-diff")
    assert preview.render == "diff"
    assert '<span class="gi">+new</span>' in preview.html and "linenos" in preview.html
    # A patch is known by its shape too, whatever type the harness gave it.
    assert _preview(patch, "text/plain").render == "diff"


def test_it_shows_captured_html_only_through_the_sanitizer():
    page = b"<html><body><h1>Status</h1><script>alert(1)</script><a href='https://evil' onclick='x()'>go</a>"
    page += b"<img src='https://tracker/p.gif'></body></html>"
    preview = _preview(page, "text/html")
    assert preview.render == "html"
    assert "<h1>Status</h1>" in preview.html
    for forbidden in ("<script", "onclick", "href=", "<img", "https://tracker"):
        assert forbidden not in preview.html, forbidden
    # The markup itself is shown as highlighted text: the tag is there, escaped, never as a tag.
    assert '<span class="nt">script</span>' in preview.source_html and "<script" not in preview.source_html


def test_it_shows_raster_images_and_treats_svg_as_bytes():
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    assert _preview(png, "image/png").render == "image"
    svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"
    assert _preview(svg, "image/svg+xml").render == "text"  # shown as text, never as an image
    # A "PNG" that is not one is not shown as an image.
    assert _preview(b"<html>not a png</html>", "image/png").render != "image"


def test_it_shows_binary_as_its_first_bytes_in_hex():
    preview = _preview(bytes(range(256)) * 4, "application/octet-stream")
    assert preview.render == "binary" and preview.hex_head.startswith("00 01 02")


def test_it_reads_only_the_first_part_of_a_large_blob():
    text = ("line of a long command log\n" * 20_000).encode()
    assert len(text) > bp.PREVIEW_BYTES
    preview = _preview(text, "text/plain")
    assert preview.truncated and preview.shown_bytes == bp.PREVIEW_BYTES
    assert preview.html.count("line of a long command log") < 20_000
    # A large JSON document is not parsed from a cut window: it is shown highlighted as text.
    big = json.dumps({"rows": ["x" * 100] * 2000}).encode()
    cut = _preview(big, "application/json")
    assert cut.truncated and cut.render == "text"


def test_it_says_when_the_store_does_not_hold_the_bytes():
    preview = bp.blob_preview_of(None, digest="sha256:" + "0" * 64, media_type="text/plain", size=10)
    assert preview.render == "missing"


def test_the_highlight_stylesheet_is_the_one_the_highlighter_makes():
    committed = (STATIC / "highlight.css").read_text()
    assert committed.split("\n", 1)[1] == bp.pygments_stylesheet()
