"""A trace is readable while it is still coming in, its secrets masked (issue 31, point 4).

The trace page lists a receiving trace's spans as they arrived (name, kind, timing, status, ids) from its chunks,
decoded as its finalisation decodes them, in a fixed number of queries; a token in a span name is shown masked: it
was masked on arrival, before the chunk was stored (issue 32).
"""

from __future__ import annotations

import secrets
import string
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otlp_receiver import selectors, services, wire
from otlp_receiver.models import ReceivedTrace

from .test_sweep import more_spans, receive

pytestmark = pytest.mark.django_db


def shown_masked(page: str, before: str) -> bool:
    """The value after `before` is masked: by the page (`[masked:<rule>]`), or already in the stored chunk (issue 32:
    the storage gate masks a buffered request byte for byte, `*`, so it still parses, and the page shows that run of
    stars as `[masked]`)."""
    return f"{before} [masked" in page and "********" not in page


def github_token() -> str:
    """A GitHub personal access token's shape (ghp_ and 36 letters and digits), made now: no secret in the repo."""
    return "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


def test_a_receiving_trace_shows_its_spans_with_a_secret_in_a_span_name_masked(
    recorder, client, role_user, django_assert_num_queries
):
    token = github_token()
    root = recorder.tracer.start_span("invoke_agent support-agent")
    context = otel_trace.set_span_in_context(root)
    with recorder.tracer.start_as_current_span(f"execute_tool login {token}", context=context) as span:
        span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, f"refused {token}"))
    with recorder.tracer.start_as_current_span("chat gpt-4o-mini", context=context, kind=otel_trace.SpanKind.CLIENT):
        pass
    data = encode_spans(recorder.take()).SerializeToString()  # the root has not ended: still receiving
    services.spans_receive(wire.split_by_trace(wire.parse_request(data, "protobuf")).batches)
    trace = ReceivedTrace.objects.get()
    assert trace.state == "receiving"

    client.force_login(role_user("viewer"))
    url = reverse("otlp:trace-detail", args=[trace.trace_id])
    # The session, its user, the user's and the groups' permissions (the flush button); the trace and its run; its
    # chunks (one query, read in steps); the user's groups (the navigation). 7, whatever the number of spans.
    with django_assert_num_queries(7):
        page = client.get(url).content.decode()
    assert "Spans received so far" in page and "still <strong>receiving</strong>" in page
    assert "chat gpt-4o-mini" in page and "client" in page and "internal" in page
    assert shown_masked(page, "execute_tool login") and shown_masked(page, "refused") and "error" in page
    assert token not in page and token[4:] not in page
    child = span.get_span_context()
    assert format(child.span_id, "016x") in page and format(root.get_span_context().span_id, "016x") in page
    assert "ms" in page  # a duration
    root.end()


def test_a_trace_page_lists_the_first_spans_and_counts_the_rest_in_the_same_queries(
    recorder, client, role_user, django_assert_num_queries, monkeypatch
):
    monkeypatch.setattr(selectors, "SPANS_SHOWN", 5)
    trace = receive(recorder, at=timezone.now() - timedelta(seconds=1), tool_calls=10)  # 21 spans
    for _ in range(3):  # more requests, more chunks: the page does not read them all
        more_spans(recorder, trace, at=timezone.now())
    client.force_login(role_user("viewer"))
    with django_assert_num_queries(7):  # as above: four chunks read in one query
        page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "the first 5 of 24 are listed, 19 more not shown" in page
    assert page.count('<tr class="span ') == 5


def test_a_finalized_trace_lists_no_spans_its_run_has_them(recorder, client, role_user):
    trace = receive(recorder, at=timezone.now() - timedelta(minutes=5))
    assert services.trace_finalize(trace_pk=trace.pk).state == "finalized"
    client.force_login(role_user("viewer"))
    page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "Spans received" not in page and "Finalized" in page


def test_the_late_spans_of_a_run_are_listed_masked(recorder, client, role_user):
    trace = receive(recorder, at=timezone.now() - timedelta(minutes=5))
    ReceivedTrace.objects.filter(pk=trace.pk).update(state="finalized")
    token = github_token()
    more_spans(recorder, trace, at=timezone.now(), name=f"execute_tool notify {token}")
    client.force_login(role_user("viewer"))
    page = client.get(reverse("otlp:trace-detail", args=[trace.trace_id])).content.decode()
    assert "1 late span received" in page and shown_masked(page, "execute_tool notify") and token not in page
