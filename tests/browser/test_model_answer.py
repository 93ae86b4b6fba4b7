"""The model-fixture loop in real headless Chromium (issue 36): an agent's replay stopped on its first model request;
the operator answers it on the missing-fixture page (axe-clean, under the console's CSP), lands on the staged
recording; a reviewer approves it there; the same replay relaunched against the minted version gets past the
request. Screenshots go to test-artifacts/."""

from __future__ import annotations

import io
import json
import sys

import pytest
from django.core.management import call_command

from fixtures_review.models import StagedRecording
from n17q_engine.agent.model import MODEL_TOOL
from replays.models import Replay
from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder

from .conftest import shot
from .test_accessibility import BLOCKING, axe, report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

RUN, A1 = "run-003-review-request", "e-003-a1-checkpoint"
DONE = "The broad suite is not mine to change; I stop before any review request."


def relaunch(scenario: str | None = None) -> Replay:
    args = ["replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:browser", "--checkpoint", A1]
    out = io.StringIO()
    call_command(*args, *(["--scenario", scenario] if scenario else []), "--inline", "--json", stdout=out)
    return Replay.objects.get(pk=json.loads(out.getvalue())["replay"])


def test_an_operator_answers_the_model_request_on_the_page_and_a_reviewer_approves_it(
    page, chromium, live_server, login, role_user, tmp_path
):
    _isolation_or_skip()
    call_command("load_demo", "--json", stdout=io.StringIO())
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    call_command("register_agent", "browser", str(folder), "--command", "python mcp_openai_agent.py", "--json",
                 stdout=io.StringIO())  # fmt: skip
    stopped = relaunch()
    assert [m["tool"] for m in stopped.missing] == [MODEL_TOOL], stopped.missing

    login("operator", "olga")
    page.goto(f"{live_server.url}/replays/{stopped.pk}/missing/0/")
    page.wait_for_selector("#model-answer")
    blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
    assert blocking == [], report(blocking)
    page.locator("#model-answer").scroll_into_view_if_needed()
    page.get_by_label("The assistant's answer (text)").fill(DONE)
    shot(page, "model-answer-form")
    page.get_by_role("button", name="Stage this answer for review").click()
    page.wait_for_url(f"{live_server.url}/review/sr-*/")
    recording = StagedRecording.objects.get(tool=MODEL_TOOL)
    assert page.url.endswith(f"/review/{recording.public_id}/")
    html = page.content()
    assert f"Staged {recording.public_id}: the model answer (typed)" in html  # the page says what it staged
    assert "a person typed this model answer" in html  # and the recording says it is synthetic, and why
    assert "a model answer typed by a person for the request replay run" in html
    assert recording.response["body"]["choices"][0]["message"]["content"] == DONE
    shot(page, "model-answer-staged")

    # the reviewer, in a browser of their own
    role_user("reviewer", "rex")
    context = chromium.new_context(viewport={"width": 1440, "height": 1000})
    reviewer = context.new_page()
    try:
        reviewer.goto(f"{live_server.url}/login/")
        reviewer.fill("input[name=username]", "rex")
        reviewer.fill("input[name=password]", "a-long-test-password")
        reviewer.click("button[type=submit]")
        reviewer.wait_for_url(f"{live_server.url}/")
        reviewer.goto(f"{live_server.url}/review/{recording.public_id}/")
        blocking = [v for v in axe(reviewer) if v["impact"] in BLOCKING]
        assert blocking == [], report(blocking)
        reviewer.get_by_role("button", name="Approve").first.click()
        # the agent's counterfactual is offered again as it was launched (runs/relaunch.py), not as a rerun
        again_link = reviewer.get_by_text("Launch this counterfactual of run-003-review-request again against @2")
        again_link.wait_for(timeout=30000)
        href = again_link.get_attribute("href") or ""
        assert "/launch/counterfactual/" in href and "decider=agent%3A" in href, href
        shot(reviewer, "model-answer-approved")
    finally:
        context.close()
    recording.refresh_from_db()
    assert recording.state == "promoted", recording.state
    again = relaunch(recording.scenario_version.ref)
    assert again.missing == [] and again.run is not None and again.run.final_state == "stopped"
