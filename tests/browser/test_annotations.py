"""Annotations in real headless Chromium (issue 38, point 4): a reviewer scores the run and corrects a tool result's
outcome from the run page's forms; both are listed, the correction beside the event it corrects; the pages are
axe-clean at 1400 and 390 px under the console's CSP. Screenshots go to test-artifacts/."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from runs import annotations as annotation_service
from runs.models import Run

from .conftest import shot
from .test_accessibility import BLOCKING, axe, report

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RUN, RESULT = "run-001-naive-replay", "e-001-res-draft-update"


def test_a_reviewer_annotates_the_run_and_corrects_an_event_in_the_browser(page, live_server, login):
    call_command("load_demo", "--json", stdout=io.StringIO())
    login("reviewer", "rita")
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{live_server.url}/runs/{RUN}/#annotations")
    form = page.locator("#annotations form")
    form.locator("select[name=annotation]").select_option("score")
    form.get_by_label("Name", exact=True).fill("correctness")
    form.get_by_label("Value", exact=True).fill("0.2")
    form.get_by_label("Comment", exact=True).fill("The replay sent the email again.")
    form.get_by_role("button", name="Annotate").click()
    page.wait_for_url(f"{live_server.url}/runs/{RUN}/#annotations")
    listed = page.locator("#annotations ol.annotations li")
    assert listed.count() == 1 and "correctness" in listed.first.inner_text()
    assert "by rita (reviewer)" in listed.first.inner_text()

    page.goto(f"{live_server.url}/runs/{RUN}/?event={RESULT}#detail")
    page.locator("details.correct-event summary").click()
    correct = page.locator("details.correct-event form")
    correct.locator("select[name=field]").select_option("outcome")
    correct.get_by_label("Corrected value").fill("unknown")
    correct.get_by_label("Basis", exact=True).fill("e-001-call-draft-narrow e-001-res-draft-get")
    correct.get_by_label("Rationale").fill("The update's response was ambiguous.")
    correct.get_by_role("button", name="Record the correction").click()
    page.wait_for_url(f"{live_server.url}/runs/{RUN}/?event={RESULT}#detail")
    note = page.locator("#detail .correction-note")
    assert "recorded ok, corrected to unknown by rita" in " ".join(note.inner_text().split())
    # The recorded fact is still the event's: its outcome row reads ok.
    assert "outcome\nok" in page.locator("#detail dl.kv").inner_text()
    run = Run.objects.get(run_id=RUN)
    assert [a.annotation for a in annotation_service.run_annotations(run)] == ["score", "correction"]

    for width in (1400, 390):
        page.set_viewport_size({"width": width, "height": 1000})
        for url, name in ((f"/runs/{RUN}/#annotations", "run"), (f"/runs/{RUN}/?event={RESULT}#detail", "detail")):
            page.goto(live_server.url + url)
            page.locator("details.correct-event").first.evaluate("d => d.open = true") if name == "detail" else None
            blocking = [v for v in axe(page) if v["impact"] in BLOCKING]
            assert blocking == [], (width, name, report(blocking))
            shot(page, f"annotations-{name}-{width}")
