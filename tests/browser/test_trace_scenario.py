"""Scenario from a trace in the browser (issue 37 point 3): from an imported OTLP trace's run page to the flow's
page, the effect classes chosen, Propose, then the launch summary of a replay against the proposed version and its
launch. Each step is screenshotted into test-artifacts/."""

from __future__ import annotations

import pytest

from fixtures_review.models import ScenarioVersion
from replays.models import Replay
from tests.replays.test_trace_scenario import trace_run  # noqa: F401  (the imported trace, a fixture)

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_broker(monkeypatch):
    from replays import services

    sent: list[int] = []
    monkeypatch.setattr(services, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


def test_the_flow_from_the_run_page_to_a_launched_replay(page, live_server, login, trace_run, no_broker):  # noqa: F811
    login("operator", "op")
    page.goto(f"{live_server.url}/runs/{trace_run.run_id}/")
    page.get_by_role("link", name="Scenario from this trace").click()
    page.wait_for_url(f"{live_server.url}/runs/{trace_run.run_id}/scenario/")
    assert page.get_by_role("heading", name="1. Contracts").is_visible()
    shot(page, "trace-scenario-1-contracts")
    page.get_by_label("Scenario name").fill("support-orders")
    page.get_by_label("Effect class of lookup_order").select_option("read")
    page.get_by_label("Effect class of refund_order").select_option("mutation")
    page.get_by_role("button", name="Propose").click()
    page.get_by_text("Scenario proposed support-orders@1.").wait_for()
    assert ScenarioVersion.objects.filter(name="support-orders", version=1).exists()
    shot(page, "trace-scenario-2-proposed")
    page.get_by_label("Agent").select_option("recorded")
    page.get_by_role("button", name="Show what would launch").click()
    page.get_by_role("button", name="Launch replay").wait_for()
    assert page.get_by_role("heading", name="Before it starts").is_visible()
    page.get_by_role("heading", name="4. Launch a replay").scroll_into_view_if_needed()
    shot(page, "trace-scenario-3-summary")
    page.get_by_role("button", name="Launch replay").click()
    page.wait_for_url(f"{live_server.url}/replays/**")
    replay = Replay.objects.get(source_run__run_id=trace_run.run_id)
    assert no_broker == [replay.pk] and replay.scenario_version.ref == "support-orders@1"
    shot(page, "trace-scenario-4-launched")
