"""Seed 001, "Retention preserved the failure, not every byte forever": promoted fixture bodies follow retention (the
console half; the engine half is tests/engine/test_fixture_body_retention.py).

Promotion stores the reviewed body through the storage gate and the fixture holds its digest (`response.body_digest`)
under a hold of its own: the recording's class, counted from its `captured_at`. While the hold is live, a replay in
fixtures is served the body the digest names. The real sweep (`runs.retention.retention_sweep`, with a `now` past the
class's period) ends the hold and, when it was the last holder, removes the bytes with a deletion record; from then on
a replay that reaches the fixture stops as `incomplete_test_world` naming the fixture and the record (no live call,
nothing served in its place), and the scenario page, the recording page and the missing-fixture page say "Source
material expired". The scenario version's digest is the same throughout.

Story 000's world: the demo's `run-000-recorded` replayed under `docs-research@1` stops on the status lookup of
req-7781; a capture of it is approved, minting `docs-research@2`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.files.storage import storages
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import AuditEntry
from fixtures_review.models import FixtureBodyHold, ScenarioVersion, StagedRecording
from fixtures_review.scenarios import scenario_bodies, scenario_package
from fixtures_review.services import capture_stage
from n17q_demo.captures import demo_captures
from n17q_engine import canonical
from replays.models import Replay
from runs.models import Blob, BlobDeletion, Event, RunBlobHold, blob_storage_name
from runs.retention import retention_sweep

pytestmark = pytest.mark.django_db

CAPTURED = datetime(2026, 7, 1, 9, 0, 6, tzinfo=UTC)
# The status answer, with a field the demo's own capture does not have: bytes of this fixture's own.
OWN_BODY = {"request_id": "req-7781", "status": "not_found", "consistency_window_s": 30, "checked": "edge-2"}


@pytest.fixture
def demo(capsys) -> None:
    call_command("load_demo", "--json")
    capsys.readouterr()


def _replay(capsys, *extra: str) -> dict[str, Any]:
    call_command("replay", "run-000-recorded", "--mode", "rerun", *extra, "--inline", "--json")
    return json.loads(capsys.readouterr().out)


def _client(role_user, role: str, name: str) -> Client:
    client = Client()
    client.force_login(role_user(role, name))
    return client


def _promote(role_user, *, retention: str | None, body: Any = None) -> StagedRecording:
    """A capture of the status lookup (the recording's class `retention`), approved by a reviewer through the page."""
    raw = {**demo_captures()[0], "captured_at": CAPTURED.isoformat().replace("+00:00", "Z")}
    if body is not None:
        raw["response"] = {**raw["response"], "body": body}
    if retention is not None:
        raw["retention"] = retention
    recording = capture_stage(raw=raw, user=role_user("operator", "olga")).recording
    reviewer = _client(role_user, "reviewer", "rhea")
    response = reviewer.post(f"/review/{recording.public_id}/approve/", {"revision": recording.revision})
    assert response.status_code in (200, 302), response.content.decode()[:2000]
    recording = StagedRecording.objects.select_related("fixture_version", "scenario_version").get(pk=recording.pk)
    assert recording.state == "promoted", recording.events.last()
    assert recording.scenario_version is not None and recording.fixture_version is not None
    return recording


def _status_results(run: Any) -> list[dict[str, Any]]:
    """The run's tool results answering the status lookup (a result names its call, the call its tool)."""
    calls = {
        e.body["id"] for e in Event.objects.filter(run=run, kind="tool.call") if e.body.get("tool") == "status.lookup"
    }
    return [e.body for e in Event.objects.filter(run=run, kind="tool.result") if e.body.get("call_id") in calls]


def _served(replay: dict[str, Any]) -> dict[str, Any]:
    (result,) = _status_results(Replay.objects.get(pk=replay["replay"]).run)
    return result


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_promotion_stores_the_reviewed_body_by_digest_and_holds_it_under_the_recordings_class(demo, role_user):
    recording = _promote(role_user, retention="sensitive", body=OWN_BODY)
    version, minted = recording.fixture_version, recording.scenario_version
    assert version is not None and minted is not None
    digest = canonical.digest_json(OWN_BODY)
    # The fixture version and the minted scenario version hold the digest, never the body.
    assert version.fixture["response"] == {"outcome": "not_found", "body_digest": digest, "absent": {}}
    (pinned,) = [f for f in minted.fixture_items if f["id"] == version.fixture_id]
    assert pinned["response"] == version.fixture["response"] and "body" not in pinned["response"]
    # The bytes went through the storage gate into the blob store, hashing to the digest the engine checks.
    with storages["blobs"].open(blob_storage_name(digest), "rb") as fh:
        assert fh.read() == canonical.canonical_json(OWN_BODY)
    # Its own hold: the recording's class, counted from when the recording was made (not from the approval).
    (hold,) = FixtureBodyHold.objects.filter(fixture_version=version)
    assert (hold.blob.digest, hold.retention_class, hold.recording_id) == (digest, "sensitive", recording.pk)
    assert hold.expires_at == CAPTURED + timedelta(days=7) and hold.removed_by is None
    assert Blob.objects.get(digest=digest).expires_at == CAPTURED + timedelta(days=7)
    # The one resolver reads it back.
    assert scenario_bodies(minted).body(pinned).value == OWN_BODY


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_promoted_fixture_serves_its_body_while_kept_and_stops_the_replay_once_the_sweep_removed_it(
    demo, role_user, capsys, tmp_path
):
    recording = _promote(role_user, retention="sensitive", body=OWN_BODY)
    fixture_id, minted = recording.fixture_version.fixture_id, recording.scenario_version
    assert minted is not None
    digest = canonical.digest_json(OWN_BODY)
    digest_before = scenario_package(minted).digest

    # Kept: the replay in fixtures is served the promoted fixture's body, byte for byte, and completes.
    kept = _replay(capsys, "--scenario", minted.ref)
    assert kept["state"] == "completed"
    served = _served(kept)
    assert (served["origin"], served["fixture"], served["blob"]) == ("fixture", fixture_id, digest)

    reviewer = _client(role_user, "reviewer", "rex")
    page_url = f"/scenarios/{minted.name}@{minted.version}/"
    with CaptureQueriesContext(connection) as kept_page:
        assert reviewer.get(page_url).status_code == 200

    # The real sweep, a day before the class's period runs out: nothing. Past it: the bytes go, once.
    assert retention_sweep(now=CAPTURED + timedelta(days=6)).removed == []
    swept = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert swept.removed == [digest]
    again = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert (again.removed, again.holds_ended) == ([], [])
    (record,) = BlobDeletion.objects.filter(digest=digest)
    assert record.bytes_removed and record.retention_class == "sensitive"
    assert f"fixture {fixture_id}" in record.holders and f"recording {recording.public_id}" in record.holders
    assert FixtureBodyHold.objects.get(fixture_version=recording.fixture_version).removed_by_id == record.pk
    # The run the kept replay made read the body: it held it under the fixture's hold, never a class of its own
    # (reading never starts a clock), and that hold ended with the same removal.
    read = RunBlobHold.objects.get(run_blob__run__run_id=kept["run"], blob__digest=digest)
    assert (read.retention_class, read.expires_at, read.removed_by_id) == (
        "sensitive",
        CAPTURED + timedelta(days=7),
        record.pk,
    )
    assert not storages["blobs"].exists(blob_storage_name(digest))
    assert AuditEntry.objects.filter(action="blob.expired", target=digest).count() == 1
    # The version did not change: the same digest, verifiable without the bytes.
    assert scenario_package(minted).digest == digest_before == minted.digest

    # Expired: the replay stops as incomplete_test_world, naming the fixture, the digest and the deletion record.
    stopped = _replay(capsys, "--scenario", minted.ref)
    assert stopped["state"] == "incomplete_test_world"
    replay = Replay.objects.get(pk=stopped["replay"])
    (missing,) = replay.missing
    assert missing["body_expired"]["fixture"] == fixture_id and missing["body_expired"]["body_digest"] == digest
    assert missing["body_expired"]["record"] == record.pk and missing["body_expired"]["class"] == "sensitive"
    assert "source material expired" in missing["reason"]
    # Nothing served in its place, and nothing fetched: no result for the lookup at all.
    assert _status_results(replay.run) == []

    # The pages say it: the scenario page, the recording (its fixture version) page, the missing-fixture page.
    said = f"Source material expired: fixture {fixture_id}&#x27;s body {digest} was removed under retention class"
    where = f"(deletion record {record.pk})"
    with CaptureQueriesContext(connection) as expired_page:
        scenario_page = reviewer.get(page_url).content.decode()
    assert said in scenario_page and where in scenario_page
    # Saying it costs no query more than serving it: the holds and their records are read in one query either way.
    assert len(expired_page.captured_queries) == len(kept_page.captured_queries)
    recording_page = reviewer.get(f"/review/{recording.public_id}/").content.decode()
    assert 'id="fixture-body-expired"' in recording_page and said in recording_page and where in recording_page
    assert "keeps its own reviewed copy" not in recording_page
    missing_page = reviewer.get(f"/replays/{replay.pk}/missing/0/").content.decode()
    assert 'id="missing-body-expired"' in missing_page and said in missing_page and where in missing_page
    assert "has no fixture for this request" not in missing_page
    # What answers the request says the same: the version holds the fixture, which answers nothing now.
    assert f"holds fixture <code>{fixture_id}</code> for it, but its body expired under retention" in missing_page
    api = reviewer.get(f"/api/v1/replays/{replay.pk}/missing/").json()["missing"][0]
    assert {"scenario": minted.ref, "fixture": fixture_id, "body_expired": True} in api["answers"]["versions"]
    coverage_row = next(r for r in scenario_page.split("<tr") if "status.lookup r" in r and "body expired" in r)
    assert 'class="uncovered"' in coverage_row  # the coverage no longer counts it
    # An export writes the package as held (the digest, not the bytes) and says which body expired, with its record.
    call_command("export_package", minted.ref, str(tmp_path / "exported"), "--json")
    exported = json.loads(capsys.readouterr().out)
    assert exported["digest"] == minted.digest and exported["bodies_by_digest"] == [digest]
    assert exported["expired_bodies"][digest]["record"] == record.pk
    # Copying the expired fixture's answer "similar" is refused, naming the record: never copied as an empty body.
    operator = _client(role_user, "operator", "otto")
    before = StagedRecording.objects.count()
    copied = operator.post(f"/replays/{replay.pk}/missing/0/copy-similar/", {"like_fixture": fixture_id}, follow=True)
    assert "Source material expired" in copied.content.decode() and where in copied.content.decode()
    assert StagedRecording.objects.count() == before


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_fixture_hold_that_runs_out_ends_while_another_holder_keeps_the_same_bytes(demo, role_user, capsys):
    """The demo's own capture (class standard: kept) holds the same body bytes; the promoted fixture's sensitive hold
    still ends at its own time, with a record of its own, and the fixture answers "source material expired"."""
    recording = _promote(role_user, retention="sensitive")  # the demo capture's body, byte for byte
    fixture_id, minted = recording.fixture_version.fixture_id, recording.scenario_version
    digest = recording.fixture_version.fixture["response"]["body_digest"]
    swept = retention_sweep(now=CAPTURED + timedelta(days=8))
    assert swept.removed == [] and digest in swept.holds_ended
    (record,) = [r for r in BlobDeletion.objects.filter(digest=digest) if f"fixture {fixture_id}" in r.holders]
    assert not record.bytes_removed and "for these fixtures" in record.reason
    assert storages["blobs"].exists(blob_storage_name(digest))  # kept for the holder still keeping it
    assert retention_sweep(now=CAPTURED + timedelta(days=9)).holds_ended == []  # ended once
    assert scenario_bodies(ScenarioVersion.objects.get(pk=minted.pk)).expiries[digest].record_id == record.pk
    stopped = _replay(capsys, "--scenario", minted.ref)
    assert stopped["state"] == "incomplete_test_world"
    (missing,) = Replay.objects.get(pk=stopped["replay"]).missing
    assert missing["body_expired"]["record"] == record.pk


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_class_that_keeps_forever_is_never_swept(demo, role_user, capsys):
    recording = _promote(role_user, retention="standard", body=OWN_BODY)
    digest = canonical.digest_json(OWN_BODY)
    (hold,) = FixtureBodyHold.objects.filter(fixture_version=recording.fixture_version)
    assert hold.expires_at is None
    far = retention_sweep(now=CAPTURED + timedelta(days=365 * 100))
    assert digest not in far.removed and digest not in far.holds_ended
    assert not BlobDeletion.objects.filter(digest=digest).exists()
    assert FixtureBodyHold.objects.get(pk=hold.pk).removed_by is None
    assert _replay(capsys, "--scenario", recording.scenario_version.ref)["state"] == "completed"
