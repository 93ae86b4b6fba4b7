"""Issue 34 point 4 on the run page: an approval's detail shows what it approved and what changed before the action."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from n17q_engine.vocabulary import BUNDLE_FORMAT
from runs.importer import run_import_from_path
from tests import bundles
from tests.engine.test_lineage_review_object import REQUIRED, story

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def _import(tmp_path, log) -> str:
    manifest = {"format": BUNDLE_FORMAT, "run": log.run, "blobs": {}}
    run_import_from_path(bundles.write_folder(tmp_path / log.run["id"], manifest, log.events, {}))
    return log.run["id"]


def _detail(client, run_id: str, event_id: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(f"/runs/{run_id}/?event={event_id}")
    assert response.status_code == 200
    html = response.content.decode()
    return len(ctx.captured_queries), html[html.index('<aside id="detail"') :]


def test_the_approval_detail_shows_what_changed_after_it(viewer_client, tmp_path):
    log, ids = story(run_id="run-review-changed")
    log.decision("int1", [ids["focused"], ids["broad"]], REQUIRED, id="decision-2", policy_revision="policy@8")
    log.execution("int1", id="execution")
    run_id = _import(tmp_path, log)
    queries, detail = _detail(viewer_client, run_id, "approval")
    assert "What was approved" in detail
    assert "no longer binds" in detail
    assert "policy revision policy@7 → policy@8" in detail
    assert "LIN004" in detail  # the finding at this end of the edge says the same
    # The review object comes with the run's stored facts (Run.facts, loaded with the run): no query of its own. The
    # page's 20 for an event like the decision, + the blobs the approval's evidence-set digest might name.
    assert queries == 21
    other, _ = _detail(viewer_client, run_id, "decision")
    assert other == 20
    # The verdict's approvals line counts it.
    page = viewer_client.get(f"/runs/{run_id}/").content.decode()
    assert "1 no longer binding what was approved" in page


def test_an_untouched_approval_says_it_still_binds(viewer_client, tmp_path):
    log, _ = story(run_id="run-review-binds")
    log.execution("int1", id="execution")
    run_id = _import(tmp_path, log)
    _, detail = _detail(viewer_client, run_id, "approval")
    assert "What was approved" in detail and "still binds" in detail
    assert "no longer binds" not in detail
