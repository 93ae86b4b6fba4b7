"""The search over runs and the compare page in real headless Chromium (issue 38 §3): filter the list, keep the view
in the address, tick two runs and compare them; axe finds nothing serious at 1400 and 390 px wide."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

import pytest
from django.core.management import call_command

from .conftest import htmx_settled, shot
from .test_accessibility import BLOCKING, axe, report

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(capsys) -> dict:
    call_command("load_demo", "--json")
    return json.loads(capsys.readouterr().out)


def no_blocking(page) -> None:
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert blocking == [], report(blocking)


def test_filter_the_list_then_compare_two_runs(page, login, live_server, demo):
    login("viewer")
    page.goto(f"{live_server.url}/")
    page.fill("#id_model", "n17q")
    page.select_option("#id_kind", "recorded")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**model=n17q**")
    htmx_settled(page)
    params = parse_qs(urlparse(page.url).query)
    assert params["model"] == ["n17q"] and params["kind"] == ["recorded"]
    # Only the filters in use are in the address.
    assert sorted(params) == ["kind", "model"], page.url
    rows = page.locator("table.run-search tbody tr")
    assert rows.count() == 3
    assert "match" in page.locator(".search-count").inner_text()
    # The address keeps the view: reloading it shows the same filter in the form and the same rows.
    ids = page.locator("table.run-search th.run-name .run-id").all_inner_texts()
    page.reload()
    assert page.input_value("#id_model") == "n17q"
    assert page.locator("table.run-search th.run-name .run-id").all_inner_texts() == ids
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        no_blocking(page)
        shot(page, f"run-search-{width}")
    page.set_viewport_size({"width": 1400, "height": 900})
    boxes = page.locator('table.run-search input[type=checkbox][form="compare"]')
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.click("#compare button[type=submit]")
    page.wait_for_url("**/compare/**")
    assert parse_qs(urlparse(page.url).query)["run"] == ids[:2]
    assert page.locator("h1").inner_text() == "Compare two runs"
    assert page.locator("table.compare-table").count() == 5
    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 900})
        no_blocking(page)
        shot(page, f"run-compare-{width}")
