"""What an investigator does on the run page, in real headless Chromium: one test per story of the seeds, and the
keyboard path through focus."""

from __future__ import annotations

import pytest

from n17q_demo import stories
from runs.importer import run_import_from_path

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STORY_000 = "run-000-fail-open-replay"
STORY_001 = "run-001-naive-replay"
STORY_003 = "run-003-review-request"


def _import(run_id: str, tmp_path) -> None:
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == run_id)
    run_import_from_path(stories.write_bundle(story, tmp_path / run_id))


def row(page, event_id: str):
    return page.locator(f"#ev-{event_id}")


def test_story_000_shows_the_live_result_and_its_body_in_two_clicks(page, login, live_server, tmp_path):
    """The fail-open replay: its LIN014 edge is drawn, and what the live service answered is one click from it."""
    _import(STORY_000, tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_000}/")
    assert "LIN014" in page.locator("#findings").inner_text()
    # The broken edge is in the picture: tool calls and results are drawn.
    assert page.locator('#picture [data-code="LIN014"]').count() >= 1
    # Click one: the finding's edge. It selects the live result, whose body the detail panel shows.
    page.locator("#findings a.show-edge", has_text="LIN014").click()
    page.wait_for_url("**finding=**")
    detail = page.locator("#detail")
    detail.locator(".badge.origin-live").wait_for()
    body = detail.locator(".blob").inner_text()
    assert "req-7781" in body and "team-keys" in body
    shot(page, "story-000-live-result-body")
    page.locator("#detail").scroll_into_view_if_needed()
    shot(page, "story-000-detail-panel")


def test_story_001_shows_the_second_delivery_and_the_historical_approval_in_the_verdict(
    page, login, live_server, tmp_path
):
    _import(STORY_001, tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_001}/")
    verdict = page.locator(".verdict")
    effects = verdict.locator(".key-objects").inner_text()
    assert "duplicate of <m-5501@acme.example>" in effects and "revision 42 → 43" in effects
    approval = verdict.locator(".chip.bad", has_text="approval")
    assert "historical, from run run-001-recorded (live)" in approval.inner_text()
    assert "LIN005" in verdict.inner_text()
    shot(page, "story-001-verdict")
    # The delivery chip opens the world change in the detail panel.
    verdict.locator(".chip", has_text="world change").locator("a").click()
    page.wait_for_url("**event=e-001-mailbox-delivered**")
    assert "duplicate" in page.locator("#detail").inner_text()


def test_story_003_highlights_the_lin001_edge_from_its_finding(page, login, live_server, tmp_path):
    _import(STORY_003, tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    finding = page.locator("#findings li.finding", has_text="e-003-intent-review-request").filter(has_text="LIN001")
    finding.locator("a.show-edge").click()
    page.wait_for_url("**finding=**")
    selected = page.locator("#picture .broken-edge.selected")
    assert selected.count() == 1 and selected.get_attribute("data-code") == "LIN001"
    ends = sorted(page.locator("#picture .node.selected").evaluate_all("els => els.map(e => e.dataset.event)"))
    assert ends == ["e-003-focused-admitted", "e-003-intent-review-request"]
    page.locator("#picture").scroll_into_view_if_needed()
    shot(page, "story-003-lin001-edge")


def test_it_narrows_the_trace_to_a_focus_and_back_from_the_keyboard(page, login, live_server, tmp_path):
    _import(STORY_003, tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    link = page.locator("#ev-e-003-intent-review-request a.focus-link")
    link.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**focus=e-003-intent-review-request**")
    assert "focus-origin" in row(page, "e-003-intent-review-request").get_attribute("class")
    # The page scrolled to the focused row (within a pixel: the layout places rows at fractions of one).
    assert row(page, "e-003-intent-review-request").evaluate(
        "el => { const r = el.getBoundingClientRect(); return r.top >= -1 && r.bottom <= innerHeight + 1; }"
    )
    # Events outside the neighbourhood are dimmed, then hidden.
    outside = row(page, "e-003-a1-read-adapter")
    assert float(outside.evaluate("el => getComputedStyle(el).opacity")) < 1
    page.locator("#focus-bar a", has_text="hide them").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**narrow=hide**")
    assert row(page, "e-003-a1-read-adapter").count() == 0
    assert row(page, "e-003-focused-admitted").count() == 1
    shot(page, "run-003-focus-narrowed")
    # Select an event of the neighbourhood from the keyboard: the detail panel shows it.
    row(page, "e-003-focused-admitted").locator("a.row-link").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**event=e-003-focused-admitted**")
    assert "e-003-focused-receipt in ws-1" in page.locator("#detail").inner_text()
    page.locator("#focus-bar a", has_text="Clear focus").focus()
    page.keyboard.press("Enter")
    page.wait_for_function("() => !location.search.includes('focus=')")
    assert row(page, "e-003-a1-read-adapter").count() == 1


def test_it_copies_a_whole_digest_from_its_short_form(page, login, live_server, tmp_path):
    _import(STORY_003, tmp_path)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    button = page.locator("#findings button.copy").first
    whole = button.get_attribute("data-copy")
    assert whole.startswith("sha256:") and len(whole) == 71
    button.click()
    page.wait_for_function("() => document.querySelector('#findings button.copy').textContent === 'copied'")
    assert page.evaluate("navigator.clipboard.readText()") == whole


def test_it_shows_a_viewer_no_import_control(page, login, live_server):
    login("viewer")
    assert page.locator("a", has_text="Import run").count() == 0
    response = page.goto(f"{live_server.url}/runs/import/")
    assert response.status == 403
    assert "does not allow this page" in page.locator("main").inner_text()
    shot(page, "viewer-import-refused")


def test_it_holds_every_state_as_text_when_shown_in_grey(page, login, live_server, tmp_path):
    """Accessibility: the page in greyscale still says which rows are in focus, which results came from where, and
    which edges are broken."""
    _import(STORY_000, tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_000}/?focus=e-000r-res-status")
    # Through the CSSOM: the CSP refuses an injected <style> (no 'unsafe-inline'), not a script setting a style.
    page.evaluate("document.documentElement.style.filter = 'grayscale(1)'")
    assert page.locator("#trace .focus-tag").count() >= 1
    assert "live" in row(page, "e-000r-res-status").inner_text()
    assert "LIN014" in page.locator("#picture").inner_text()
    shot(page, "run-000-greyscale")
