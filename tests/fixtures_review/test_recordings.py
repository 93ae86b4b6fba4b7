"""Captures from recordings (issue 17, point 5): VCR.py cassettes recorded by vcrpy against a loopback server in the
test, staged through `capture` and `POST /api/v1/captures/`, through the same intake as a native capture."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review.models import ReviewEvent, StagedRecording
from fixtures_review.recordings import RecordingError, load, parse_mapping
from tests.conftest import approve_test_connection
from tests.fixtures_review.conftest import status_capture

pytestmark = pytest.mark.django_db

# Built at run time so no scanner flags this file; the shape is a GitHub personal access token.
GITHUB_TOKEN = "ghp_" + hashlib.sha256(b"n17q-test:recordings").hexdigest()[:36]
BEARER = "Bearer sk-live-" + "9f8e7d6c5b4a"


class _Service(BaseHTTPRequestHandler):
    """A small status service: JSON answers, one gzip-encoded, one echoing a POSTed body."""

    def do_GET(self):
        if self.path.startswith("/api/requests/req-404"):
            return self._send(404, {"error": "not_found"})
        if self.path.startswith("/api/requests/"):
            body = {"id": self.path.split("/")[3].split("?")[0], "state": "open", "access_token": GITHUB_TOKEN,
                    "note": f"rotate {GITHUB_TOKEN} soon"}  # fmt: skip
            return self._send(200, body)
        if self.path == "/gz":
            return self._send(200, {"items": [{"title": "Key rotation"}]}, gzipped=True)
        return self._send(404, {"error": "no such page"})

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self._send(201, json.loads(data))

    def _send(self, status, body, gzipped=False):
        data = json.dumps(body).encode()
        if gzipped:
            data = gzip.compress(data)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if gzipped:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def service(reviewed_connections):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # Exchanges name their host as their connection: this loopback service is a sandbox, reviewed like any other.
    approve_test_connection(
        f"127.0.0.1:{server.server_address[1]}", reaches="sandbox", capabilities=["read", "mutation"]
    )
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def record(path: Path, base: str, serializer: str, *, gz: bool = True) -> Path:
    """A real cassette: vcrpy recording urllib's requests to the loopback service."""
    import vcr

    # The JSON serializer cannot hold gzip bytes: vcrpy needs the response decoded for it.
    with vcr.use_cassette(str(path), serializer=serializer, record_mode="all", decode_compressed_response=not gz):
        get = urllib.request.Request(f"{base}/api/requests/req-7781?verbose=1", headers={"Authorization": BEARER})
        urllib.request.urlopen(get).read()
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(f"{base}/api/requests/req-404").read()
        urllib.request.urlopen(f"{base}/gz").read()
        post = urllib.request.Request(
            f"{base}/api/send",
            data=json.dumps({"to": "ops@example.org", "password": "hunter2-hunter2"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(post).read()
    return path


FLAGS = ["--scenario", "docs-research", "--tool", "status.lookup", "--contract-revision", "2", "--effect-class", "read"]

MAPPING = """
defaults: {scenario: docs-research}
rules:
  - method: GET
    path: /api/requests/{request_id}
    tool: status.lookup
    contract_revision: 2
    effect_class: read
    arguments: [request_id]
  - method: POST
    path_prefix: /api/send
    tool: mail.send
    contract_revision: 1
    effect_class: mutation
"""


def capture(path, *args, capsys) -> dict:
    call_command("capture", str(path), *args, "--json")
    return json.loads(capsys.readouterr().out)


def stored_text() -> str:
    return json.dumps(
        list(StagedRecording.objects.values("request", "response", "findings", "redactions", "copied_from"))
    )


@pytest.mark.parametrize("serializer", ["yaml", "json"])
def test_a_vcrpy_cassette_becomes_one_recording_per_interaction_redacted_and_scanned(
    serializer, service, tmp_path, capsys, seed_scenarios
):
    cassette = record(tmp_path / f"c.{serializer}", service, serializer, gz=serializer == "yaml")
    out = capture(cassette, *FLAGS, capsys=capsys)
    assert out["format"] == "vcr" and len(out["recordings"]) == 4 and out["skipped"] == []
    # The DESIGN §8 keys stay at the top: they are the first recording's.
    assert out["staged"] == out["recordings"][0]["staged"] and {"redactions", "findings", "promotable"} <= set(out)
    assert StagedRecording.objects.count() == 4
    first = StagedRecording.objects.get(public_id=out["recordings"][0]["staged"])
    assert first.request["headers"]["Authorization"] == "[redacted]"
    assert {"path": "request.headers.Authorization", "rule": "secret-header"} in first.redactions
    assert first.response["body"]["access_token"] == "[redacted]"
    assert any(f["rule"] == "github-pat" and f["path"] == "response.body.note" for f in first.findings)
    assert first.request["args"] == {"verbose": "1"}  # query parameters are the arguments without a mapping
    assert first.outcome == "ok" and first.connection == service.removeprefix("http://")
    assert StagedRecording.objects.get(public_id=out["recordings"][1]["staged"]).outcome == "not_found"
    posted = StagedRecording.objects.get(public_id=out["recordings"][3]["staged"])
    assert posted.request["args"]["password"] == "[redacted]" and posted.request["body"]["password"] == "[redacted]"
    text = stored_text()
    assert GITHUB_TOKEN not in text and "sk-live-" not in text and "hunter2" not in text
    assert ReviewEvent.objects.filter(action="staged").count() == 4


def test_a_gzip_response_in_a_yaml_cassette_is_stored_decoded_and_says_how_it_arrived(service, tmp_path, capsys,
                                                                                        seed_scenarios):  # fmt: skip
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    assert "!!binary" in cassette.read_text()  # vcrpy kept the gzip bytes as they came
    out = capture(cassette, *FLAGS, capsys=capsys)
    gz = StagedRecording.objects.get(public_id=out["recordings"][2]["staged"])
    assert gz.response["body"] == {"items": [{"title": "Key rotation"}]}
    assert gz.encodings == {"response.body": "gzip+base64"}


def test_a_mapping_sends_each_interaction_to_its_tool_and_derives_arguments(service, tmp_path, capsys, seed_scenarios):
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(MAPPING)
    out = capture(cassette, "--mapping", str(mapping), capsys=capsys)
    assert [r["tool"] for r in out["recordings"]] == ["status.lookup", "status.lookup", "mail.send"]
    assert [r["rule"] for r in out["recordings"]] == [1, 1, 2]
    assert out["skipped"] == [
        {"entry": 3, "method": "GET", "url": f"{service}/gz", "reason": "no rule of the mapping matches it"}
    ]
    status = StagedRecording.objects.get(public_id=out["recordings"][0]["staged"])
    # The path template names the argument and `arguments` keeps only it: the capture is keyed like the contract's.
    assert status.request["args"] == {"request_id": "req-7781"} and status.normalized_request is not None
    mail = StagedRecording.objects.get(public_id=out["recordings"][2]["staged"])
    assert mail.effect_class == "mutation" and mail.contract_revision == 1


def test_flags_are_the_defaults_under_a_mapping(service, tmp_path, capsys, seed_scenarios):
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    mapping = tmp_path / "m.json"
    mapping.write_text(json.dumps({"rules": [{"method": "GET", "path_prefix": "/api/requests/"}]}))
    out = capture(cassette, "--mapping", str(mapping), *FLAGS, capsys=capsys)
    assert len(out["recordings"]) == 2 and {r["tool"] for r in out["recordings"]} == {"status.lookup"}


def test_a_missing_field_is_one_line_naming_it_and_its_flag(service, tmp_path, seed_scenarios):
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    with pytest.raises(CommandError, match=r"contract_revision: required .* give --contract-revision"):
        call_command("capture", str(cassette), "--scenario", "docs-research", "--tool", "t", "--effect-class", "read")
    mapping = tmp_path / "m.yaml"
    mapping.write_text("rules:\n  - {method: GET, tool: status.lookup}\n")
    with pytest.raises(CommandError, match=r"scenario: required for GET .* by rule 1 of the mapping nor by --scenario"):
        call_command("capture", str(cassette), "--mapping", str(mapping))
    assert StagedRecording.objects.count() == 0


def test_one_bad_interaction_refuses_the_whole_file(service, tmp_path, seed_scenarios):
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    mapping = tmp_path / "m.yaml"
    mapping.write_text(MAPPING + "    scenario: Not_A_Scenario\n")  # the POST's rule names a malformed scenario
    with pytest.raises(CommandError, match=r"entry 4 \(POST .*/api/send\): scenario: 'Not_A_Scenario' must be"):
        call_command("capture", str(cassette), "--mapping", str(mapping))
    assert StagedRecording.objects.count() == 0 and ReviewEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("interactions: [\n  - {request: }\n", "not valid YAML"),
        ("interactions: []\nversion: 1\n", "holds no interactions"),
        ('{"log": {"version": "1.2", "creator": {"name": "x"}, "entries": []}}', "HAR file holds no entries"),
        ('{"log": {"version": "1.2", "creator": {"name": "x"}}}', "has no entries list"),
        ('{"interactions": {"request": {}}}', "interactions must be a list"),
        (
            '{"interactions": [{"request": {"method": "GET", "uri": "http://h/", "body": "\\ud800"},'
            ' "response": {"status": {"code": 200}}}]}',
            "request.body holds a lone surrogate",
        ),
        (
            '{"log": {"version": "1.2", "creator": {"name": "x"}, "entries": [{"request": {"method": "GET",'
            ' "url": "http://h/"}, "response": {"status": 200, "content": {"text": "\\udc00"}}}]}}',
            "response.content.text holds a lone surrogate",
        ),
        ('{"interactions": [{"request": {"method": "GET"}, "response": {}}]}', "request.method and request.uri"),
        ("interactions: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
        (
            "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b]\n"
            "interactions: [*c, *c, *c, *c, *c, *c, *c]\n",
            "anchors and aliases",
        ),
    ],
)
def test_a_broken_recording_file_is_one_line_and_stores_nothing(text, said, tmp_path, seed_scenarios):
    path = tmp_path / "bad"
    path.write_text(text)
    with pytest.raises(CommandError) as err:
        call_command("capture", str(path), *FLAGS)
    assert said in str(err.value) and "\n" not in str(err.value)
    assert StagedRecording.objects.count() == 0


def test_an_oversized_yaml_cassette_is_refused_before_parsing(monkeypatch):
    from fixtures_review import recordings

    monkeypatch.setattr(recordings, "MAX_YAML_BYTES", 100)
    with pytest.raises(RecordingError, match="larger than 100 bytes"):
        load(b"interactions:\n" + b"- {}\n" * 100)


def test_a_bad_mapping_names_the_rule_and_key():
    with pytest.raises(RecordingError, match="mapping rule 1: colour is not a key of a rule"):
        parse_mapping("rules:\n  - {method: GET, colour: red}\n")
    with pytest.raises(RecordingError, match=r"mapping rule 2: url: RE2 cannot run this pattern \(missing \)"):
        parse_mapping("rules:\n  - {method: GET}\n  - {url: '(unclosed'}\n")
    with pytest.raises(RecordingError, match="mapping rule 1: contract_revision: a positive integer"):
        parse_mapping("rules:\n  - {method: GET, contract_revision: 0}\n")
    with pytest.raises(RecordingError, match="matches nothing in particular"):
        parse_mapping("rules:\n  - {tool: x}\n")


def test_recording_flags_on_a_native_capture_are_refused(tmp_path):
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(status_capture()))
    with pytest.raises(CommandError, match="not a HAR file or a VCR cassette, and --tool apply only to those"):
        call_command("capture", str(path), "--tool", "x")


def test_a_native_capture_still_answers_the_capture_shape(tmp_path, capsys, seed_scenarios):
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(status_capture()))
    out = capture(path, capsys=capsys)
    assert "recordings" not in out and out["tool"] == "status.lookup"


# --- the API -----------------------------------------------------------------------------------------------------


def _token(user) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(name="h", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9],
                                scopes=[HarnessToken.Scope.CAPTURE])  # fmt: skip
    return key


def test_the_api_takes_a_yaml_cassette_with_the_fields_in_the_query(client, role_user, service, tmp_path,
                                                                      seed_scenarios):  # fmt: skip
    harness = role_user("operator", "harness")
    cassette = record(tmp_path / "c.yaml", service, "yaml")
    query = "scenario=docs-research&tool=status.lookup&contract_revision=2&effect_class=read"
    response = client.post(f"{reverse('api-captures')}?{query}", data=cassette.read_bytes(),
                           content_type="application/yaml", HTTP_AUTHORIZATION=f"Token {_token(harness)}")  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["format"] == "vcr" and len(body["recordings"]) == 4
    assert all(r.captured_by == harness for r in StagedRecording.objects.all())


def test_the_api_takes_a_multipart_cassette_and_mapping(client, role_user, service, tmp_path, seed_scenarios):
    client.force_login(role_user("operator"))
    cassette = record(tmp_path / "c.json", service, "json", gz=False)
    with cassette.open("rb") as fh:
        response = client.post(reverse("api-captures"), data={"file": fh, "mapping": MAPPING})
    assert response.status_code == 201, response.content
    assert [r["tool"] for r in response.json()["recordings"]] == ["status.lookup", "status.lookup", "mail.send"]


@pytest.mark.parametrize(
    ("data", "ctype", "said"),
    [
        (b"interactions: []\n", "application/yaml", "holds no interactions"),
        (b'{"log": {"creator": {}, "entries": []}}', "application/json", "holds no entries"),
        (
            b"interactions:\n  - {request: {method: GET, uri: 'http://x/'}, response: {status: {code: 200}}}\n",
            "application/yaml",
            "scenario: required",
        ),
    ],
)
def test_the_api_refuses_bad_recordings_in_one_line(client, role_user, data, ctype, said):
    client.force_login(role_user("operator"))
    response = client.post(reverse("api-captures"), data=data, content_type=ctype)
    assert response.status_code == 400 and said in response.json()["error"]
    assert StagedRecording.objects.count() == 0


def test_the_api_refuses_a_multipart_post_without_a_file(client, role_user):
    client.force_login(role_user("operator"))
    response = client.post(reverse("api-captures"), data={"tool": "x"})
    assert response.status_code == 400 and response.json()["error"].startswith("file: required")
