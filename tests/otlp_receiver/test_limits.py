"""The receiver's per-token limits and its per-request budget (issue 35, point 3): a token past its request rate or
its decoded-byte budget gets 429 with Retry-After (the seconds until its window refills) and a one-line Status; the
other tokens are not slowed. A request whose reading takes more than the upload budget gets 422, one line, nothing
stored. Bodies are the real exporter's encoding of SDK spans.
"""

from __future__ import annotations

import gzip

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from accounts.models import HarnessToken
from otlp_receiver.models import ReceivedTrace
from tests.runs.test_api import token_for

from .conftest import agent_turn
from .test_bad_input import assert_nothing_stored, post, status_of

pytestmark = pytest.mark.django_db


def _body(recorder) -> bytes:
    agent_turn(recorder.tracer)
    return encode_spans(recorder.take()).SerializeToString()


@pytest.fixture
def second_key(role_user) -> str:
    return token_for(role_user("operator", "second-exporter"), HarnessToken.Scope.IMPORT_RUNS)


def _assert_429(response, window_s: int) -> str:
    assert response.status_code == 429, response.content[:300]
    assert 1 <= int(response["Retry-After"]) <= window_s
    code, message = status_of(response)
    assert code == 8 and message and "\n" not in message  # RESOURCE_EXHAUSTED
    return message


def test_a_token_past_its_request_rate_gets_429_with_retry_after(client, recorder, operator_key, second_key, settings):
    settings.N17Q_OTLP_RATE = "2/min"
    answers = [post(client, _body(recorder), operator_key) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    _assert_429(answers[2], 60)
    assert post(client, _body(recorder), second_key).status_code == 200


def test_a_token_past_its_decoded_byte_budget_gets_429_until_the_window_ends(
    client, recorder, operator_key, second_key, settings
):
    first, second, third = (_body(recorder) for _ in range(3))
    settings.N17Q_OTLP_TOKEN_BYTES = len(first) + len(second) + len(third) // 2
    settings.N17Q_OTLP_TOKEN_BYTES_WINDOW_S = 3600
    assert post(client, first, operator_key).status_code == 200
    assert post(client, second, operator_key).status_code == 200
    refused = post(client, third, operator_key)  # past the budget: refused, not stored
    message = _assert_429(refused, 3600)
    assert "bytes" in message and str(settings.N17Q_OTLP_TOKEN_BYTES) in message
    assert ReceivedTrace.objects.count() == 2
    # Spent: the next request is refused before its body is read, however small.
    _assert_429(post(client, _body(recorder)[:40], operator_key), 3600)
    # Per token: another exporter is not slowed.
    assert post(client, third, second_key).status_code == 200


def test_the_byte_budget_counts_decoded_bytes_not_the_bytes_sent(client, recorder, operator_key, settings):
    """A gzip body is small on the wire; the work is its decoded size, and that is what a token is charged."""
    padded = [_body(recorder) for _ in range(2)]
    settings.N17Q_OTLP_TOKEN_BYTES = len(padded[0]) + len(padded[1]) // 2
    sent = [gzip.compress(b) for b in padded]
    assert sum(len(s) for s in sent) < settings.N17Q_OTLP_TOKEN_BYTES
    assert post(client, sent[0], operator_key, HTTP_CONTENT_ENCODING="gzip").status_code == 200
    _assert_429(post(client, sent[1], operator_key, HTTP_CONTENT_ENCODING="gzip"), 60)


def test_a_request_past_the_upload_budget_gets_422_in_one_line_and_stores_nothing(
    client, recorder, operator_key, settings
):
    settings.N17Q_UPLOAD_CPU_S = 0
    refused = post(client, _body(recorder), operator_key)
    assert refused.status_code == 422, refused.content[:300]
    _code, message = status_of(refused)
    assert "CPU seconds" in message and "\n" not in message
    assert_nothing_stored()
    settings.N17Q_UPLOAD_CPU_S = 120
    settings.N17Q_UPLOAD_WALL_S = 0
    refused = post(client, _body(recorder), operator_key)
    assert refused.status_code == 422 and "seconds" in status_of(refused)[1]
    assert_nothing_stored()


def test_the_byte_budget_lets_requests_through_while_its_cache_is_away(client, recorder, operator_key, settings):
    """Like the other throttles, a brake and not a lock: Redis restarting does not turn exports into 500s or 429s."""
    settings.N17Q_OTLP_TOKEN_BYTES = 1024
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}
    }
    assert [post(client, _body(recorder), operator_key).status_code for _ in range(2)] == [200, 200]
