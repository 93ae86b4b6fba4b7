"""Replays and reconstructions meet expired material (docs/retention.md): a reconstruction discloses it in its scope
note and comparison; a rerun that needs expired bytes stops precisely, naming the digest and the class."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command

from replays.models import Replay
from runs.models import Blob, BlobDeletion, Event, Run
from runs.retention import retention_sweep

pytestmark = pytest.mark.django_db


def run_json(capsys, *args) -> dict:
    call_command(*args, "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def demo(capsys):
    return run_json(capsys, "load_demo")


def test_a_reconstruction_discloses_the_expired_blob_instead_of_failing(demo, capsys, client, role_user):
    (expired,) = demo["expired"]  # story 001's first draft, class "sensitive"
    out = run_json(capsys, "replay", "run-001-recorded", "--mode", "reconstruction", "--inline")

    assert out["state"] == "completed"
    child = Run.objects.get(run_id=out["run"])
    (scope,) = Event.objects.filter(run=child, kind="replay.scope").values_list("body", flat=True)
    record = BlobDeletion.objects.get(digest=expired)
    (line,) = [u for u in scope["uncovered"] if expired in u]
    assert "expired under retention class 'sensitive', sensitivity sensitive" in line
    assert f"(deletion record {record.pk}); the digest stays, the bytes are gone" in line
    # The reconstructed run still names (and lists) the digest; its page says the bytes expired, with the record.
    result = Event.objects.get(run=child, kind="tool.result", body__blob=expired)
    client.force_login(role_user("viewer"))
    page = client.get(f"/runs/{child.run_id}/?event={result.event_id}").content.decode()
    assert "Expired: expired under retention class &#x27;sensitive&#x27;" in page and "not in the bundle" not in page
    comparison = client.get(f"/replays/{out['replay']}/comparison/").content.decode()
    assert "expired under retention class &#x27;sensitive&#x27;" in comparison


def test_a_rerun_that_needs_expired_artifact_bytes_stops_precisely(demo, capsys):
    artifact = Event.objects.get(run__run_id="run-001-recorded", kind="artifact.created").body
    # As if the rendered message had been recorded under a 30-day class that has run out.
    Blob.objects.filter(digest=artifact["digest"]).update(
        retention_class="transient", sensitivity="internal", expires_at=datetime.now(UTC) - timedelta(days=1)
    )
    assert retention_sweep(by="test").removed == [artifact["digest"]]

    out = run_json(capsys, "replay", "run-001-recorded", "--mode", "rerun", "--inline")

    assert out["state"] == "incomplete_test_world"
    (missing,) = out["missing"]
    record = BlobDeletion.objects.get(digest=artifact["digest"])
    assert missing["reason"] == (
        f"the bytes of artifact {artifact['artifact_id']} ({artifact['digest']}) expired under retention class "
        f"'transient', sensitivity internal: removed at {record.removed_at.isoformat()} (deletion record "
        f"{record.pk}); the digest stays, the bytes are gone"
    )
    child = Run.objects.get(run_id=out["run"])
    # Stopped there: no delivery, nothing live, no stand-in artifact.
    assert not Event.objects.filter(run=child, kind="artifact.created").exists()
    assert not Event.objects.filter(run=child, kind="tool.result", body__origin="live").exists()
    assert Replay.objects.get(pk=out["replay"]).state == "finished"
