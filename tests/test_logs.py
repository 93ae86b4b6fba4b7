"""Structured logs: JSON lines in production, one line per request with a request id."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

EMIT = """
import django, logging
django.setup()
logging.getLogger("runs.importer").warning("imported run %s", "r-1", extra={"run": "r-1", "events": 9})
try:
    1 / 0
except ZeroDivisionError:
    logging.getLogger("replays.services").exception("replay 7: its log could not be imported")
"""


def emit(tmp_path, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("N17Q_LOG")}
    env.update(
        DJANGO_SETTINGS_MODULE="n17q_site.settings",
        N17Q_DATA_DIR=str(tmp_path),
        N17Q_SECRET_KEY="a-production-secret-key-for-the-test-only-" + "k" * 30,
        **env_vars,
    )
    return subprocess.run([sys.executable, "-c", EMIT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_production_logs_are_json_lines(tmp_path):
    done = emit(tmp_path, N17Q_DEBUG="0")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2  # the traceback is inside its record, not lines of its own
    warning, error = (json.loads(line) for line in lines)
    assert {k: warning[k] for k in ("level", "logger", "message", "run", "events")} == {
        "level": "WARNING",
        "logger": "runs.importer",
        "message": "imported run r-1",
        "run": "r-1",
        "events": 9,
    }
    assert warning["timestamp"].endswith("+00:00")
    assert error["level"] == "ERROR" and "ZeroDivisionError" in error["exc_info"]


def test_development_logs_are_plain_unless_json_is_asked_for(tmp_path):
    plain = emit(tmp_path, N17Q_DEBUG="1")
    assert "WARNING runs.importer imported run r-1" in plain.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain.stderr.splitlines()[0])
    asked = emit(tmp_path, N17Q_DEBUG="1", N17Q_LOG_FORMAT="json")
    assert json.loads(asked.stderr.splitlines()[0])["logger"] == "runs.importer"


def test_an_unknown_log_format_stops_the_process(tmp_path):
    done = emit(tmp_path, N17Q_LOG_FORMAT="xml")
    assert done.returncode != 0 and "N17Q_LOG_FORMAT='xml' is not json or plain" in done.stderr


@pytest.mark.django_db
def test_every_request_is_one_record_with_its_id(client, role_user, caplog):
    client.force_login(role_user("viewer", "vera"))
    with caplog.at_level(logging.INFO, logger="n17q.request"):
        response = client.get("/api/v1/runs/", HTTP_X_REQUEST_ID="proxy-req-12345678")
        refused = client.get("/runs/no-such-run/")
    records = [r for r in caplog.records if r.name == "n17q.request"]
    assert [(r.method, r.path, r.status, r.user) for r in records] == [
        ("GET", "/api/v1/runs/", 200, "vera"),
        ("GET", "/runs/no-such-run/", 404, "vera"),
    ]
    assert records[0].request_id == "proxy-req-12345678" == response["X-Request-ID"]
    # A request id that does not look like one (here: a header injection attempt) is replaced by a fresh one.
    assert len(records[1].request_id) == 32 and refused["X-Request-ID"] == records[1].request_id
    assert all(r.duration_ms >= 0 for r in records)


@pytest.mark.django_db
def test_a_forged_request_id_is_not_echoed(client):
    response = client.get("/login/", HTTP_X_REQUEST_ID="x\r\nSet-Cookie: a=b")
    assert response["X-Request-ID"] != "x\r\nSet-Cookie: a=b" and len(response["X-Request-ID"]) == 32
