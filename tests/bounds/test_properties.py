"""Generated hostile documents through the OTLP receiver and the capture door, in this process (issue 35, point 4):
JSON of any shape (deep, wide, long strings, many keys) wrapped in OTLP's or a capture's outer keys, sent plain or as
a gzip stream of many members. Every one is answered, a 4xx with one line or success, never a 500, and the Python
memory the request allocated (tracemalloc's peak) stays within a generous multiple of the body. The hand-made large
cases, measured as a process's resident memory, are in the other modules here."""

from __future__ import annotations

import json
import tracemalloc
import uuid

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import HarnessToken
from tests.hypothesis_budget import examples
from tests.runs.test_api import token_for

from . import hostile

pytestmark = pytest.mark.django_db

FACTOR, SLACK = 16, 8 * 1024 * 1024  # generous: tracemalloc counts every short-lived copy too

leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=2000)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=20), inner, max_size=30),
    max_leaves=400,
)


@st.composite
def documents(draw, outer: str) -> bytes:
    value = draw(json_values)
    depth = draw(st.integers(0, 3000))
    body = json.dumps(value).encode()
    if depth:
        body = b"[" * depth + body + b"]" * depth
    return b'{"%s":' % outer.encode() + body + b"}"


def _one_line_or_success(response, *, message) -> None:
    assert response.status_code < 500, response.content[:300]
    if response.status_code >= 400:
        text = message(response)
        assert text and "\n" not in text, text


_WARM: set[str] = set()


def _measured(send, body: bytes, *, warm_up):
    """The answer to send(), with the Python memory it allocated bounded. Once per door and process, a valid request
    first, unmeasured: what a door imports on its first use (protobuf, Celery's client) is not the body's."""
    if warm_up.__name__ not in _WARM:
        warm_up()
        _WARM.add(warm_up.__name__)
    tracemalloc.start()
    try:
        response = send()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= FACTOR * len(body) + SLACK, f"{peak} bytes allocated for a body of {len(body)}"
    return response


@settings(max_examples=examples(100), suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=documents("resourceSpans"), members=st.integers(0, 300), gzip=st.booleans())
def test_the_receiver_answers_any_json_in_one_line_or_takes_it(client, role_user, body, members, gzip):
    key = token_for(role_user("operator", f"exporter-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.IMPORT_RUNS)
    sent = hostile.gzip_members(body, members) if gzip else body
    headers = {"HTTP_CONTENT_ENCODING": "gzip"} if gzip else {}

    def send():
        return client.post(
            reverse("otlp:export-traces"),
            data=sent,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
            **headers,
        )

    def warm_receiver():
        client.post(
            reverse("otlp:export-traces"),
            data=hostile.otlp_json_many_tiny_spans(3),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )

    response = _measured(send, body, warm_up=warm_receiver)
    _one_line_or_success(response, message=lambda r: r.json()["message"])


@settings(max_examples=examples(100), suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=st.sampled_from(["response", "log", "interactions"]).flatmap(documents))
def test_the_capture_door_answers_any_json_in_one_line_or_takes_it(client, role_user, body):
    key = token_for(role_user("operator", f"capturer-{uuid.uuid4().hex[:8]}"), HarnessToken.Scope.CAPTURE)

    def send():
        return client.post(
            reverse("api-captures"), data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}"
        )

    def warm_capture():
        client.post(
            reverse("api-captures"),
            data=hostile.har_many_entries(2),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {key}",
        )

    response = _measured(send, body, warm_up=warm_capture)
    _one_line_or_success(response, message=lambda r: r.json()["error"])
