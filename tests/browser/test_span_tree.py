"""The trace tree in real headless Chromium (issue 38, point 1): a real producer's trace opened as a tree, a span
collapsed and opened again from the keyboard, the detail panel reached from a tree row, axe clean at 1400 and 390 px."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from .conftest import shot
from .test_accessibility import BLOCKING, axe, report

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GENAI = Path(__file__).resolve().parents[1] / "data" / "producers" / "genai-openai.otlp.json"


def _import() -> str:
    out = io.StringIO()
    call_command("import_run", str(GENAI), "--json", stdout=out)
    return json.loads(out.getvalue())["run"]


@pytest.mark.parametrize("width", [1400, 390])
def test_the_tree_opens_collapses_from_the_keyboard_and_is_axe_clean(page, login, live_server, width):
    run_id = _import()
    login("viewer")
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{live_server.url}/runs/{run_id}/")
    page.locator(".trace-views a", has_text="Tree and timeline").click()
    page.wait_for_url("**view=tree**")
    tree = page.locator("ul.span-tree")
    tree.wait_for()
    agent = tree.locator(".node-span", has_text="invoke_agent weather-agent").first
    assert agent.locator(".duration").first.inner_text().strip().endswith("ms")
    rows_before = tree.locator(".tree-row:visible").count()
    # The agent span's toggle, from the keyboard: focus it, Enter closes it, its spans are hidden, Enter opens it.
    toggle = agent.locator(":scope > details > summary")
    toggle.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => !document.querySelector('ul.span-tree .node-span > details').open")
    assert tree.locator(".tree-row:visible").count() < rows_before
    assert not tree.locator(".tree-row", has_text="execute_tool list_alerts").is_visible()
    shot(page, f"span-tree-collapsed-{width}")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('ul.span-tree .node-span > details').open")
    assert tree.locator(".tree-row:visible").count() == rows_before
    # The tree is no wider than the window (the site header's own overflow at 390 px is not the tree's), and axe
    # finds nothing serious on the page.
    right = page.evaluate(
        "Math.max(...[...document.querySelectorAll('#trace *')].map(e => e.getBoundingClientRect().right))"
    )
    assert right <= width + 1, right
    violations = axe(page)
    blocking = [v for v in violations if v["impact"] in BLOCKING]
    assert blocking == [], report(blocking)
    page.locator("#trace").scroll_into_view_if_needed()
    shot(page, f"span-tree-{width}")
    # A tree row opens its event in the detail panel, the tree kept.
    tree.locator(".row-link", has_text="tool.result").first.click()
    page.wait_for_url("**event=**")
    assert "view=tree" in page.url
    page.locator("#detail").wait_for()
    assert page.locator("ul.span-tree .trace-row.selected").count() == 1
