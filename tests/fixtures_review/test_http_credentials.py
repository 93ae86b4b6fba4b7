"""Credentials in HTTP, completely (issue 32, point 4): at every door where HTTP is captured (a native capture, a HAR
file, a VCR.py cassette, an OTLP span's HTTP attributes), what is a credential by its place in HTTP's structure is
absent from everything stored and, at the capture doors, reported as a redaction at its place:

- redirect and link headers (`Location`, `Content-Location`, `Refresh: 0; url=…`, `Link: <…>; rel=…` with several
  links): user info, secret-named and signed query parameters, and the fragment (`#access_token=…`, the implicit flow);
- OAuth's credentials in query strings, fragments, form bodies and JSON bodies: `code` (in an OAuth exchange),
  `code_verifier`, `id_token`, `refresh_token`, `access_token`, `client_assertion`, `assertion`, `device_code`;
- multipart/form-data fields by name;
- JSON session and CSRF fields (`session`, `sid`, `csrf`, `xsrf`, `_csrf`).

Every secret is built at run time; none is a literal in this file.
"""

from __future__ import annotations

import io
import json
import secrets
import string
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.core.management import call_command

from fixtures_review import intake
from fixtures_review.models import StagedRecording
from tests.conftest import approve_test_connection
from tests.fixtures_review.conftest import status_capture

pytestmark = pytest.mark.django_db

FLAGS = ["--scenario", "docs-research", "--tool", "status.lookup", "--contract-revision", "2", "--effect-class", "read"]


def opaque(n: int = 40) -> str:
    """An opaque credential (an OAuth code, an access token, a session id): random letters and digits, no prefix a
    rule could know it by."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(n))


def stored_bytes() -> bytes:
    """Everything the console stored: every row of every model, and every file of the blob store."""
    rows = [
        json.dumps(row, default=str, ensure_ascii=False)
        for model in apps.get_models()
        for row in model._default_manager.all().values()
    ]
    store = Path(settings.STORAGES["blobs"]["OPTIONS"]["location"])  # type: ignore[index]
    files = [p.read_bytes() for p in store.rglob("*") if p.is_file()] if store.exists() else []
    return "\n".join(rows).encode() + b"\n" + b"\n".join(files)


def assert_absent(*values: str) -> None:
    data = stored_bytes()
    kept = [v for v in values if v.encode() in data or v[8:16].encode() in data]
    assert not kept, f"stored in clear: {kept}"


def capture_json(path: Path, *args: str, capsys) -> dict:
    call_command("capture", str(path), *args, "--json")
    return json.loads(capsys.readouterr().out)


def redactions_of(answer: dict) -> list[tuple[str, str]]:
    return [(r["path"], r["rule"]) for r in answer["redactions"]]


# --- the capture door ----------------------------------------------------------------------------------------------


def test_a_302_location_fragment_token_is_redacted_at_its_place(tmp_path, capsys, seed_scenarios):
    access, id_token = opaque(), opaque(60)
    cap = status_capture()
    cap["response"] = {
        "status": 302,
        "headers": {
            "Location": f"https://app.example/callback#access_token={access}&token_type=bearer&id_token={id_token}"
            "&expires_in=3600"
        },
        "body": None,
    }
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(cap))
    answer = capture_json(path, capsys=capsys)
    assert ("response.headers.Location#access_token", "secret-name") in redactions_of(answer)
    assert ("response.headers.Location#id_token", "secret-name") in redactions_of(answer)
    stored = StagedRecording.objects.get(public_id=answer["staged"])
    location = stored.response["headers"]["Location"]
    # What the redirect says besides its credentials stays readable: where it goes, what kind of token it was.
    assert location.startswith("https://app.example/callback#") and "token_type=bearer" in location
    assert_absent(access, id_token)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Refresh", "0; url=https://app.example/cb?code={a}&state=s1"),
        ("Content-Location", "https://app.example/cb#refresh_token={a}"),
        ("Link", '<https://api.example/items?page=2&access_token={a}>; rel="next", <https://api.example/x#sid={b}>'),
    ],
)
def test_every_redirect_and_link_header_is_redacted(name, value, tmp_path, capsys, seed_scenarios):
    a, b = opaque(), opaque()
    cap = status_capture()
    cap["response"]["headers"] = {name: value.format(a=a, b=b)}
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(cap))
    answer = capture_json(path, capsys=capsys)
    assert any(p.startswith(f"response.headers.{name}") for p, _ in redactions_of(answer)), answer["redactions"]
    assert_absent(a, b)


# --- intake's rules, where a name is a credential and where it is not ---------------------------------------------


def test_oauth_names_are_credentials_in_urls_forms_and_json():
    code, verifier, assertion, device = opaque(), opaque(64), opaque(80), opaque(30)
    record: list[dict[str, str]] = []
    url = intake.redact_url(f"https://app.example/cb?code={code}&state=xyz", "u", record.append)
    assert code not in url and "state=xyz" in url  # state is a nonce bound to the browser's session, not a key
    form = intake.redact_form(
        f"grant_type=authorization_code&code={code}&code_verifier={verifier}&redirect_uri=https%3A%2F%2Fapp.example",
        "b",
        record.append,
    )
    assert code not in form and verifier not in form and "grant_type=authorization_code" in form
    body = intake.redact_json(
        {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion, "device_code": device},
        "j",
        record.append,
    )
    assert body["assertion"] == body["device_code"] == "[redacted]" and body["grant_type"].startswith("urn:")
    token = intake.redact_json({"grant_type": "authorization_code", "code": code}, "t", record.append)
    assert token["code"] == "[redacted]"
    assert {"path": "u?code", "rule": "secret-name"} in record and {"path": "b&code_verifier", "rule": "secret-name"}


def test_a_code_outside_an_oauth_exchange_is_kept():
    record: list[dict[str, str]] = []
    # An error code, a country code, source code in a tool's arguments: what `code` usually means.
    assert intake.redact_json({"error": {"code": "not_found"}}, "j", record.append) == {"error": {"code": "not_found"}}
    assert intake.redact_json({"code": "print(1)", "language": "python"}, "j", record.append)["code"] == "print(1)"
    assert intake.redact_url("https://api.example/countries?code=FR", "u", record.append).endswith("code=FR")
    assert record == []


def test_session_and_csrf_fields_are_masked_when_they_hold_a_value():
    values = {name: opaque() for name in ("session", "sid", "csrf", "xsrf", "_csrf", "session_id", "csrf_token")}
    record: list[dict[str, str]] = []
    out = intake.redact_json({**values, "session_count": 3}, "b", record.append)
    assert all(out[name] == "[redacted]" for name in values) and out["session_count"] == 3


def test_a_multipart_form_is_parsed_and_its_fields_masked_by_name():
    password, secret, plain = opaque(), opaque(), "hello from the form"
    boundary = "----n17qBoundary" + opaque(8)
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="user"\r\n\r\nada\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="password"\r\n\r\n{password}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="client_secret"\r\n\r\n{secret}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="note"; filename="n.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\n{plain}\r\n"
        f"--{boundary}--\r\n"
    )
    red = intake.redact_capture(
        {
            **status_capture(),
            "request": {
                "method": "POST",
                "url": "https://api.example/login",
                "headers": {"Content-Type": f"multipart/form-data; boundary={boundary}"},
                "body": body,
                "args": {},
            },
        }
    )
    stored = red.capture["request"]["body"]
    assert password not in stored and secret not in stored and plain in stored and "ada" in stored
    assert {"path": "request.body&password", "rule": "secret-name"} in red.redactions
    assert {"path": "request.body&client_secret", "rule": "secret-name"} in red.redactions


# --- HAR -----------------------------------------------------------------------------------------------------------


def _har_entry(method: str, url: str, *, request_headers=(), post=None, status=200, response_headers=(), text=None):
    entry: dict[str, Any] = {
        "startedDateTime": "2026-07-01T09:00:05Z",
        "request": {"method": method, "url": url, "headers": [{"name": n, "value": v} for n, v in request_headers]},
        "response": {
            "status": status,
            "headers": [{"name": n, "value": v} for n, v in response_headers],
            "content": {"mimeType": "application/json", "text": text} if text is not None else {},
        },
    }
    if post is not None:
        entry["request"]["postData"] = post
    return entry


def test_har_multipart_password_oauth_code_pkce_verifier_and_json_session_are_not_stored(tmp_path, capsys,
                                                                                          seed_scenarios):  # fmt: skip
    password, code, verifier, session = opaque(), opaque(), opaque(64), opaque()
    boundary = "----WebKitFormBoundary" + opaque(16)
    multipart = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="username"\r\n\r\nada\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="password"\r\n\r\n{password}\r\n--{boundary}--\r\n'
    )
    har = {
        "log": {
            "version": "1.2",
            "creator": {"name": "WebInspector", "version": "537.36"},
            "entries": [
                _har_entry(
                    "POST",
                    "https://api.example/login",
                    request_headers=[("Content-Type", f"multipart/form-data; boundary={boundary}")],
                    post={"mimeType": f"multipart/form-data; boundary={boundary}", "text": multipart},
                    text=json.dumps({"ok": True, "session": session}),
                ),
                _har_entry("GET", f"https://api.example/oauth/callback?code={code}&state=af0ifjsldkj", status=204),
                _har_entry(
                    "POST",
                    "https://api.example/oauth/token",
                    request_headers=[("Content-Type", "application/x-www-form-urlencoded")],
                    post={
                        "mimeType": "application/x-www-form-urlencoded",
                        "text": f"grant_type=authorization_code&code={code}&code_verifier={verifier}"
                        "&redirect_uri=https%3A%2F%2Fapp.example%2Fcb&client_id=console",
                    },
                    text=json.dumps({"token_type": "Bearer", "expires_in": 3600, "scope": "read"}),
                ),
            ],
        }
    }
    path = tmp_path / "session.har"
    path.write_text(json.dumps(har))
    answer = capture_json(path, *FLAGS, capsys=capsys)
    places = [(p, r) for one in answer["recordings"] for p, r in redactions_of(one)]
    for place in (
        "request.body&password",
        "response.body.session",
        "request.url?code",
        "request.body&code",
        "request.body&code_verifier",
    ):
        assert (place, "secret-name") in places, (place, places)
    assert_absent(password, code, verifier, session)


# --- VCR.py --------------------------------------------------------------------------------------------------------


class _Paged(BaseHTTPRequestHandler):
    """A paged API whose `Link` header carries the caller's token in each link (as some APIs echo it)."""

    token = ""

    def do_GET(self):
        data = json.dumps({"items": [{"title": "Key rotation"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        base = f"http://{self.headers['Host']}/items"
        self.send_header(
            "Link",
            f'<{base}?page=2&access_token={self.token}>; rel="next", <{base}?page=9&access_token={self.token}>; '
            'rel="last"',
        )
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_a_vcrpy_cassette_link_header_loses_its_tokens(tmp_path, capsys, seed_scenarios):
    import vcr

    token = opaque()
    handler = type("Paged", (_Paged,), {"token": token})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        approve_test_connection(base.removeprefix("http://"), reaches="sandbox", capabilities=["read"])
        cassette = tmp_path / "paged.yaml"
        with vcr.use_cassette(str(cassette), record_mode="all"):
            urllib.request.urlopen(f"{base}/items?page=1").read()
    finally:
        server.shutdown()
        server.server_close()
    assert token in cassette.read_text()  # the real recording holds it
    answer = capture_json(cassette, *FLAGS, capsys=capsys)
    places = redactions_of(answer)
    assert ("response.headers.Link[0]?access_token", "secret-name") in places, places
    assert ("response.headers.Link[1]?access_token", "secret-name") in places, places
    link = StagedRecording.objects.get(public_id=answer["staged"]).response["headers"]["Link"]
    assert 'rel="next"' in link and 'rel="last"' in link  # the links' meaning is kept
    assert_absent(token)


# --- OTLP span attributes ------------------------------------------------------------------------------------------


def test_an_otlp_http_span_redirect_fragment_and_oauth_code_are_not_stored(tmp_path):
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otlp_receiver.conftest import agent_turn

    access, code = opaque(), opaque()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests")
    root = agent_turn(tracer, end_root=False)
    from opentelemetry import trace as otel_trace

    with tracer.start_as_current_span(
        "GET",
        context=otel_trace.set_span_in_context(root),
        kind=otel_trace.SpanKind.CLIENT,
        attributes={
            "http.request.method": "GET",
            "url.full": f"https://api.example/oauth/callback?code={code}&state=s1",
            "http.response.status_code": 302,
            "http.response.header.location": [f"https://app.example/cb#access_token={access}&token_type=bearer"],
        },
    ):
        pass
    root.end()
    provider.shutdown()
    path = tmp_path / "trace.bin"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    assert json.loads(out.getvalue())["runs"]
    assert_absent(access, code)


def test_a_percent_encoded_token_in_a_redirect_fragment_is_found_by_the_scan():
    # Not a credential by its name (`next`), a GitHub token by its look, percent-encoded: the scan reads the decoded
    # value, as it does a request URL's.
    token = "ghp_" + opaque(36)
    encoded = "".join(f"%{b:02X}" for b in token.encode())
    cap = status_capture()
    cap["response"]["headers"] = {"Location": f"https://app.example/cb#next={encoded}"}
    red = intake.intake(cap)
    assert encoded not in json.dumps(red.capture) and token not in json.dumps(red.capture)
    assert any(f["path"] == "response.headers.Location#next" for f in red.findings), red.findings


def test_a_text_of_thousands_of_code_parameters_is_read_once_and_fails_closed():
    # Each `code=` needs its URL's other names to be read as OAuth's or not: past a bound the scan stops reading
    # them (a text that long costs no read per match) and masks every further one.
    from n17q_secrets import scanning

    last = opaque(24)
    text = "https://api.example/x?" + "&".join(f"code={opaque(8)}" for _ in range(2500)) + f"&code={last}"
    assert last in [value for rule, value in scanning.scan_text(text) if rule == "url-credential-param"]
    assert scanning.scan_text("https://api.example/countries?code=FRANCE-METROPOLITAN") == []
