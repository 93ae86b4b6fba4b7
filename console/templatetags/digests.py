"""`{% digest value %}` and `|digests_shortened`: every page shows digests the same way (static/n17q.js copies)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from console.digests import DIGEST_IN_TEXT, digest_short

register = template.Library()


@register.simple_tag
def digest(value: Any) -> str:
    """A digest shortened, whole in its title and behind a copy button; without JavaScript the title still has it."""
    text = str(value or "")
    if not text:
        return ""
    return format_html(
        '<span class="digest"><code title="{}">{}</code>'
        '<button type="button" class="copy" data-copy="{}" aria-label="Copy {}">copy</button></span>',
        text,
        digest_short(text),
        text,
        text,
    )


@register.filter
def digests_shortened(text: Any) -> SafeString:
    """Text (a finding's sentence, say) with every whole digest in it shortened behind a copy button."""
    escaped = str(escape(str(text or "")))
    return mark_safe(DIGEST_IN_TEXT.sub(lambda m: str(digest(m.group(0))), escaped))
