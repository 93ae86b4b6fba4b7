"""A model call read as a conversation in Chromium (issue 38 point 2): the real GenAI producer's trace
(tests/data/producers/genai-openai.otlp.json) imported, its last model call opened from the trace, the messages read
by role, a tool result followed to the run's own event; axe finds no serious or critical violation in the panel at
1400 px and at 390 px wide."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from n17q_engine.pricing import price_table
from runs.models import Event

from .conftest import htmx_settled, shot
from .test_accessibility import BLOCKING, axe, report

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TRACE = Path(__file__).resolve().parents[1] / "data" / "producers" / "genai-openai.otlp.json"
PRICES = price_table({"gpt-4o-mini": {"input": "0.15", "output": "0.60", "currency": "USD"}})


@pytest.mark.parametrize("width", [1400, 390])
def test_a_model_call_reads_as_a_conversation_and_is_axe_clean(page, live_server, login, width):
    out = io.StringIO()
    call_command("import_run", str(TRACE), "--json", stdout=out)
    run_id = json.loads(out.getvalue())["run"]
    last = Event.objects.filter(run__run_id=run_id, kind="model.proposal").order_by("-seq").first()
    page.set_viewport_size({"width": width, "height": 1000})
    login("viewer")
    with override_settings(N17Q_MODEL_PRICES=PRICES):
        page.goto(f"{live_server.url}/runs/{run_id}/")
        page.locator(f"#trace a[href*='event={last.event_id}']").first.click()
        htmx_settled(page)
        conversation = page.locator("section.conversation")
        conversation.wait_for()
        assert conversation.locator("h3").inner_text() == "Model conversation"
        roles = conversation.locator("ol.conv-messages:not(.conv-completion) .conv-role strong").all_inner_texts()
        assert roles[:2] == ["System", "User"] and "Assistant" in roles and "Tool result" in roles
        facts = conversation.locator(".conv-facts").first.inner_text()
        assert "cost\n0.0000" in facts.replace("\t", "\n") and "USD" in facts
        answer = conversation.locator(".conv-completion .conv-body").inner_text()
        assert answer.startswith("Oslo: storm tomorrow")
        conversation.locator(".conv-completion").scroll_into_view_if_needed()
        shot(page, f"conversation-{width}")
        violations = [v for v in axe(page) if v["impact"] in BLOCKING]
        assert violations == [], report(violations)
        # A tool result in the conversation leads to the run's own tool.call event.
        link = conversation.locator(".role-tool a", has_text="the run's call").first
        target = link.get_attribute("href")
        link.click()
        htmx_settled(page)
        page.wait_for_selector("#detail-h")
        event_id = target.split("event=")[1].split("#")[0]
        assert event_id in page.locator("#detail-h").inner_text()
        assert "tool.call" in page.locator("#detail-h").inner_text()
    assert page.failed_requests == []
