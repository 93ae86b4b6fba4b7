"""Two reviewers approving at the same moment, on PostgreSQL with two connections (two threads).

A barrier lines both approvals up after each has read the recording as staged, so both pass every check
before either claims it: the conditional UPDATE and the scenario lock decide, not luck.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections

from fixtures_review import approval
from fixtures_review.models import FixtureVersion, ScenarioVersion, StagedRecording
from fixtures_review.scenarios import loaded_scenario
from fixtures_review.services import ReviewRefused, capture_stage, recording_approve

from .conftest import search_capture, status_capture

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("the race needs two real connections to PostgreSQL (SQLite serializes every writer)")


def approve_at_once(pairs, monkeypatch):
    """Run recording_approve(recording, user) for each pair in its own thread and connection, released together."""
    barrier = threading.Barrier(len(pairs))
    real = approval.approval_refusal

    def checked_then_wait(recording, user):
        refusal = real(recording, user)  # both read "staged, no findings" before either claims
        barrier.wait(timeout=60)
        return refusal

    monkeypatch.setattr(approval, "approval_refusal", checked_then_wait)  # where recording_approve looks it up
    results: list[object] = [None] * len(pairs)

    def work(i, recording, user):
        try:
            results[i] = recording_approve(recording=StagedRecording.objects.get(pk=recording.pk), user=user)
        except ReviewRefused as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(i, r, u)) for i, (r, u) in enumerate(pairs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def test_two_reviewers_approving_one_recording_at_once_mint_exactly_one_version(seed_scenarios, role_user, monkeypatch):
    rec = capture_stage(raw=json.dumps(status_capture()).encode()).recording
    a, b = role_user("reviewer", "ann"), role_user("reviewer", "bob")
    results = approve_at_once([(rec, a), (rec, b)], monkeypatch)
    won = [r for r in results if isinstance(r, StagedRecording)]
    lost = [r for r in results if isinstance(r, ReviewRefused)]
    assert len(won) == 1 and len(lost) == 1, results
    assert "meanwhile" in str(lost[0]) or "already promoted" in str(lost[0])
    assert FixtureVersion.objects.count() == 1
    assert sorted(ScenarioVersion.objects.filter(name="docs-research").values_list("version", flat=True)) == [1, 2]
    assert rec.events.filter(action="approve").count() == 1


def test_two_recordings_of_one_scenario_approved_at_once_get_one_version_each_and_the_later_holds_both(
    seed_scenarios, role_user, monkeypatch
):
    one = capture_stage(raw=json.dumps(status_capture()).encode()).recording
    two = capture_stage(raw=json.dumps(search_capture(query="key rotation schedule")).encode()).recording
    results = approve_at_once([(one, role_user("reviewer", "ann")), (two, role_user("reviewer", "bob"))], monkeypatch)
    assert all(isinstance(r, StagedRecording) for r in results), results
    versions = sorted(ScenarioVersion.objects.filter(name="docs-research"), key=lambda v: v.version)
    assert [v.version for v in versions] == [1, 2, 3]
    latest = loaded_scenario(versions[-1])
    ids = {f.id for f in latest.fixtures}
    assert {r.fixture_version.fixture_id for r in results} <= ids
