"""Real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright, against a live server.

Playwright downloads no browser here: it is pointed at the system Chromium. Screenshots go to
test-artifacts/ at the repo root so a person can look at what the tests saw.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import need_service

CHROMIUM = os.environ.get("N17Q_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Without these Chromium tries to reach Google's hosts at every start, and this network refuses them.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


@pytest.fixture(scope="session")
def chromium():
    need_service("Chromium", Path(CHROMIUM).exists(), f"{CHROMIUM} missing (apt-get install chromium)")
    # Playwright's sync API runs an event loop in this thread; the ORM calls the tests make between
    # browser steps are ordinary synchronous ones.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, request):
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    failed_requests: list[str] = []
    page.on("requestfailed", lambda r: failed_requests.append(r.url))
    page.failed_requests = failed_requests
    yield page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=False, caret="initial")
    context.close()


@pytest.fixture
def login(page, live_server, role_user):
    def sign_in(role: str, username: str | None = None):
        user = role_user(role, username)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", user.username)
        page.fill("input[name=password]", "a-long-test-password")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return user

    return sign_in


def htmx_settled(page) -> None:
    """Wait (polling, generous deadline) until no htmx request, swap or settle is under way.

    A function, not an expression: Playwright polls an expression string through `eval` inside the page, which the
    console's CSP (script-src 'self', no 'unsafe-eval') refuses, and the CSP tests count the report. It happened only
    when the first check found htmx still busy, so the test failed now and then."""
    page.wait_for_function(
        "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')", timeout=60000
    )


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    # caret="initial": Playwright's default hides the caret with a stylesheet it injects into the page, which a
    # strict CSP may report as an inline style (the CSP tests count every report). Nothing is injected this way.
    page.screenshot(path=str(path), full_page=False, caret="initial")
    return path
