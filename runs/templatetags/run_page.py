from typing import Any

from django import template
from django.http import QueryDict

from runs import run_page

register = template.Library()


@register.filter
def describe_item(item: run_page.Item) -> list[tuple[str, str]]:
    return run_page.describe(item.body, item.related)


@register.simple_tag(takes_context=True)
def query(context: Any, **changes: Any) -> str:
    """The current query string with some parameters changed (None or "" removes one)."""
    request = context.get("request")
    params = request.GET.copy() if request is not None else QueryDict(mutable=True)
    for name in ("pane",):
        params.pop(name, None)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.filter
def short_digest(value: Any) -> str:
    return run_page._short(value)


@register.filter
def iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z") if value else ""


@register.simple_tag(takes_context=True)
def pane_query(context: Any, pane: run_page.Pane, from_seq: int | None) -> str:
    return query(context, **{f"{pane.key}_from": from_seq or ""})


@register.filter
def attr_seq(item: run_page.Item) -> int:
    return item.event.seq
