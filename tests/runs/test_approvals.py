"""Issue 39 on the pages: an approval's review surface, and the decisions waiting on a person (runs/approvals.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import HarnessToken
from n17q_demo.stories import demo_bundles, write_bundle
from runs.facts import facts_of
from runs.importer import run_import_from_path
from runs.models import Run
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

STORIES = {b.manifest["run"]["id"]: b for b in demo_bundles()}


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def _import(tmp_path, *run_ids: str) -> None:
    for run_id in run_ids:
        run_import_from_path(write_bundle(STORIES[run_id], tmp_path / run_id))


def _get(client, url: str) -> tuple[int, int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    return response.status_code, len(ctx.captured_queries), response.content.decode()


@pytest.mark.seed("001", "Approvals did not survive as authority")
def test_the_approval_page_renders_the_review_surface_and_a_replays_copied_approval_as_read_only(
    viewer_client, tmp_path
):
    _import(tmp_path, "run-003-review-request", "run-001-naive-replay")
    status, queries, html = _get(viewer_client, "/runs/run-003-review-request/approvals/e-003-approval/")
    assert status == 200
    # Session, user, their permissions (2) and groups (the header's role): 5; the run, the approval, the events before
    # it (one batch, and the empty read that ends the keyset walk), the intent it names (declared after it), whether
    # events follow: 6. One more batch per READ_BATCH events before the approval, nothing else grows with the run.
    assert queries == 11
    for shown in (
        "review-service:repo/main",  # the destination
        "review-request:art-2:main",  # the effect identity
        "termination_unknown, 1 failed",  # the broad run, incomplete with a failure
        "no current validation",  # workspace two
        "binds the intent's evidence set",
        "still binds",
    ):
        assert shown in html, shown
    facts = facts_of(Run.objects.get(run_id="run-003-review-request"))
    assert facts["approvals"]["items"][0]["review_digest"][:16] in html  # the fact layer's digest, not a recount
    status, _, html = _get(viewer_client, "/runs/run-001-naive-replay/approvals/e-001-approval/")
    assert status == 200
    assert "read-only evidence" in html and "historical, in a rerun replay" in html
    # Only approvals and decisions waiting on a person have a surface; anything else is a 404.
    assert viewer_client.get("/runs/run-003-review-request/approvals/e-003-policy-allow/").status_code == 404
    assert viewer_client.get("/runs/run-003-review-request/approvals/no-such-event/").status_code == 404


@pytest.mark.seed("001", "Comparison happened at several layers")
def test_decisions_waiting_on_a_person_are_listed_across_runs_with_a_pinned_query_count(
    viewer_client, client, role_user, tmp_path
):
    _import(tmp_path, "run-001-recorded", "run-001-naive-replay", "run-003-review-request")
    status, queries, html = _get(viewer_client, "/approvals/pending/")
    assert status == 200
    # Session, user, permissions (2), groups: 5; the runs with waiting decisions and the count of those not evaluated.
    assert queries == 7
    assert "e-001-policy-needs-approval" in html and "/runs/run-001-naive-replay/approvals/" in html
    assert "run-001-recorded" not in html  # its reviewer's own approval answered the decision
    assert "read-only evidence" in html  # the naive replay's copied approval leaves it waiting
    # A run whose stored facts predate this version is said to be not evaluated, not counted as nothing pending.
    Run.objects.filter(run_id="run-003-review-request").update(facts={"version": 1})
    status, again, html = _get(viewer_client, "/approvals/pending/")
    assert again == queries and "1 run whose facts predate this version is not read here" in html
    # The API lists the same, to a token that may read runs.
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.IMPORT_RUNS.value)
    answer = client.get("/api/v1/approvals/pending/", HTTP_AUTHORIZATION=f"Token {key}").json()
    assert answer["decisions"] == 1 and answer["not_evaluated"] == 1
    (row,) = answer["runs"]
    assert row["run"] == "run-001-naive-replay" and row["pending"][0]["not_authority"] == ["e-001-approval"]
    no_scope = token_for(role_user("operator", "capture-only"), HarnessToken.Scope.CAPTURE.value)
    assert client.get("/api/v1/approvals/pending/", HTTP_AUTHORIZATION=f"Token {no_scope}").status_code == 403


def test_the_detail_panel_says_which_fixture_versions_a_checkpoint_names():
    from runs.event_facts import describe

    body = {
        "kind": "checkpoint",
        "world_revision": 3,
        "workspaces": {},
        "clock": "2026-06-10T14:00:00Z",
        "fixtures": {
            "scenario": {"name": "coding-review-request", "version": 1},
            "package_digest": "sha256:" + "a" * 64,
            "count": 11,
            "answered": [{"id": "focused-ws-1", "digest": "sha256:" + "b" * 64}],
        },
    }
    facts = dict(describe(body, {}))
    assert facts["fixtures"] == (
        f"scenario coding-review-request@1 (package sha256:{'a' * 64}): 1 of 11 fixtures answered so far: "
        f"focused-ws-1 sha256:{'b' * 64}"
    )
    # A checkpoint from before the field (or a harness's own) names none: no line, never an invented one.
    assert "fixtures" not in dict(describe({**body, "fixtures": None}, {}))
