"""The writers beside an import (benchmarks/bench_import_writers.py): one fresh interpreter, production settings.

    python -m benchmarks._writers_child STOP_FILE IDLE_ROUNDS

It sets up what its writes need (people, a harness token, two reviewed connections, the seed scenarios), times
IDLE_ROUNDS rounds on the idle database, prints `ready`, and goes round until STOP_FILE exists. A round is four
writes, each timed from its start to its answer:

- `lock`: a bare write, BEGIN IMMEDIATE then COMMIT on a connection of its own (Django's settings, its busy
  timeout): the wait for SQLite's write lock and nothing else;
- `capture`: POST /api/v1/captures/ with a harness token (the example capture), through Django's whole request path;
- `sign-in`: POST /login/ with a viewer's password (the session row, last_login, the audit record);
- `review`: a reviewer rejects the recording the round's capture staged (fixtures_review.services.recording_reject).

Requests go through Django's test client, in this process, without a socket (as bench_run_page's "server time"). It
prints one result line (benchmarks.common.RESULT_MARK): per action, the idle rounds' times, and every busy round's
start (epoch seconds), time and answer (an HTTP status, "ok", or the error's first line).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, RESULT_MARK

PASSWORD = "bench-password-1"
CAPTURE = json.loads((REPO / "tests" / "data" / "example-capture.json").read_text())


class Writers:
    def __init__(self) -> None:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
        import django

        django.setup()
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group
        from django.core.management import call_command
        from django.db import connections
        from django.test import Client

        from accounts.models import HarnessToken
        from fixtures_review.connections import connection_approve, connection_propose
        from fixtures_review.scenarios import scenario_import
        from n17q_demo import seed_scenarios

        call_command("migrate", verbosity=0, interactive=False)
        # Production settings, but the requests come from no proxy (as in benchmarks._child run-page).
        settings.ALLOWED_HOSTS = ["localhost"]
        settings.SECURE_SSL_REDIRECT = False
        users = get_user_model().objects

        def person(name: str, role: str) -> Any:
            user = users.create_user(name, password=PASSWORD)
            user.groups.add(Group.objects.get(name=role))
            return user

        proposer, approver = person("bench-proposer", "reviewer"), person("bench-approver", "reviewer")
        self.reviewer = person("bench-reviewer", "reviewer")
        person("bench-viewer", "viewer")
        harness = person("bench-harness", "operator")
        for package in seed_scenarios.seed_packages():
            scenario_import(package, source="bench")
        policy: dict[str, Any] = {
            "reaches": "live",
            "source_classes": ["api"],
            "capabilities": ["read"],
            "account_scopes": ["bench-account"],
            "capture_result_classes": ["public", "internal"],
            "default_result_class": "internal",
        }
        connection_approve(
            connection=connection_propose(name=CAPTURE["connection"], user=proposer, **policy), user=approver
        )
        key = HarnessToken.new_key()
        HarnessToken.objects.create(
            name="bench",
            user=harness,
            key_digest=HarnessToken.digest_key(key),
            prefix=key[:9],
            scopes=["captures:create"],
        )
        self.token = key
        self.client = Client(HTTP_HOST="localhost", raise_request_exception=False)
        self.lock_connection = connections.create_connection("default")
        self.lock_connection.ensure_connection()
        self.staged: str | None = None

    def lock(self) -> str:
        raw = self.lock_connection.connection
        raw.execute("BEGIN IMMEDIATE")
        raw.execute("COMMIT")
        return "ok"

    def capture(self) -> str:
        response = self.client.post(
            "/api/v1/captures/",
            data=json.dumps(CAPTURE),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {self.token}",
        )
        self.staged = response.json().get("staged") if response.status_code == 201 else None
        return str(response.status_code)

    def sign_in(self) -> str:
        response = self.client.post("/login/", {"username": "bench-viewer", "password": PASSWORD})
        return str(response.status_code)

    def review(self) -> str:
        from fixtures_review.models import StagedRecording
        from fixtures_review.services import recording_reject

        if self.staged is None:
            return "no recording (the capture failed)"
        recording = StagedRecording.objects.get(public_id=self.staged)
        recording_reject(recording=recording, reason="benchmark", user=self.reviewer, revision=recording.revision)
        return "ok"

    def round(self) -> dict[str, tuple[float, float, str]]:
        out = {}
        for name, action in (("lock", self.lock), ("capture", self.capture), ("sign-in", self.sign_in)):
            out[name] = _timed(action)
        out["review"] = _timed(self.review)
        return out


def _timed(action: Any) -> tuple[float, float, str]:
    from django.db import connections

    at = time.time()
    started = time.perf_counter()
    try:
        answer = action()
    except Exception as exc:  # an answer like any other: what a user of the console would have seen
        answer = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        for connection in connections.all():  # a failed statement must not poison the next round's
            connection.close_if_unusable_or_obsolete()
    return at, time.perf_counter() - started, answer


def main(argv: list[str]) -> int:
    stop_file, idle_rounds = Path(argv[0]), int(argv[1])
    writers = Writers()
    writers.round()  # warm: templates, the first connection, the first hash of a password
    idle = [writers.round() for _ in range(idle_rounds)]
    print("ready", flush=True)
    busy = []
    while not stop_file.exists():
        busy.append(writers.round())
    names = list(idle[0])
    result = {
        "idle": {name: [r[name][1] for r in idle] for name in names},
        "idle_answers": {name: sorted({r[name][2] for r in idle}) for name in names},
        "busy": {name: [list(r[name]) for r in busy] for name in names},
    }
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
