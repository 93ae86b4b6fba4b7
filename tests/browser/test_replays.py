"""Replays from buttons in real headless Chromium, executed by a real Celery worker process on real Redis.

Story 000: an operator reads the summary, clicks Replay in fixtures, watches progress, lands on the
missing-fixture page (which lists the waiting capture) and copies the recorded answer; a reviewer approves the
candidate; from the recording's page the operator replays the run against the new
scenario version to completion. Story 001: the comparison shows one simulated delivery and the historical
approval unused. Story 003: a counterfactual with the careful decider ends with validation incomplete and
no request. A viewer gets no button. Every page is screenshotted into test-artifacts/.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

import pytest
from django.core.management import call_command

from fixtures_review.models import ScenarioVersion
from replays.models import Replay
from tests.conftest import need_service
from tests.replays.workers import REDIS_URL, Worker, celery_to, redis_up

from .conftest import htmx_settled, shot

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def worker(settings, tmp_path, demo):
    need_service("Redis", redis_up(REDIS_URL), f"{REDIS_URL} does not answer (set REDIS_TEST_URL)")
    queue = f"n17q-browser-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    celery_to(REDIS_URL, settings, queue)
    w = Worker(broker=REDIS_URL, queue=queue, data_dir=tmp_path).start()
    yield w
    w.stop()
    import redis

    redis.Redis.from_url(REDIS_URL).delete(queue)


@pytest.fixture
def violations(page):
    seen: list[str] = []
    page.on("console", lambda m: seen.append(m.text) if "Content Security Policy" in m.text else None)
    page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'Content Security Policy violation: ' + e.violatedDirective + ' ' + e.blockedURI));"
    )
    return seen


@pytest.fixture
def sign_in(page, live_server, role_user):
    """Sign in as a role's user (made once per test), through the login form."""
    users: dict[str, Any] = {}

    def go(role: str, username: str | None = None):
        name = username or f"{role}-user"
        if name not in users:
            users[name] = role_user(role, name)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", users[name].username)
        page.fill("input[name=password]", "a-long-test-password")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")

    return go


def sign_out(page):
    page.click("header .who button")
    page.wait_for_url(re.compile(r".*/login/"))


def test_story_000_replay_lands_on_the_missing_fixture_then_copy_recorded_review_and_replay_again_completes(
    page, sign_in, live_server, worker, violations
):
    sign_in("operator")
    page.goto(f"{live_server.url}/runs/run-000-recorded/")
    assert page.locator("text=Run again").count() == 0
    page.click("a.button:has-text('Replay in fixtures')")
    page.wait_for_selector("#summary-h")
    summary = page.locator("section.summary").inner_text()
    assert "docs-research@1" in summary and "research-policy@1" in summary and "1 of 2" in summary
    assert "status.lookup" in summary and "It cannot touch" in summary
    shot(page, "replay-000-summary")

    page.click("form.launch-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/replays/\d+/$"))
    assert page.locator("#progress .replay-state").inner_text() in ("Queued", "Running", "Finished")
    shot(page, "replay-000-progress")
    # htmx polls the progress region; when the replay stops on a missing fixture the page moves there by itself
    page.wait_for_url(re.compile(r".*/replays/\d+/missing/0/$"), timeout=60000)
    assert "Missing fixture: status.lookup revision 2" in page.locator("h1").inner_text()
    facts = page.locator("dl.missing-facts").inner_text()
    assert "World revision" in facts and "sha256:d0064125" in facts
    assert page.locator(".nearby").count() >= 1
    shot(page, "replay-000-missing-fixture")

    # the demo's capture of this very request waits in the review queue, and the page says so
    assert "Staged capture" in page.locator("#answers").inner_text()
    page.click("button.copy-recorded")
    page.wait_for_url(re.compile(r".*/review/[^/]+/$"))
    assert "the recorded answer (not_found, status 404)" in page.locator("p.flash").inner_text()
    assert "same fixture key as" in page.locator("#duplicate-flag").inner_text().lower()
    staged_url = page.url
    shot(page, "replay-000-staged-candidate")

    # Four eyes: the operator copied it; a reviewer approves it as recorded (404 not_found, never 200/empty).
    sign_out(page)
    sign_in("reviewer")
    page.goto(staged_url)
    page.click("#approve-form button[type=submit]")
    page.wait_for_function("() => !document.querySelector('#approve-form')", timeout=30000)
    shot(page, "replay-000-approved")
    new_version = ScenarioVersion.objects.filter(name="docs-research").order_by("-version").first()
    assert new_version.version == 2

    page.goto(staged_url)
    assert page.locator("a.replay-again").inner_text() == "Replay run-000-recorded against @2"
    sign_out(page)
    sign_in("operator")
    page.goto(staged_url)
    page.click("a.replay-again")
    page.wait_for_url(re.compile(r".*/runs/run-000-recorded/launch/replay/\?scenario=docs-research%402$"))
    assert "docs-research@2" in page.locator("section.summary").inner_text()
    page.select_option("select[name=scenario]", "docs-research@2")
    page.click("form.launch-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/replays/\d+/$"))
    page.wait_for_selector("#progress.state-finished", timeout=60000)
    assert page.locator("#progress .run-state").inner_text() == "completed"
    replay = Replay.objects.order_by("-id").first()
    assert (replay.scenario_version.ref, replay.state, replay.run.final_state) == (
        "docs-research@2",
        "finished",
        "completed",
    )
    shot(page, "replay-000-completed")
    assert violations == []


def test_story_001_comparison_shows_one_simulated_delivery_and_the_historical_approval_unused(
    page, login, live_server, worker, violations
):
    login("operator")
    page.goto(f"{live_server.url}/runs/run-001-recorded/launch/replay/")
    page.click("form.launch-form button[type=submit]")
    page.wait_for_selector("#progress.state-finished", timeout=60000)
    page.click("text=Comparison with the source run")
    page.wait_for_selector("#scope-h")
    assert page.locator(".replay-deliveries").inner_text() == "1 simulated"
    approval = page.locator(".historical-approval").inner_text()
    assert "e-001-approval" in approval and "unused" in approval
    assert page.locator("#inv-one_delivery td").nth(1).inner_text().startswith("held")
    shot(page, "replay-001-comparison")
    assert violations == []


def test_story_003_careful_counterfactual_ends_with_validation_incomplete_and_no_request(
    page, login, live_server, worker, violations
):
    login("operator")
    page.goto(f"{live_server.url}/runs/run-003-review-request/")
    page.click("a.button:has-text('Create counterfactual')")
    page.wait_for_selector("#summary-h")
    page.check("input[name=variable][value=decider]")
    page.select_option("select[name=decider]", "careful")
    # the summary follows the form (one htmx request): wait for it to name the variable before looking
    page.wait_for_selector("section.summary code:has-text('decider = careful')")
    htmx_settled(page)
    shot(page, "replay-003-counterfactual-form")
    page.click("form.launch-form button[type=submit]")
    page.wait_for_selector("#progress.state-finished", timeout=60000)
    assert page.locator("#progress .run-state").inner_text() == "stopped"
    assert page.locator(".outcome .validation").inner_text().startswith("validation incomplete")
    assert page.locator(".outcome .effects").inner_text() == "no request: no effect intent, no delivery"
    shot(page, "replay-003-careful-finished")
    assert violations == []


def test_a_viewer_has_no_replay_button_and_is_refused_the_launch_page(page, login, live_server, demo):
    login("viewer")
    page.goto(f"{live_server.url}/runs/run-000-recorded/")
    assert page.locator("a.button:has-text('Replay in fixtures')").count() == 0
    assert page.locator("a.button:has-text('Create counterfactual')").count() == 0
    response = page.goto(f"{live_server.url}/runs/run-000-recorded/launch/replay/")
    assert response.status == 403
