"""What an investigator does on the run page, in real headless Chromium."""

from __future__ import annotations

import pytest

from n17q_demo import stories
from runs.importer import run_import_from_path

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STORY_003 = "run-003-review-request"


@pytest.fixture
def story_003(tmp_path):
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == STORY_003)
    run_import_from_path(stories.write_bundle(story, tmp_path / "003"))


def item(page, pane: str, event_id: str):
    return page.locator(f"#ev-{pane}-{event_id}")


def test_it_focuses_the_review_request_and_its_broken_lineage_in_every_pane(page, login, live_server, story_003):
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    page.locator("#pane-effects a.focus-link", has_text="e-003-intent-review-request").click()
    page.wait_for_url("**focus=e-003-intent-review-request")
    page.wait_for_selector("#ev-effects-e-003-intent-review-request.focused")
    # The admission that authorized it ran in workspace one; the artifact it published came from two.
    admission = item(page, "evidence", "e-003-focused-admitted")
    assert "focused" in admission.get_attribute("class")
    assert "ws-1" in admission.inner_text()
    artifact = item(page, "workspaces", "e-003-artifact-created")
    assert "focused" in artifact.get_attribute("class") and "ws-2" in artifact.inner_text()
    assert "focused" in item(page, "policy", "e-003-policy-allow").get_attribute("class")
    # The broken edge is drawn dashed and labelled with its code, and its sentence is readable text.
    lin001 = page.locator('#picture g.broken-edge[data-code="LIN001"]').first
    assert lin001.locator("text").first.text_content().startswith("LIN001")
    assert page.locator("#picture .broken-list").inner_text().count("LIN001") >= 1
    assert "in focus" in page.locator("#findings li.focused").first.inner_text()
    shot(page, "run-003-review-request-focused")


def test_it_shows_a_claims_supports_when_the_claim_is_selected(page, login, live_server, story_003):
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    page.locator("#pane-account a.focus-link", has_text="e-003-claim").click()
    page.wait_for_selector("#ev-account-e-003-claim.focused")
    claim = item(page, "account", "e-003-claim").inner_text()
    assert "e-003-focused-receipt (completed, 0 failed)" in claim
    assert "focused" in item(page, "evidence", "e-003-focused-receipt").get_attribute("class")
    shot(page, "run-003-claim-focused")


def test_it_focuses_a_node_of_the_picture_from_the_keyboard(page, login, live_server, story_003):
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/")
    node = page.locator('#picture a.node[data-event="e-003-artifact-created"]')
    node.focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**focus=e-003-artifact-created")
    page.wait_for_selector('#picture a.node.focused[data-event="e-003-artifact-created"]')
    assert "focused" in item(page, "workspaces", "e-003-artifact-created").get_attribute("class")


def test_it_keeps_the_focus_in_a_shared_link(page, login, live_server, story_003):
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/?focus=e-003-focused-admitted")
    assert "focused" in item(page, "evidence", "e-003-focused-admitted").get_attribute("class")
    assert "e-003-focused-admitted" in page.locator("#focus-bar").inner_text()


def test_it_shows_a_viewer_no_import_control(page, login, live_server):
    login("viewer")
    assert page.locator("a", has_text="Import run").count() == 0
    response = page.goto(f"{live_server.url}/runs/import/")
    assert response.status == 403
    assert "does not allow this page" in page.locator("main").inner_text()
    shot(page, "viewer-import-refused")


def test_it_holds_every_state_as_text_when_shown_in_grey(page, login, live_server, story_003):
    """Accessibility: the page in greyscale still says which items are focused and which edges are broken."""
    login("viewer")
    page.goto(f"{live_server.url}/runs/{STORY_003}/?focus=e-003-intent-review-request")
    # Through the CSSOM: the CSP refuses an injected <style> (no 'unsafe-inline'), not a script setting a style.
    page.evaluate("document.documentElement.style.filter = 'grayscale(1)'")
    assert page.locator("#pane-evidence .focus-tag").count() >= 1
    labels = page.locator("#picture .broken-label").all_text_contents()
    assert "LIN001" in labels
    shot(page, "run-003-greyscale")
