"""A received trace in the browser: listed while it is receiving, its spans readable before it is a run; once it is
a run, its page says where its spans went and links there (its buffered copy is gone, issue 31)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from otlp_receiver import services
from tests.otlp_receiver.conftest import recorder  # noqa: F401 - the fixture, shared with the receiver's tests
from tests.otlp_receiver.test_sweep import more_spans, receive

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_trace_reads_as_receiving_then_links_to_the_run_it_became(page, login, live_server, recorder):  # noqa: F811
    at = timezone.now() - timedelta(minutes=5)
    trace = receive(recorder, at=at, tool_calls=2)
    more_spans(recorder, trace, at=at)
    login("viewer")

    page.goto(f"{live_server.url}/traces/{trace.trace_id}/")
    assert page.locator(".trace-state").inner_text() == "Receiving"
    rows = page.locator(".received-spans tbody tr.span")
    assert rows.count() == 6
    assert "invoke_agent support-agent" in page.locator(".received-spans").inner_text()
    shot(page, "trace-receiving")

    done = services.trace_finalize(trace_pk=trace.pk)
    page.reload()
    assert page.locator(".trace-state").inner_text() == "Finalized"
    assert page.locator(".received-spans").count() == 0
    link = page.locator(".finalized-spans a")
    assert "6 spans became the events of run" in page.locator(".finalized-spans").inner_text()
    shot(page, "trace-finalized")
    link.click()
    page.wait_for_url(f"{live_server.url}/runs/{done.run.run_id}/")
    assert page.locator("h1").count() == 1
    assert page.failed_requests == []
