"""The capture doors: `POST /api/v1/captures/` and `manage.py capture` with a native capture and with a HAR file,
`capture` with a VCR.py cassette recorded by vcrpy (YAML and JSON), and the reviewer's own values (redact reason,
synthesized value, fidelity note) entered on the review page."""

from __future__ import annotations

import io
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.models import StagedRecording
from tests.conftest import approve_test_connection
from tests.runs.test_api import token_for

from . import exchanges

pytestmark = pytest.mark.django_db(transaction=True)

HAR_FIELDS = ["--scenario", "docs-research", "--tool", "status.lookup", "--contract-revision", "2"]
HAR_FIELDS += ["--effect-class", "read"]


def command(*args: str) -> dict:
    out = io.StringIO()
    call_command("capture", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_capture_api(sweep, client, role_user, seed_scenarios, reviewed_connections):
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        reverse("api-captures"),
        data=json.dumps(exchanges.capture(sweep.canaries)),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code == 201, response.content[:500]
    assert StagedRecording.objects.count() == 1
    sweep.check("capture API")


def test_capture_command(sweep, tmp_path, seed_scenarios, reviewed_connections):
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(exchanges.capture(sweep.canaries)))
    assert command(str(path))["staged"]
    path.unlink()  # the user's own file, outside the data folder: not the product's to keep
    sweep.check("capture command")


def test_har_command(sweep, tmp_path, seed_scenarios, reviewed_connections):
    path = tmp_path / "session.har"
    path.write_text(json.dumps(exchanges.har(sweep.canaries)))
    out = command(str(path), *HAR_FIELDS)
    assert out["format"] == "har" and len(out["recordings"]) == 1, out
    path.unlink()
    sweep.check("HAR (capture command)")


def test_har_api(sweep, client, role_user, seed_scenarios, reviewed_connections):
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    upload = io.BytesIO(json.dumps(exchanges.har(sweep.canaries)).encode())
    upload.name = "session.har"
    fields = {"scenario": "docs-research", "tool": "status.lookup", "contract_revision": "2", "effect_class": "read"}
    response = client.post(reverse("api-captures"), {"file": upload, **fields}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 201, response.content[:500]
    assert StagedRecording.objects.count() == 1
    sweep.check("HAR (capture API)")


def test_review_actions(sweep, client, role_user, seed_scenarios, reviewed_connections):
    """A reviewer types a secret where a value belongs: a redaction's reason, a synthesized value, its fidelity note
    (pasting the token they meant to remove is the common slip). The capture itself holds no canary. The console
    may refuse a value that looks like a secret; what it takes must be masked."""
    from tests.fixtures_review.conftest import status_capture

    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.CAPTURE)
    response = client.post(
        reverse("api-captures"), data=json.dumps(status_capture()), content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )  # fmt: skip
    assert response.status_code == 201, response.content[:500]
    recording = StagedRecording.objects.get()
    client.force_login(role_user("reviewer", "rhea"))

    def act(action: str, **fields: str) -> None:
        recording.refresh_from_db()
        url = reverse("fixtures:action", args=[recording.public_id, action])
        answer = client.post(url, {"revision": recording.revision, **fields})
        assert answer.status_code == 302, answer.content[:300]

    for _, text in sweep.canaries.in_context():
        act("redact", path="response.body.error", reason=f"it held {text}")
        act("synthesize", path="response.body", value=json.dumps({"detail": text}), fidelity_note=f"was: {text}")
        act("synthesize", path="request.url", value=json.dumps(f"https://status.example/x?note={text}"),
            fidelity_note="the URL as sent")  # fmt: skip
    recording.refresh_from_db()
    assert recording.revision > 1, "every review action was refused: nothing was planted"
    sweep.check("review actions")


class _Service(BaseHTTPRequestHandler):
    """A loopback service whose answers hold canaries: set by the test on the class before recording."""

    answer: dict = {}
    headers_out: dict = {}

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        data = json.dumps(self.answer).encode()
        self.send_response(201)
        for name, value in {**self.headers_out, "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("serializer", ["yaml", "json"])
def test_vcr_cassette(sweep, tmp_path, seed_scenarios, reviewed_connections, serializer):
    """A cassette recorded by the real vcrpy: the JWT in the request's Authorization header, the password and the
    URL credential in its JSON body, the fragment token in the answer's Location header, the rest in its body."""
    import vcr

    c = sweep.canaries
    service = type("Service", (_Service,), {"answer": exchanges.response_body(c), "headers_out": {
        "Content-Type": "application/json", "Location": c.callback_url()}})  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        approve_test_connection(base.removeprefix("http://"), reaches="sandbox", capabilities=["read", "mutation"])
        cassette = tmp_path / f"cassette.{serializer}"
        with vcr.use_cassette(str(cassette), serializer=serializer, record_mode="all"):
            body = json.dumps({"password": c.password.value, "database_url": c.database_url()}).encode()
            request = urllib.request.Request(f"{base}/api/requests/req-7781", data=body, headers={
                "Authorization": f"Bearer {c.jwt.value}", "Content-Type": "application/json"})  # fmt: skip
            urllib.request.urlopen(request).read()
    finally:
        server.shutdown()
        server.server_close()
    out = command(str(cassette), *HAR_FIELDS)
    assert out["format"] == "vcr" and len(out["recordings"]) == 1, out
    cassette.unlink()
    sweep.check(f"VCR cassette ({serializer})")


def test_promotion(sweep, client, role_user, seed_scenarios, reviewed_connections):
    """A capture whose answer holds every canary, each finding redacted in review, then approved (seed 001): the
    reviewed body is stored by digest through the storage gate (fixtures_review.retention.fixture_body_put) and the
    fixture version and the minted scenario version hold its digest. Nothing of a canary may be anywhere."""
    from fixtures_review.approval import recording_approve
    from fixtures_review.content import unresolved_findings
    from fixtures_review.services import capture_stage, recording_redact

    capture = exchanges.capture(sweep.canaries)
    capture["response"] = {**capture["response"], "status": 404}
    recording = capture_stage(raw=capture, user=role_user("operator", "olga")).recording
    reviewer = role_user("reviewer", "rhea")
    for finding in unresolved_findings(recording):
        recording.refresh_from_db()
        recording_redact(recording=recording, path=finding["path"], reason="a secret", user=reviewer,
                         revision=recording.revision)  # fmt: skip
    recording.refresh_from_db()
    approver = role_user("reviewer", "rex")  # four eyes: not who redacted it
    promoted = recording_approve(recording=recording, user=approver, revision=recording.revision)
    assert promoted.state == "promoted" and promoted.fixture_version is not None
    assert promoted.fixture_version.fixture["response"]["body_digest"], "the body was not stored by digest"
    sweep.check("promotion")
