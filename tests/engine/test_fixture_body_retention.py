"""Seed 001, "Retention preserved the failure, not every byte forever": a fixture may hold its response body by
digest (`response.body_digest`), the body's bytes travelling beside the scenario package. Removing them under
retention leaves the scenario's digest as it was (the version stays verifiable), and a replay whose lookup reaches
the fixture stops as `incomplete_test_world` naming the fixture, the digest and the removal, instead of serving
anything else. The real engine, in the sandbox, on packages read back from their wire form."""

from __future__ import annotations

from typing import Any

import pytest

from n17q_engine import canonical
from n17q_engine.package import PackageError, load_replay
from n17q_engine.replay import ReplayOutput
from tests.engine import replaylib as rl
from tests.engine.test_replay import final, kinds, replay

BODY = {"hits": ["rotate-signing-keys.md"], "note": "the large or sensitive recorded page"}
BODY_BYTES = canonical.canonical_json(BODY)
DIGEST = canonical.digest_bytes(BODY_BYTES)
RECORD = {
    "class": "sensitive-30d",
    "sensitivity": "customer",
    "expired_at": "2026-11-01T00:00:00Z",
    "removed_at": "2026-11-02T03:04:00Z",
    "record": 41,
}
REQUEST = rl.search_request("rotate signing keys")


def by_digest(fid: str = "f-rotate") -> dict[str, Any]:
    fixture = rl.fixture(fid, REQUEST)
    fixture["response"] = {"outcome": "ok", "body_digest": DIGEST}
    return fixture


def run(*, carried: bool) -> tuple[ReplayOutput, list[dict[str, Any]], str]:
    bodies = {DIGEST: BODY_BYTES} if carried else None
    expired = None if carried else {DIGEST: RECORD}
    sc = rl.scenario(fixtures=[by_digest()], bodies=bodies, expired_bodies=expired)
    manifest, events = rl.source_run([("docs.search", 1, REQUEST)])
    pkg = rl.replay_package(sc, manifest, events, fixture_bodies=bodies, expired_fixture_bodies=expired)
    out, log = replay(pkg)
    return out, log, sc.digest


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_fixture_body_held_by_digest_is_served_exactly_while_its_bytes_are_kept() -> None:
    out, log, _digest = run(carried=True)
    (result,) = kinds(log, "tool.result")
    assert (result["origin"], result["fixture"]) == ("fixture", "f-rotate")
    assert final(log)["state"] == "completed"
    # The body served is the one the digest names, byte for byte.
    assert result["blob"] == DIGEST and out.blobs[DIGEST] == BODY_BYTES


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_an_expired_fixture_body_stops_the_replay_naming_the_fixture_digest_and_removal() -> None:
    _out, log, kept_digest = run(carried=True)
    _out, log, expired_digest = run(carried=False)
    # The scenario version is the same package, digest for digest, with or without the body's bytes.
    assert expired_digest == kept_digest
    assert not kinds(log, "tool.result"), "nothing is served in the expired body's place"
    (missing,) = kinds(log, "fixture.missing")
    assert missing["body_expired"] == {"fixture": "f-rotate", "body_digest": DIGEST, **RECORD}
    assert "fixture body expired" in missing["reason"] and DIGEST in missing["reason"]
    assert "2026-11-02T03:04:00Z" in missing["reason"] and "source material expired" in missing["reason"]
    state = final(log)
    assert state["state"] == "incomplete_test_world"
    assert state["reason"].startswith("expired fixture body for docs.search revision 1")


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_body_neither_carried_nor_recorded_expired_or_not_its_digest_is_refused() -> None:
    with pytest.raises(PackageError, match="neither carried nor recorded as expired"):
        rl.scenario(fixtures=[by_digest()])
    with pytest.raises(PackageError, match="do not hash to its digest"):
        rl.scenario(fixtures=[by_digest()], bodies={DIGEST: BODY_BYTES + b" "})
    both = by_digest()
    both["response"]["body"] = BODY
    with pytest.raises(PackageError, match="inline or by digest, not both"):
        rl.scenario(fixtures=[both], bodies={DIGEST: BODY_BYTES})
    with pytest.raises(PackageError, match="record is required"):
        rl.scenario(fixtures=[by_digest()], expired_bodies={DIGEST: {k: v for k, v in RECORD.items() if k != "record"}})
    # A replay package cannot carry a body and call it expired too.
    sc = rl.scenario(fixtures=[by_digest()], bodies={DIGEST: BODY_BYTES})
    manifest, events = rl.source_run([("docs.search", 1, REQUEST)])
    with pytest.raises(PackageError, match="expired_fixture_bodies"):
        rl.replay_package(
            sc, manifest, events, fixture_bodies={DIGEST: BODY_BYTES}, expired_fixture_bodies={DIGEST: RECORD}
        )
    # Read back, the package keeps the by-digest form and the record.
    expired = rl.replay_package(
        rl.scenario(fixtures=[by_digest()], expired_bodies={DIGEST: RECORD}),
        manifest,
        events,
        expired_fixture_bodies={DIGEST: RECORD},
    )
    loaded = load_replay(expired)
    assert loaded.expired_fixture_bodies == {DIGEST: RECORD} and loaded.fixture_bodies == {}
    assert loaded.scenario is not None
    (fixture,) = loaded.scenario.fixtures
    assert fixture.to_dict()["response"] == {"outcome": "ok", "body_digest": DIGEST, "absent": {}}


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_fixture_whose_body_expired_covers_nothing_and_its_contract_row_says_why() -> None:
    from n17q_engine.coverage import coverage_of
    from n17q_engine.package import load_scenario

    def contract_row(**held: Any) -> Any:
        loaded = load_scenario(rl.scenario(fixtures=[by_digest()], **held), **held)
        (row,) = [r for r in coverage_of(loaded).rows if r.dimension == "contract"]
        return row

    kept = contract_row(bodies={DIGEST: BODY_BYTES})
    assert kept.covered and "expired" not in kept.detail
    expired = contract_row(expired_bodies={DIGEST: RECORD})
    assert not expired.covered
    assert "no fixture answers it" in expired.detail and "1 fixture(s) whose body expired" in expired.detail
