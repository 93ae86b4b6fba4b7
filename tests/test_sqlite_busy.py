"""Issue 20, point 2: on SQLite, a long import never turns the console's other writes into 500s.

A real import in one transaction (as a file of several runs is still imported: runs.import_formats; a bundle on
SQLite is written in slices since issue 31, which tests/runs/test_import_slices.py shows the writers getting through)
runs on a thread of its own against the test database file and is held inside its transaction (the write lock
taken) while, each on a thread and connection of its own, a reviewer approves a staged recording, a
harness posts a capture and a person signs in. Their busy timeout is cut to a fraction of a second so the test does
not wait out the production 20 s. Each answer is a success or a refusal it would give anyway, or a 503 with
Retry-After: never a 500. After the import commits, the same writes go through.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections
from django.test import Client
from django.urls import reverse

from accounts.models import HarnessToken
from console.busy import RETRY_AFTER_S, is_database_busy
from fixtures_review.services import capture_stage
from runs import importer
from runs.models import Run
from tests import bundles


def _capture() -> dict:
    return json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())


def _token(user) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="h", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9], scopes=["captures:create"]
    )
    return key


def _in_thread(fn, out: dict, name: str) -> threading.Thread:
    def work():
        try:
            out[name] = fn()
        except BaseException as exc:  # the test reports it, never hides it
            out[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, name=name)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "sqlite", reason="the embedded database's write lock")
def test_writes_behind_a_long_import_answer_503_with_retry_after_never_500(
    role_user, monkeypatch, tmp_path, reviewed_connections, settings
):
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios as seeds

    for package in seeds.seed_packages():
        scenario_import(package, source="demo")
    capturer = role_user("reviewer", "rita")
    reviewer = role_user("reviewer", "ravi")
    role_user("viewer", "vera")
    harness = role_user("operator", "harness")
    key = _token(harness)
    recording = capture_stage(raw=json.dumps(_capture()).encode(), user=capturer).recording
    assert connection.settings_dict["NAME"] != ":memory:" and "mode=memory" not in str(connection.settings_dict["NAME"])

    # force_login writes the session row itself, outside any request: made before the import takes the lock.
    reviewer_client = Client(raise_request_exception=False)
    reviewer_client.force_login(reviewer)

    holding, release = threading.Event(), threading.Event()
    real_write_findings = importer._write_findings

    def held(*args, **kwargs):
        holding.set()  # inside the import's transaction: events written, the write lock held
        release.wait(60)
        return real_write_findings(*args, **kwargs)

    monkeypatch.setattr(importer, "_write_findings", held)
    settings.N17Q_IMPORT_SLICES = False  # the import's one transaction holds the lock throughout
    results: dict = {}
    folder = bundles.write_folder(tmp_path / "b", *bundles.example_parts())
    importing = _in_thread(lambda: importer.run_import_from_path(folder), results, "import")
    assert holding.wait(60), results.get("import")

    options = connections.settings["default"].setdefault("OPTIONS", {})
    saved = options.get("timeout")
    options["timeout"] = 0.3
    try:

        def capture():
            client = Client(raise_request_exception=False)
            return client.post(
                reverse("api-captures"),
                data=json.dumps(_capture()),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Token {key}",
            )

        def sign_in():
            client = Client(raise_request_exception=False)
            return client.post(reverse("login"), {"username": "vera", "password": "a-long-test-password"})

        threads = [_in_thread(fn, results, fn.__name__) for fn in (capture, sign_in)]
        for thread in threads:
            thread.join(60)
        action = _in_thread(
            lambda: reviewer_client.post(
                reverse("fixtures:action", args=[recording.public_id, "approve"]), {"revision": recording.revision}
            ),
            results,
            "approve",
        )
        action.join(60)
    finally:
        if saved is None:
            options.pop("timeout", None)
        else:
            options["timeout"] = saved
        release.set()
        importing.join(120)

    assert isinstance(results["import"], importer.ImportResult), results["import"]
    assert Run.objects.filter(run_id="run-example-docs").count() == 1
    busy = 0
    for name in ("capture", "sign_in", "approve"):
        response = results[name]
        assert not isinstance(response, BaseException), (name, response)
        assert response.status_code < 500 or response.status_code == 503, name
        if response.status_code == 503:
            busy += 1
            assert response["Retry-After"] == str(RETRY_AFTER_S), name
            assert "busy" in response.content.decode(), name
    assert busy >= 1, {n: results[n].status_code for n in ("capture", "sign_in", "approve")}
    capture_answer = results["capture"]
    if capture_answer.status_code == 503:
        assert set(capture_answer.json()) == {"error"}

    # With the import committed, the same writes go through.
    after = Client(raise_request_exception=False)
    signed = after.post(reverse("login"), {"username": "vera", "password": "a-long-test-password"})
    assert signed.status_code == 302
    staged = Client().post(
        reverse("api-captures"),
        data=json.dumps(_capture()),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert staged.status_code in (200, 201), staged.content[:300]


def test_it_tells_the_lock_from_other_database_errors():
    import sqlite3

    from django.db import IntegrityError, OperationalError

    assert is_database_busy(OperationalError("database is locked"))
    assert is_database_busy(sqlite3.OperationalError("database table is locked"))
    try:
        try:
            raise sqlite3.OperationalError("database is locked")
        except sqlite3.OperationalError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert is_database_busy(wrapped)
    assert not is_database_busy(OperationalError("no such table: x"))
    assert not is_database_busy(IntegrityError("database is locked"))
    assert not is_database_busy(None)
