"""Issue 16, point 1, in real headless Chromium: on story 000's run the pre-launch summary follows the scenario
version selector (one htmx request), and a launch whose summary is no longer what would launch is refused."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from fixtures_review.models import ScenarioVersion
from fixtures_review.services import scenario_version_mint
from replays.models import Replay

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    scenario_version_mint(
        base=ScenarioVersion.objects.get(name="docs-research", version=1),
        exclude_tools={"status.lookup": "the status service is not modelled yet"},
        user=None,
        source="exclusion",
    )


def test_it_follows_the_version_selector_and_refuses_a_stale_summary(page, login, live_server, demo):
    login("operator")
    page.goto(f"{live_server.url}/runs/run-000-recorded/")
    page.click("a.button:has-text('Replay in fixtures')")
    page.wait_for_selector("#summary-h")
    summary = page.locator("section.summary")
    assert "docs-research@1" in summary.inner_text() and "no fixture holds this request" in summary.inner_text()
    options = page.locator("select[name=scenario] option").all_inner_texts()
    assert options == ["docs-research@1 — recorded version", "docs-research@2 — newer (a tool excluded)"]
    first_digest = page.locator("input[name=summary_digest]").input_value()
    shot(page, "launch-summary-recorded-version")

    with page.expect_request(lambda r: "scenario=docs-research%402" in r.url and r.headers.get("hx-request")):
        page.select_option("select[name=scenario]", "docs-research@2")
    page.wait_for_function(
        "() => document.querySelector('section.summary').innerText.includes('docs-research@2')", timeout=10000
    )
    text = page.locator("section.summary").inner_text()
    assert "excluded from the scenario: the status service is not modelled yet" in text
    assert page.url.endswith("/runs/run-000-recorded/launch/replay/")  # an htmx swap, not a page load
    assert page.locator("input[name=summary_digest]").input_value() != first_digest
    shot(page, "launch-summary-newer-version")

    # The selector moves back without its change being seen (as when the page's summary request has not come
    # back): the summary on screen is @2's, the form would launch @1. The launch is refused, nothing starts.
    page.evaluate("document.querySelector('select[name=scenario]').value = 'docs-research@1'")
    with page.expect_navigation() as nav:
        page.click("form.launch-form button.primary[type=submit]")
    assert nav.value.status == 400
    refusal = page.locator("p.launch-refused").inner_text()
    assert refusal == "What would launch changed since you looked: review it again."
    fresh = page.locator("section.summary").inner_text()
    assert "docs-research@1" in fresh and "no fixture holds this request" in fresh  # what would launch now
    assert page.locator("select[name=scenario]").input_value() == "docs-research@1"
    assert Replay.objects.count() == 0
    assert re.search(r"/launch/replay/$", page.url)
    shot(page, "launch-summary-stale-refused")


@pytest.mark.parametrize("button", ["replay", "counterfactual", "inspect"])
def test_every_launch_page_fits_a_1400_pixel_window(page, login, live_server, demo, button):
    """Issue 38's tour: the counterfactual page overflowed a 1400 px window (its checkpoint select's long choices set
    the width of the form's grid). Every launch page of story 003, the run with the most checkpoints, fits."""
    page.set_viewport_size({"width": 1400, "height": 1000})
    login("operator")
    page.goto(f"{live_server.url}/runs/run-003-review-request/launch/{button}/")
    page.wait_for_selector("form.launch-form")
    wide = page.evaluate(
        "() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 1400)"
        ".map(e => e.tagName + (e.name ? '[' + e.name + ']' : ''))"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400 and wide == [], wide
