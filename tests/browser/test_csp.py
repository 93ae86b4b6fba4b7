"""The strict CSP in a real browser: pages work and nothing on them is blocked (no violation is reported)."""

from __future__ import annotations

import pytest

from n17q_demo import stories
from runs.importer import run_import_from_path

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def violations(page):
    """Every CSP violation the page reports, from the browser's own securitypolicyviolation events."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    return seen


def test_the_api_docs_render_under_the_csp(page, login, live_server, violations):
    login("viewer")
    page.goto(f"{live_server.url}/api/v1/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=15000)
    assert "N17Q API" in page.locator(".swagger-ui .info .title").inner_text()
    page.wait_for_selector(".opblock-summary-path", timeout=15000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/v1/runs/" in p for p in paths)
    shot(page, "api-docs-under-csp")
    assert violations == []


@pytest.mark.parametrize("path", ["/health/", "/api/v1/runs/"])
def test_the_api_opened_in_a_browser_answers_json_without_a_violation(page, login, live_server, violations, path):
    # A person who follows an API link lands on JSON, not on a page that styles itself against the policy.
    login("viewer")
    response = page.goto(f"{live_server.url}{path}")
    page.wait_for_load_state("networkidle")
    assert response is not None and response.headers["content-type"].startswith("application/json")
    assert violations == []


def test_the_run_page_and_the_admin_work_under_the_csp(page, login, live_server, violations, tmp_path):
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == "run-003-review-request")
    run_import_from_path(stories.write_bundle(story, tmp_path / "003"))
    login("admin")
    page.goto(f"{live_server.url}/runs/run-003-review-request/")
    page.locator("#ev-e-003-intent-review-request a.focus-link").click()
    page.wait_for_url("**focus=e-003-intent-review-request**")
    page.wait_for_selector("#ev-e-003-intent-review-request.focus-origin")
    # A blob rendered in the detail panel (Pygments' classes, the stylesheet's colours) and the copy script.
    page.locator("#ev-e-003-artifact-created a.row-link").click()
    page.wait_for_selector("#detail .render-diff")
    page.goto(f"{live_server.url}/admin/accounts/auditentry/")
    page.wait_for_selector("#result_list")
    assert "auth.sign_in" in page.locator("#result_list").inner_text()
    shot(page, "audit-log-under-csp")
    assert violations == []
