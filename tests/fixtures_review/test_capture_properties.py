"""Hostile values in a capture get a 400 with one line, never a 500 (issue 14, fifth attack): on 775880e integers
beyond 2^63, `1e999`, arrays nested ~500 deep, year-1 timestamps with an offset and lone surrogates each answered 500
(and with DEBUG on, the deep nesting rendered hundreds of frames). Hypothesis places such values anywhere in an
otherwise valid capture and posts its bytes to the capture API."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from tests import bundles
from tests.hypothesis_budget import examples
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

BASE = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())

# JSON text of hostile leaves: written as literals, since Python's own JSON writer cannot produce all of them.
hostile_leaf = st.one_of(
    st.integers(min_value=2**63 - 2, max_value=2**80).map(str),
    st.integers(min_value=-(2**80), max_value=-(2**63) + 2).map(str),
    st.sampled_from(["1e999", "-1e999", "1e308", "4.9e-324", "123456789" * 600]),
    st.sampled_from(['"\\ud800"', '"\\udfff x"', '"ok \\ud83d\\ude00"', '"\\u0000"', '"é"']),
    st.integers(min_value=1, max_value=700).map(lambda n: "[" * n + "1" + "]" * n),
    st.integers(min_value=1, max_value=700).map(lambda n: '{"a":' * n + "1" + "}" * n),
)
place = st.sampled_from(["request.args", "response.body", "proposed_transition", "request.headers"])
instant = st.sampled_from(
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z", "2026-07-01T09:00:05Z"]
)


def _capture_text(where: str, leaf: str, captured_at: str) -> str:
    capture = json.loads(json.dumps(BASE))
    capture["captured_at"] = captured_at
    if where == "proposed_transition":
        capture["effect_class"] = "mutation"
        capture["proposed_transition"] = {"resource": "x", "value": "__LEAF__"}
    elif where == "request.headers":
        capture["request"]["headers"]["X-Leaf"] = "__LEAF__"
    else:
        part, key = where.split(".")
        capture[part][key] = {"value": "__LEAF__"}
    return json.dumps(capture).replace('"__LEAF__"', leaf)


@given(where=place, leaf=hostile_leaf, captured_at=instant)
@settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_any_hostile_value_anywhere_answers_201_or_400_with_one_line(client, role_user, where, leaf, captured_at):
    # One harness per example: hypothesis runs the examples inside one test (one database transaction).
    key = token_for(role_user("operator", f"harness-{uuid.uuid4().hex[:12]}"), HarnessToken.Scope.CAPTURE)
    before = StagedRecording.objects.count()
    response = client.post(
        "/api/v1/captures/",
        data=_capture_text(where, leaf, captured_at).encode("utf-8"),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code in (201, 400), (response.status_code, response.content[:300])
    if response.status_code == 400:
        error = response.json()["error"]
        assert error and "\n" not in error and "Traceback" not in error
        assert StagedRecording.objects.count() == before  # nothing stored


@pytest.mark.parametrize(
    ("where", "leaf", "said"),
    [
        ("request.args", str(2**70), "beyond 64 bits"),
        ("request.args", "1e999", "too large"),
        ("response.body", "[" * 500 + "]" * 500, "deeper than 64"),
        ("request.args", '"\\ud800"', "lone surrogate"),
    ],
)
def test_each_class_is_named_in_the_refusal(client, role_user, where, leaf, said):
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        "/api/v1/captures/",
        data=_capture_text(where, leaf, "2026-07-01T09:00:05Z").encode(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code == 400 and said in response.json()["error"]


def test_a_year_one_instant_with_an_offset_is_refused(client, role_user):
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    text = _capture_text("request.args", "1", "0001-01-01T00:00:00+01:00")
    response = client.post(
        "/api/v1/captures/", data=text.encode(), content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}"
    )
    assert response.status_code == 400 and "captured_at" in response.json()["error"]


def test_a_replay_list_filter_that_no_run_id_can_be_is_a_400_not_a_500(client, role_user):
    client.force_login(role_user("viewer"))
    for source in ("a/b", "x y", "\x00", "z" * 201):
        assert client.get("/replays/", {"source": source}).status_code == 400, source
    unknown = client.get("/replays/", {"source": "no-such-run"})
    assert unknown.status_code == 200 and b"no run of that id" in unknown.content


def test_a_base64_body_of_utf16_text_is_kept_binary_and_its_secret_still_masked(client, role_user):
    import base64

    token = "ghp_" + uuid.uuid4().hex + "abcd"
    capture = json.loads(json.dumps(BASE))
    raw = f"note {token} end".encode("utf-16-le")  # valid UTF-8 too, with a NUL after every character
    capture["response"]["body"] = {"encoding": "base64", "data": base64.b64encode(raw).decode()}
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        "/api/v1/captures/",
        data=json.dumps(capture),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code == 201, response.content
    stored = StagedRecording.objects.get().response["body"]
    assert set(stored) == {"encoding", "data"} and token.encode("utf-16-le") not in base64.b64decode(stored["data"])
