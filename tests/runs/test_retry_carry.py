"""The attempt view and the API say what carried forward into a retry and what became stale (seed 003), on the demo's
story 003 run: its own facts (n17q_engine/carry_forward.py), stored with the run."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import HarnessToken
from n17q_demo.stories import demo_bundles, write_bundle
from runs.importer import run_import_from_path
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db
RUN = "run-003-review-request"


def _import(tmp_path: Path) -> None:
    (bundle,) = [b for b in demo_bundles() if b.manifest["run"]["id"] == RUN]
    run_import_from_path(write_bundle(bundle, tmp_path / "b"))


def _page(client, focus: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(f"/runs/{RUN}/?focus={focus}")
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


@pytest.mark.seed("003", "Retry preserved task and changed attempt")
def test_the_attempt_view_and_the_api_explain_the_retry(client, role_user, tmp_path: Path) -> None:
    _import(tmp_path)
    client.force_login(role_user("viewer"))
    queries, html = _page(client, "a2")
    assert "What carried forward into a2 and what became stale" in html
    assert "carried forward without a rule that holds" in html
    assert "no compatibility rule is recorded" in html
    assert "needs rerun" in html and "workspace ws-1 became uncertain" in html
    # From the facts stored with the run: the same queries as focusing attempt a1, which retried nothing.
    other, html_a1 = _page(client, "a1")
    assert "What carried forward" not in html_a1
    assert queries == other

    key = token_for(role_user("viewer", "reader"), HarnessToken.Scope.IMPORT_RUNS)
    answer = client.get(f"/api/v1/runs/{RUN}/retries/", HTTP_AUTHORIZATION=f"Token {key}")
    assert answer.status_code == 200
    body = answer.json()
    (retry,) = body["retries"]
    assert body["run"] == RUN and retry["attempt"] == "a2"
    assert {i["observation"]: i["status"] for i in retry["items"]} == {
        "e-003-focused-observed": "carried_forward_unjustified",
        "e-003-broad-observed": "needs_rerun",
    }
    assert client.get("/api/v1/runs/no-such-run/retries/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 404
