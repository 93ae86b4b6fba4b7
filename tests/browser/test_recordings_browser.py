"""A HAR recorded by real Chromium (Playwright's record_har_path) from a loopback site whose page fetch()es a JSON
endpoint, staged with `capture --mapping`: the page and its script are skipped by the mapping, the JSON exchange is
staged, its Authorization header and secret fields redacted (issue 17, point 5)."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import CommandError, call_command

from fixtures_review.models import StagedRecording
from tests.conftest import approve_test_connection

pytestmark = [pytest.mark.browser, pytest.mark.django_db]

TOKEN = "ghp_" + hashlib.sha256(b"n17q-test:har").hexdigest()[:36]
PAGE = b"""<!doctype html><html lang="en"><title>status</title><p id="out">loading</p>
<script src="/app.js"></script>"""
SCRIPT = b"""fetch('/api/requests/req-7781?verbose=1', {headers: {'Authorization': 'Bearer sk-har-0123456789'}})
  .then(r => r.json()).then(j => { document.getElementById('out').textContent = j.state; });"""


class _Site(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/":
            return self._send(200, "text/html", PAGE)
        if self.path == "/app.js":
            return self._send(200, "text/javascript", SCRIPT)
        if self.path.startswith("/api/requests/req-7781"):
            body = {"id": "req-7781", "state": "open", "session_secret": "s3cr3t-value", "debug": f"key {TOKEN}"}
            return self._send(200, "application/json", json.dumps(body).encode())
        return self._send(404, "text/plain", b"not here")

    def _send(self, status, ctype, data):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def seed_scenarios(db):
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios as seeds

    return [scenario_import(p, source="demo") for p in seeds.seed_packages()]


@pytest.fixture
def site(reviewed_connections):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The HAR's exchanges name their host as their connection: a reviewed one, like any other.
    approve_test_connection(f"127.0.0.1:{server.server_address[1]}")
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_chromium_har_is_staged_through_a_mapping(chromium, site, tmp_path, capsys, seed_scenarios):
    har = tmp_path / "session.har"
    context = chromium.new_context(record_har_path=str(har), record_har_content="embed")
    page = context.new_page()
    page.goto(f"{site}/")
    page.wait_for_function("() => document.getElementById('out').textContent === 'open'")
    context.close()  # writes the HAR
    recorded = json.loads(har.read_text())
    assert recorded["log"]["creator"]["name"] == "Playwright" and len(recorded["log"]["entries"]) >= 3

    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        "defaults: {scenario: docs-research, effect_class: read}\n"
        "rules:\n"
        "  - {method: GET, path: '/api/requests/{request_id}', tool: status.lookup, contract_revision: 2,"
        " arguments: [request_id]}\n"
    )
    call_command("capture", str(har), "--mapping", str(mapping), "--json")
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "har" and len(out["recordings"]) == 1
    assert {(s["method"], s["url"].removeprefix(site)) for s in out["skipped"]} >= {("GET", "/"), ("GET", "/app.js")}
    assert all(s["reason"] == "no rule of the mapping matches it" for s in out["skipped"])
    rec = StagedRecording.objects.get(public_id=out["staged"])
    assert rec.tool == "status.lookup" and rec.request["args"] == {"request_id": "req-7781"}
    assert rec.request["headers"]["Authorization"] == "[redacted]"
    assert rec.response["body"]["session_secret"] == "[redacted]" and rec.response["body"]["state"] == "open"
    assert any(f["rule"] == "github-pat" for f in rec.findings)
    assert rec.normalized_request is not None  # keyed under the scenario's contract, like a replay will ask
    stored = json.dumps([rec.request, rec.response])
    assert TOKEN not in stored and "sk-har-" not in stored and "s3cr3t-value" not in stored

    # The same HAR without a mapping or flags: one line naming the first missing field and its flag.
    with pytest.raises(CommandError, match=r"scenario: required for a recording \(a HAR file does not say it\)"):
        call_command("capture", str(har))
    assert StagedRecording.objects.count() == 1
