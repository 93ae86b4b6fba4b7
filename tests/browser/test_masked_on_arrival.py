"""A trace whose spans carry a token, in the browser (issue 32): the receiving trace's page lists its spans with the
token masked (it was masked as the request arrived), and the run it becomes says what was masked, and where."""

from __future__ import annotations

import secrets
import string
from datetime import timedelta

import pytest
from django.utils import timezone

from otlp_receiver import services
from otlp_receiver.models import ReceivedTrace
from tests.otlp_receiver.test_masked_on_arrival import spans_with

from .conftest import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_token_in_a_received_trace_is_masked_on_its_page_and_its_run_says_so(page, login, live_server):
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    batches = services.wire.split_by_trace(services.wire.parse_request(spans_with(token), "protobuf")).batches
    services.spans_receive(batches, now=timezone.now() - timedelta(minutes=5))
    trace = ReceivedTrace.objects.get()
    login("viewer")

    page.goto(f"{live_server.url}/traces/{trace.trace_id}/")
    spans = page.locator(".received-spans").inner_text()
    assert "invoke_agent deploy" in spans and "execute_tool deploy" in spans
    assert token not in page.content() and token[4:12] not in page.content()
    shot(page, "trace-masked-on-arrival")

    run = services.trace_finalize(trace_pk=trace.pk).run
    page.goto(f"{live_server.url}/runs/{run.run_id}/#masked-secrets")
    panel = page.locator("#masked-secrets")
    assert "masked by the trace receiver as each request arrived" in panel.inner_text()
    assert "the spans as received" in panel.locator("table").inner_text()
    assert "the secret scan found nothing" not in page.content() and token not in page.content()
    panel.scroll_into_view_if_needed()
    shot(page, "run-masked-on-arrival")
    assert page.failed_requests == []
