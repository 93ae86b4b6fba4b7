"""Capture intake: the format's refusals, redaction by place, the `capture` command and `POST /api/v1/captures/`."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review import intake
from fixtures_review.models import ReviewEvent, StagedRecording
from n17q_engine import canonical
from tests.bundles import EXAMPLE

from .conftest import status_capture
from .corpus import canary


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(format="n17q.capture/2"), "format: expected 'n17q.capture/1'"),
        (lambda c: c.pop("tool"), "tool: required"),
        (lambda c: c.update(captured_at="yesterday"), "captured_at: 'yesterday' is not an ISO-8601 instant"),
        (lambda c: c.update(captured_at="2026-07-01T09:00:05"), "has no time zone"),
        (lambda c: c.update(contract_revision=0), "contract_revision: required, a positive integer"),
        (lambda c: c.update(effect_class="write"), "effect_class: one of read, mutation"),
        (lambda c: c.update(extra=1), "extra: not a field of n17q.capture/1"),
        (lambda c: c["request"].pop("args"), "request.args: required"),
        (lambda c: c["request"]["headers"].update(X=1), "request.headers.X: a string or a list of strings"),
        (lambda c: c["response"].update(status=99), "response.status: an HTTP status 100-599"),
        (lambda c: c["response"].update(body={"encoding": "zip", "data": ""}), "response.body.encoding: one of"),
        (lambda c: c["response"].update(body={"encoding": "base64", "data": "%%%"}), "response.body.data: not base64"),
        (lambda c: c["response"].update(body={"encoding": "gzip+base64", "data": "aGVsbG8="}), "not gzip data"),
        (lambda c: c.update(proposed_transition={"resource": "r"}), "a read changes no world state"),
        (lambda c: c.update(scenario="Docs Research"), "scenario: 'Docs Research' must be lowercase"),
    ],
)
def test_it_refuses_a_capture_that_breaks_the_format_naming_the_field(change, message):
    capture = status_capture()
    change(capture)
    with pytest.raises(intake.CaptureError, match=message.replace("(", r"\(").replace(".", r"\.")):
        intake.intake(capture)


def test_it_refuses_what_is_not_json_or_not_utf8():
    with pytest.raises(intake.CaptureError, match="not JSON"):
        intake.intake(b"{nope")
    with pytest.raises(intake.CaptureError, match="not UTF-8"):
        intake.intake(b"\xff\xfe")
    with pytest.raises(intake.CaptureError, match="NaN is not a JSON number"):
        intake.intake(b'{"format": NaN}')


def test_it_refuses_a_gzip_bomb():
    bomb = base64.b64encode(gzip.compress(b"\0" * (intake.MAX_BODY_BYTES + 10))).decode()
    capture = status_capture()
    capture["response"]["body"] = {"encoding": "gzip+base64", "data": bomb}
    with pytest.raises(intake.CaptureError, match="decompresses to more than"):
        intake.intake(capture)


def test_secret_names_are_recognised_and_counters_are_not():
    for name in (
        "password",
        "client_secret",
        "api-key",
        "X-Api-Key",
        "privateKey",
        "access_token",
        "refresh_token",
        "id_token",
        "connectionString",
        "AWS_SECRET_ACCESS_KEY",
        "db_passwd",
        "credentials",
        "sig",
    ):
        assert intake.is_secret_name(name), name
    for name in ("token_type", "max_tokens", "tokens_used", "title", "request_id", "monkey", "keyid"):
        assert not intake.is_secret_name(name), name


def test_a_secret_named_number_in_the_arguments_is_redacted_like_a_string():
    red = intake.intake(
        status_capture(request={**status_capture()["request"], "args": {"request_id": "r", "pin": 1234}})
    )
    assert red.capture["request"]["args"] == {"request_id": "r", "pin": intake.REDACTED}
    assert {"path": "request.args.pin", "rule": "secret-name"} in red.redactions


def test_a_gzip_body_is_stored_decoded_with_its_encoding_recorded():
    token = canary()
    body = base64.b64encode(gzip.compress(json.dumps({"access_token": token, "n": 1}).encode())).decode()
    capture = status_capture()
    capture["response"]["body"] = {"encoding": "gzip+base64", "data": body}
    red = intake.intake(capture)
    assert red.capture["response"]["body"] == {"access_token": intake.REDACTED, "n": 1}
    assert red.encodings == {"response.body": "gzip+base64"}
    assert {"path": "response.body.access_token", "rule": "secret-name"} in red.redactions


def test_a_form_body_is_redacted_field_by_field():
    capture = status_capture()
    capture["request"]["headers"]["Content-Type"] = "application/x-www-form-urlencoded"
    capture["request"]["body"] = f"user=ann&password={canary()}&next=%2Fhome"
    red = intake.intake(capture)
    assert red.capture["request"]["body"] == "user=ann&password=[redacted]&next=%2Fhome"


def test_an_unparsable_url_is_left_to_the_scanner():
    assert intake.redact_url("http://[::1", "request.url", lambda r: None) == "http://[::1"


# --- the command -------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_command_prints_the_design_shape(seed_scenarios, tmp_path, capsys):
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(status_capture()))
    call_command("capture", str(path), "--json")
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"staged", "redactions", "findings", "promotable"}
    assert out["redactions"] == [{"path": "request.headers.Authorization", "rule": "secret-header"}]
    assert out["findings"] == [] and out["promotable"] is True
    assert StagedRecording.objects.get().public_id == out["staged"]


@pytest.mark.django_db
def test_the_command_refuses_bad_input_in_one_line_and_stores_nothing(tmp_path):
    path = tmp_path / "capture.json"
    capture = status_capture()
    capture["response"]["status"] = "404"
    path.write_text(json.dumps(capture))
    with pytest.raises(CommandError, match=r"^.*capture\.json: response\.status: an HTTP status 100-599, got '404'$"):
        call_command("capture", str(path), "--json")
    with pytest.raises(CommandError, match="no such file"):
        call_command("capture", str(tmp_path / "nope.json"), "--json")
    assert StagedRecording.objects.count() == 0 and ReviewEvent.objects.count() == 0


# --- the API -----------------------------------------------------------------------------------------------------


def token(user, *scopes) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(name="h", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9],
                                scopes=list(scopes))  # fmt: skip
    return key


def post(client, capture, key=None):
    extra = {"HTTP_AUTHORIZATION": f"Token {key}"} if key else {}
    body = capture if isinstance(capture, bytes) else json.dumps(capture)
    return client.post(reverse("api-captures"), data=body, content_type="application/json", **extra)


@pytest.mark.django_db
def test_a_capture_token_stages_and_is_recorded_as_the_capturer(client, role_user, seed_scenarios):
    harness = role_user("operator", "harness")
    response = post(client, status_capture(), token(harness, HarnessToken.Scope.CAPTURE))
    assert response.status_code == 201
    rec = StagedRecording.objects.get(public_id=response.json()["staged"])
    assert rec.token.user == harness and rec.captured_by == harness and harness.pk in rec.excluded_approvers


@pytest.mark.django_db
def test_a_token_without_the_capture_scope_is_refused(client, role_user, seed_scenarios):
    response = post(client, status_capture(), token(role_user("operator"), HarnessToken.Scope.IMPORT_RUNS))
    assert response.status_code == 403 and StagedRecording.objects.count() == 0


@pytest.mark.django_db
def test_a_capture_token_can_only_capture(client, role_user):
    key = token(role_user("operator"), HarnessToken.Scope.CAPTURE)
    for url in ("/api/v1/runs/", "/api/v1/runs/x/", "/api/v1/runs/x/lineage/"):
        response = client.get(url, HTTP_AUTHORIZATION=f"Token {key}")
        assert response.status_code == 403 and "scopes do not allow" in response.json()["error"], url


@pytest.mark.django_db
def test_issuing_a_capture_token_with_another_scope_is_refused(role_user):
    role_user("operator", "harness")
    with pytest.raises(CommandError, match="can only capture"):
        call_command("issue_token", "harness", "--name", "x", "--scope", "captures:create", "--scope", "runs:import")


@pytest.mark.django_db
def test_a_viewer_cannot_capture(client, role_user):
    client.force_login(role_user("viewer"))
    assert post(client, status_capture()).status_code == 403
    assert StagedRecording.objects.count() == 0


@pytest.mark.django_db
def test_a_bad_capture_is_a_400_naming_the_field_and_stores_nothing(client, role_user):
    key = token(role_user("operator"), HarnessToken.Scope.CAPTURE)
    capture = status_capture()
    del capture["request"]["args"]
    response = post(client, capture, key)
    assert response.status_code == 400
    assert response.json() == {"error": "request.args: required, an object (the tool call's arguments)"}
    assert post(client, b"[1,", key).json()["error"].startswith("the capture is not JSON")
    assert StagedRecording.objects.count() == 0


def test_the_original_digest_is_keyed_so_a_low_entropy_secret_cannot_be_recovered_from_it():
    # A capture whose only secret is a 4-digit PIN under a secret name: redacted by place, and the rest visible to
    # a reviewer. A plain digest of the original would give the PIN back in 10,000 hashes; the keyed one does not.
    base = json.loads((EXAMPLE.parent / "example-capture.json").read_text())
    base["response"]["body"] = {"account": "acct-17", "pin": "4821"}
    key = b"k" * 32
    red = intake.intake(base, digest_key=key)
    assert red.original_digest.startswith("hmac:") and "4821" not in json.dumps(red.capture)

    def candidate(pin: str) -> dict:
        guess = json.loads(json.dumps(base))
        guess["response"]["body"]["pin"] = pin
        return guess

    plain = {canonical.digest_json(candidate(f"{n:04d}")) for n in range(10_000)}
    assert red.original_digest.removeprefix("hmac:") not in {d.removeprefix("sha256:") for d in plain}
    # Same capture, same key: the same digest (identity for the console); another key: another digest.
    assert intake.intake(base, digest_key=key).original_digest == red.original_digest
    assert intake.intake(base, digest_key=b"j" * 32).original_digest != red.original_digest
    assert intake.original_digest(candidate("4821"), key) == red.original_digest
    # Without a key, no digest is kept at all.
    assert intake.intake(base).original_digest == ""


def _with_request_headers(headers: dict) -> dict:
    capture = status_capture()
    capture["request"]["headers"] = headers
    return capture


@pytest.mark.parametrize(
    "name",
    [
        "X-Auth-Key",
        "DD-APPLICATION-KEY",
        "DD-API-KEY",
        "Authentication",
        "X-Session-Id",
        "session_id",
        "X-Vendor-Token",
        "X-Client-Secret",
        "X-Partner-Signature",
        "X-Upstream-Password",
        "Cookie",
        "Set-Cookie",
        "Proxy-Authorization",
    ],
)
def test_a_credential_header_is_redacted_by_its_name(name):
    red = intake.intake(_with_request_headers({name: "opaque-value-7Kq2", "Accept": "application/json"}))
    assert red.capture["request"]["headers"][name] == intake.REDACTED
    assert red.capture["request"]["headers"]["Accept"] == "application/json"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Access-Control-Allow-Credentials", "true"),
        ("Access-Control-Allow-Headers", "Authorization, X-Api-Key"),
        ("Content-Type", "application/json"),
        ("User-Agent", "harness/1.4"),
        ("X-Request-Id", "req-7781"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Idempotency-Key", "order-4411-attempt-2"),
        ("X-RateLimit-Remaining", "17"),
    ],
)
def test_a_header_that_is_not_a_credential_is_kept_as_it_was(name, value):
    # Access-Control-Allow-Credentials changes what a fixture means; redacting it would change the fixture.
    red = intake.intake(_with_request_headers({name: value}))
    assert red.capture["request"]["headers"][name] == value and red.redactions == []


def test_a_number_under_a_secret_name_is_redacted_unless_the_name_measures_something():
    capture = status_capture()
    capture["response"]["body"] = {
        "pin": 4821,
        "otp": 123456,
        "account": {"password": 20240611, "password_min_length": 12, "token_ttl": 3600, "password_set": True},
        "api_keys": ["k-1", 998877],
        "max_tokens": 200,
    }
    body = intake.intake(capture).capture["response"]["body"]
    assert body["pin"] == body["otp"] == body["account"]["password"] == intake.REDACTED
    assert body["api_keys"] == [intake.REDACTED, intake.REDACTED]
    assert body["account"]["password_min_length"] == 12 and body["account"]["token_ttl"] == 3600
    assert body["account"]["password_set"] is True and body["max_tokens"] == 200
