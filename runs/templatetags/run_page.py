from __future__ import annotations

from typing import Any

from django import template
from django.http import QueryDict
from django.urls import reverse
from django.utils.html import escape, format_html

from runs.glossary import TERMS

register = template.Library()


@register.simple_tag(takes_context=True)
def query(context: Any, **changes: Any) -> str:
    """The current query string with some parameters changed (None or "" removes one)."""
    request = context.get("request")
    params = request.GET.copy() if request is not None else QueryDict(mutable=True)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag(takes_context=True)
def facet_query(context: Any, key: str) -> str:
    """The current query string with one trace facet toggled (and the trace back at its start)."""
    request = context.get("request")
    params = request.GET.copy() if request is not None else QueryDict(mutable=True)
    chosen = params.getlist("facet")
    params.setlist("facet", [k for k in chosen if k != key] if key in chosen else [*chosen, key])
    params.pop("trace_from", None)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.filter
def iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z") if value else ""


@register.filter
def filesize(value: Any) -> str:
    size = int(value or 0)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(value)


@register.filter
def row_seq(row: Any) -> int:
    return int(row.event.seq)


_TERMS = {term for term, _meaning in TERMS}


@register.simple_tag
def term(word: Any) -> str:
    """A product word linked to its glossary entry when the glossary has one; the word alone otherwise."""
    text = str(word or "")
    if text not in _TERMS:
        return str(escape(text))
    return format_html(
        '<a class="term" href="{}#term-{}">{}</a>', reverse("runs:glossary"), text.replace(" ", "-"), text
    )
