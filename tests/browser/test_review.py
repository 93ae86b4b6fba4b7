"""Fixture review in real headless Chromium: the reviewer's path to a new scenario version, four eyes, and
captured HTML that tries to run script or send requests."""

from __future__ import annotations

import json

import pytest

from fixtures_review.services import capture_stage
from tests.fixtures_review.conftest import search_capture, status_capture

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def scenarios(db, reviewed_connections):  # the captures come through reviewed connections (tests/conftest.py)
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios

    for package in seed_scenarios.seed_packages():
        scenario_import(package, source="demo")


def stage(capture, user=None):
    return capture_stage(raw=json.dumps(capture).encode(), user=user).recording


def test_a_reviewer_redacts_a_field_approves_and_sees_the_new_scenario_version(
    page, login, live_server, role_user, scenarios
):
    rec = stage(status_capture(), user=role_user("operator", "harness-op"))
    login("reviewer")
    page.goto(f"{live_server.url}/review/")
    page.locator("a", has_text=rec.public_id).click()
    page.wait_for_url(f"**/review/{rec.public_id}/")
    assert "not_found" in page.locator("#response-body").inner_text()
    shot(page, "review-recording-before")

    page.select_option("#redact-path", "response.body.error")
    page.fill("#redact-form input[name=reason]", "the error text names an internal host")
    page.click("#redact-form button[type=submit]")
    page.wait_for_selector("text=Redacted response.body.error.")
    assert '"error": "[redacted]"' in page.locator("#response-body").inner_text()
    assert "redact by reviewer-user" in page.locator("#redactions").inner_text()
    # Four eyes on content: the redacting reviewer cannot approve what they changed; a second reviewer does.
    assert "four eyes: you redacted response.body.error" in page.locator("#approve-refusal").inner_text()
    page.click("header .who button")
    page.wait_for_url("**/login/")
    login("reviewer", "second-reviewer")
    page.goto(f"{live_server.url}/review/{rec.public_id}/")

    page.click("#approve-form button[type=submit]")
    page.wait_for_selector("#new-scenario-version")
    assert "docs-research@2" in page.locator("#new-scenario-version").inner_text()
    events = page.locator("#review-events").inner_text()
    assert "approve by second-reviewer" in events and "redact by reviewer-user" in events
    shot(page, "review-recording-approved")
    page.click("#new-scenario-version")
    page.wait_for_url("**/scenarios/docs-research@2/")
    assert rec.public_id in page.content()
    contract_rows = page.locator("#coverage-contract").inner_text()
    assert "status.lookup r2\tcovered" in contract_rows
    shot(page, "review-scenario-version")


def test_the_capturers_own_approve_is_disabled_with_the_reason_shown(page, login, live_server, scenarios):
    # Issue 16: Approve stayed enabled while approval was impossible, and clicking it wrote a refusal into the
    # recording's history. Now the button is disabled, the reason is beside it and describes it.
    capturer = login("reviewer")
    rec = stage(status_capture(), user=capturer)
    page.goto(f"{live_server.url}/review/{rec.public_id}/")
    button = page.locator("#approve-form button[type=submit]")
    assert button.is_disabled() and button.get_attribute("aria-describedby") == "approve-refusal"
    assert "four eyes: you captured this recording" in page.locator("#approve-refusal").inner_text()
    assert "refused" not in page.locator("#review-events").inner_text()
    shot(page, "review-capturer-approve-disabled")


def test_a_stale_approve_is_refused_in_words_and_leaves_the_history_as_it_was(
    page, login, live_server, scenarios, role_user
):
    from fixtures_review.services import recording_reject

    rec = stage(status_capture(), user=role_user("operator", "oscar"))
    login("reviewer")
    page.goto(f"{live_server.url}/review/{rec.public_id}/")
    assert page.locator("#approve-form button[type=submit]").is_enabled()
    # Another reviewer rejects it while this page is open.
    recording_reject(recording=rec, user=role_user("reviewer", "rhea"), reason="not what the provider says")
    page.click("#approve-form button[type=submit]")
    error = page.wait_for_selector("#action-error")
    assert "Approve refused:" in error.inner_text() and "rejected" in error.inner_text()
    events = page.locator("#review-events").inner_text()
    assert "reject by rhea" in events
    assert "refused" not in events
    shot(page, "review-stale-approve-refused")


XSS = """<!doctype html><html><head><title>t</title>
<script>window.__xss = 'script'; fetch('/api/v1/runs/?leak=script')</script>
<base href="http://203.0.113.9/"><meta http-equiv="refresh" content="0;url=/logout/">
<link rel="stylesheet" href="http://203.0.113.9/x.css"></head><body>
<h1>Captured page</h1>
<img src="http://203.0.113.9/beacon.png" onerror="window.__xss='onerror'">
<p onmouseover="window.__xss='mouseover'" id="hover-me">hover over me</p>
<a href="javascript:window.__xss='javascript-link'" id="js-link">a javascript: link</a>
<a href="http://203.0.113.9/out">a live link</a>
<svg onload="window.__xss='svg'"><script>window.__xss='svg-script'</script>
<a xlink:href="javascript:alert(1)"><text>svg link</text></a></svg>
<div hx-get="/logout/" hx-trigger="load">htmx load</div>
<div data-hx-post="/logout/" data-hx-trigger="load">htmx data load</div>
<button hx-post="/logout/" hx-trigger="click">htmx button</button>
<iframe src="javascript:parent.__xss='iframe'"></iframe>
<form action="/logout/" method="post"><button id="form-button">form</button></form>
<style>body { background: url(http://203.0.113.9/bg.png) }</style>
<p style="background:url(http://203.0.113.9/inline.png)">styled</p>
<object data="http://203.0.113.9/x.swf"></object><embed src="http://203.0.113.9/y">
<math><mtext><table><mglyph><style><img src=x onerror="window.__xss='mxss'"></style></mglyph></table></mtext></math>
<noscript><p title="</noscript><img src=x onerror=window.__xss='noscript'>"></p></noscript>
</body></html>"""


def settle(page) -> None:
    """Wait on conditions, not a clock: the page loaded, the network has been idle (Playwright: 500 ms with no
    connection), and every task queued so far (a handler, a timer at 0, a refresh at 0) has run: the promise
    below resolves only after the event loop went past them."""
    page.wait_for_load_state("load")
    page.wait_for_load_state("networkidle")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => setTimeout(done, 0)))")
    page.wait_for_load_state("networkidle")


def test_captured_html_runs_no_script_and_sends_no_request(page, login, live_server, scenarios):
    capture = search_capture()
    capture["response"]["headers"]["Content-Type"] = "text/html; charset=utf-8"
    capture["response"]["body"] = XSS
    rec = stage(capture)
    login("reviewer")
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(f"{live_server.url}/review/{rec.public_id}/")
    settle(page)  # any load trigger, onload or refresh has fired by now if it could
    html = page.locator("#captured-html")
    assert "Captured page" in html.inner_text()
    page.hover("#captured-html p:has-text('hover over me')")
    page.click("#captured-html a:has-text('a javascript: link')")
    html.get_by_text("htmx button").click()  # the button itself is gone; its text stays, inert
    html.get_by_text("a live link").click()
    settle(page)
    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    assert page.url == f"{live_server.url}/review/{rec.public_id}/"  # no refresh, no navigation
    own = f"{live_server.url}/"
    after_load = [u for u in requests if u.startswith(own) and ("/logout/" in u or "leak=" in u)]
    foreign = [u for u in requests if not u.startswith(own) and not u.startswith("data:")]
    assert after_load == [] and foreign == [], requests
    # Everything live was removed from the markup itself, not just blocked.
    inner = html.inner_html().lower()
    for live in ("<script", "<img", "<svg", "<iframe", "<style", "<form", "onerror", "onload", "href", "src=", "hx-"):
        assert live not in inner, live
    shot(page, "review-captured-html-sanitized")
