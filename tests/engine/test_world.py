"""The simulated world, the logical clock and seeded ids (DESIGN §5, §6; seeds 000 and 001)."""

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from n17q_engine import canonical
from n17q_engine.contracts import Contract
from n17q_engine.fixtures import Fixture, FixtureRegistry, Hit, Miss, Transition, WorldView
from n17q_engine.vocabulary import KINDS
from n17q_engine.world import (
    ClockError,
    IdSource,
    LogicalClock,
    SimulatedWorld,
    WorldError,
    iso,
    namespace_for,
)

T0 = datetime(2026, 6, 10, 14, 0, tzinfo=UTC)
REQ = "request/req-7781"
DRAFT = "draft/notice-1"

STATUS = Contract.from_dict(
    {
        "tool": "status.lookup",
        "revision": 2,
        "effect_class": "read",
        "fields": {"request_id": {"type": "string", "canonical": ["strip", "lower"]}},
        "transport": ["attempt_id"],
        "outcomes": ["ok", "not_found", "unknown"],
    }
)
AUTHORED = {
    "recorded_at": "2026-07-02T10:00:00Z",
    "source_revision": None,
    "connection": None,
    "synthetic": True,
    "fidelity_note": "authored against the simulator; no live status service observed",
}


def create(resource, state, after=1):
    return {
        "resource": resource,
        "revision_before": None,
        "revision_after": after,
        "change": {"op": "create", "state": state},
    }


def update(resource, before, state):
    return {
        "resource": resource,
        "revision_before": before,
        "revision_after": before + 1,
        "change": {"op": "update", "state": state},
    }


def status_registry():
    """Seed 000: not found before the submit commits, the request after it."""

    def fx(fid, outcome, body, condition):
        return Fixture.from_dict(
            {
                "id": fid,
                "tool": "status.lookup",
                "contract_revision": 2,
                "request": STATUS.normalize({"request_id": "req-7781"}),
                "condition": condition,
                "response": {"outcome": outcome, "body": body},
                "provenance": AUTHORED,
            },
            STATUS,
        )

    return FixtureRegistry(
        [
            fx("fx-status-before", "not_found", None, {"resource": REQ, "absent": True}),
            fx("fx-status-after", "ok", {"state": "received"}, [{"resource": REQ, "revision": 1}]),
        ]
    )


# --- ids -----------------------------------------------------------------------------------------------------


def test_it_derives_the_same_ids_from_the_same_seed():
    def run(seed):
        ids = IdSource(seed, "replay:w1")
        return [ids.next("evt"), ids.next("evt"), ids.next("intent"), ids.next("evt")]

    first, again = run("seed-42"), run("seed-42")
    assert first == again
    assert len(set(first)) == 4
    assert first[0].startswith("evt-") and first[2].startswith("intent-")
    assert run("seed-43") != first
    assert IdSource("seed-42", "replay:w2").next("evt") != first[0]
    # Counters are per kind: interleaving another kind does not shift a kind's sequence.
    other = IdSource("seed-42", "replay:w1")
    assert [other.next("evt"), other.next("evt")] == first[:2]


def test_it_refuses_a_malformed_id_kind():
    with pytest.raises(WorldError):
        IdSource("s", "n").next("Bad Kind")
    with pytest.raises(WorldError):
        IdSource("", "n")


def test_it_keeps_replay_keys_apart_from_live_keys_and_linked_to_them():
    ids = IdSource("seed-42", "replay:w1")
    live = "idem-send-notice-7781"
    key = ids.replay_key(live, "w1")
    assert key != live and key.startswith("replay:w1:")
    assert live not in key  # an adapter matching live keys never recognizes it
    assert ids.historical_for(key) == live
    assert ids.is_replay_of(key, live)
    assert not ids.is_replay_of(key, "idem-other")
    assert not ids.is_replay_of(live, live)
    # Deterministic, and another world or another historical key is another identity.
    assert IdSource("seed-42", "x").replay_key(live, "w1") == key
    assert ids.replay_key(live, "w1-child") != key
    assert ids.replay_key("idem-other", "w1") != key
    assert namespace_for("w1") == "replay:w1"
    with pytest.raises(WorldError):
        ids.replay_key(key, "w1")
    with pytest.raises(WorldError):
        ids.replay_key(live, "w:1")


# --- the clock -----------------------------------------------------------------------------------------------


def test_it_advances_the_clock_only_forward_and_records_the_move():
    clock = LogicalClock(T0)
    body = clock.advance(T0 + timedelta(minutes=10), "e-retry-hold")
    assert body == {"from": "2026-06-10T14:00:00Z", "to": "2026-06-10T14:10:00Z", "cause": "e-retry-hold"}
    assert set(body) == set(KINDS["clock.advanced"])
    assert clock.now == T0 + timedelta(minutes=10)
    with pytest.raises(ClockError, match="backwards"):
        clock.advance(T0, "e-x")
    with pytest.raises(ClockError, match="forward"):
        clock.advance(clock.now, "e-x")
    assert clock.now == T0 + timedelta(minutes=10)
    assert clock.advance_by(timedelta(microseconds=5), None)["to"] == "2026-06-10T14:10:00.000005Z"


def test_it_refuses_a_naive_time():
    with pytest.raises(ClockError, match="timezone"):
        LogicalClock(datetime(2026, 6, 10, 14, 0))
    clock = LogicalClock(datetime(2026, 6, 10, 16, 0, tzinfo=timezone(timedelta(hours=2))))
    assert iso(clock.now) == "2026-06-10T14:00:00Z"


# --- the world -----------------------------------------------------------------------------------------------


def test_it_is_a_world_view_and_answers_both_status_lookups_of_seed_000_from_one_world():
    world = SimulatedWorld("w1")
    assert isinstance(world, WorldView)
    reg = status_registry()

    before = world.observe(REQ)
    assert before == {"resource": REQ, "world_revision": 0, "state": None, "resource_revision": None, "absent": True}
    assert set(KINDS["world.observation"]) <= set(before)
    result = reg.resolve(STATUS, {"request_id": "REQ-7781 "}, world)
    assert isinstance(result, Hit) and result.fixture.id == "fx-status-before"

    # The submit commits in the world, then its response is lost: committed but unacknowledged.
    event = world.apply(create(REQ, {"state": "received"}), "e-submit")
    assert event == {**create(REQ, {"state": "received"}), "cause": "e-submit"}
    assert set(KINDS["world.transition"]) == set(event)
    after = world.observe(REQ)
    assert (after["state"], after["resource_revision"], after["absent"], after["world_revision"]) == (
        {"state": "received"},
        1,
        False,
        1,
    )
    result = reg.resolve(STATUS, {"request_id": "req-7781"}, world)
    assert isinstance(result, Hit) and result.fixture.id == "fx-status-after"

    world.apply(update(REQ, 1, {"state": "processing"}), "e-later")
    miss = reg.resolve(STATUS, {"request_id": "req-7781"}, world)
    assert isinstance(miss, Miss)
    assert miss.expected[0]["actual"] == 2 and miss.world_revision == 2


def test_it_keeps_absent_distinct_from_an_empty_state():
    world = SimulatedWorld("w1", resources={"inbox/empty": (3, {})})
    empty, missing = world.observe("inbox/empty"), world.observe("inbox/none")
    assert (empty["state"], empty["absent"]) == ({}, False)
    assert (missing["state"], missing["absent"]) == (None, True)
    with pytest.raises(WorldError, match="null is reserved"):
        world.apply(create("x", None), "e1")


def test_it_applies_a_fixture_transition_object_and_deletes():
    world = SimulatedWorld("w1")
    world.apply(Transition(DRAFT, None, 1, {"op": "create", "state": {"body": "v1"}}), "e1")
    gone = world.apply(
        {"resource": DRAFT, "revision_before": 1, "revision_after": 2, "change": {"op": "delete", "state": None}},
        "e2",
    )
    assert gone["change"] == {"op": "delete", "state": None}
    assert world.get(DRAFT) is None and world.observe(DRAFT)["absent"] is True
    # A revision is never reused: a re-create must go past the revision it was deleted at.
    with pytest.raises(WorldError, match="deleted at revision 2"):
        world.apply(create(DRAFT, {"body": "v2"}, after=2), "e3")
    world.apply(create(DRAFT, {"body": "v2"}, after=3), "e3")
    assert world.get(DRAFT) == (3, {"body": "v2"})


def test_it_refuses_a_revision_mismatch_precisely():
    world = SimulatedWorld("w1", resources={DRAFT: (4, {"body": "v4"})})
    with pytest.raises(WorldError) as info:
        world.apply(update(DRAFT, 3, {"body": "stale"}), "e1")
    assert (info.value.resource, info.value.expected, info.value.actual) == (DRAFT, 3, 4)
    assert "expects revision 3" in str(info.value) and "holds 4" in str(info.value)
    with pytest.raises(WorldError) as info:
        world.apply(create(DRAFT, {"body": "dup"}), "e1")
    assert (info.value.expected, info.value.actual) == ("absent", 4)
    with pytest.raises(WorldError) as info:
        world.apply(update("draft/none", 0, {"body": "x"}), "e1")
    assert (info.value.expected, info.value.actual) == (0, "absent")
    assert world.get(DRAFT) == (4, {"body": "v4"}) and world.revision == 0


def test_it_refuses_a_malformed_change():
    world = SimulatedWorld("w1")
    for change in ({"state": "received"}, {"op": "upsert", "state": {}}, {"op": "create", "state": {1, 2}}):
        with pytest.raises(WorldError):
            world.apply({"resource": REQ, "revision_before": None, "revision_after": 1, "change": change}, "e1")
    with pytest.raises(WorldError, match="does not follow"):
        world.apply(
            {"resource": REQ, "revision_before": 2, "revision_after": 2, "change": {"op": "update", "state": {}}}, "e1"
        )


def test_it_makes_an_accepted_update_visible_only_after_the_visibility_delay():
    delay = timedelta(seconds=30)
    clock = LogicalClock(T0)
    world = SimulatedWorld("w1", resources={DRAFT: (1, {"body": "v1"})})
    # The provider accepts the edit at t; readers see it from t + delay.
    world.schedule(clock.now + delay, update(DRAFT, 1, {"body": "v2"}), "e-accept")

    clock.advance(T0 + timedelta(seconds=1), None)
    assert world.due(clock.now) == []
    assert world.observe(DRAFT)["state"] == {"body": "v1"}

    clock.advance(T0 + delay, "e-wait")
    events = world.due(clock.now)
    assert events == [{**update(DRAFT, 1, {"body": "v2"}), "cause": "e-accept"}]
    assert world.observe(DRAFT)["state"] == {"body": "v2"}
    assert world.pending() == [] and world.due(clock.now) == []


def test_it_applies_due_transitions_in_time_then_insertion_order_all_or_nothing():
    world = SimulatedWorld("w1")
    world.schedule(T0 + timedelta(seconds=20), update("a", 1, {"n": 2}), "e3")
    world.schedule(T0 + timedelta(seconds=10), create("a", {"n": 1}), "e1")
    world.schedule(T0 + timedelta(seconds=10), create("b", {"n": 1}), "e2")
    causes = [e["cause"] for e in world.due(T0 + timedelta(minutes=1))]
    assert causes == ["e1", "e2", "e3"]

    world.schedule(T0 + timedelta(minutes=2), update("b", 1, {"n": 2}), "ok")
    world.schedule(T0 + timedelta(minutes=3), update("a", 1, {"n": 9}), "stale")  # "a" is at 2 by now
    before = world.snapshot()
    with pytest.raises(WorldError, match="scheduled at 2026-06-10T14:03:00Z") as info:
        world.due(T0 + timedelta(minutes=5))
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert world.snapshot() == before


def test_it_isolates_a_child_world_from_its_parent():
    parent = SimulatedWorld("w1", resources={DRAFT: (1, {"body": "v1", "tags": ["a"]})})
    parent.schedule(T0, create(REQ, {"state": "received"}), "e-later")
    child = parent.child("w1-cf1")
    assert (child.name, child.parent, child.get(DRAFT)) == ("w1-cf1", "w1", parent.get(DRAFT))

    child.apply(update(DRAFT, 1, {"body": "changed"}), "e-cf")
    child.due(T0)
    assert parent.get(DRAFT) == (1, {"body": "v1", "tags": ["a"]})
    assert parent.observe(REQ)["absent"] is True and len(parent.pending()) == 1
    assert parent.revision == 0 and child.revision == 2

    # States handed out are copies: mutating one changes neither world.
    held = parent.get(DRAFT)
    assert held is not None
    _rev, state = held
    state["tags"].append("b")
    assert parent.get(DRAFT) == (1, {"body": "v1", "tags": ["a"]})
    with pytest.raises(WorldError):
        parent.child("w1")


def test_it_round_trips_a_snapshot_to_byte_identical_canonical_json():
    world = SimulatedWorld("w1", revision=7, resources={DRAFT: (1, {"body": "v1", "n": 1.5, "ü": None})})
    world.apply(create(REQ, {"state": "received"}), "e1")
    world.apply(
        {"resource": DRAFT, "revision_before": 1, "revision_after": 2, "change": {"op": "delete", "state": None}}, "e2"
    )
    world.schedule(T0 + timedelta(microseconds=250), create("c", {"x": []}), None)
    snap = world.snapshot()
    text = canonical.canonical_json(snap)
    restored = SimulatedWorld.from_snapshot(json.loads(text))
    assert canonical.canonical_json(restored.snapshot()) == text
    assert restored.digest() == world.digest() == canonical.digest_json(snap)
    assert restored.revision == 9 and restored.get(REQ) == (1, {"state": "received"})
    # The deletion floor survived: revision 2 of the draft cannot come back.
    with pytest.raises(WorldError, match="deleted at revision 2"):
        restored.apply(create(DRAFT, {"body": "again"}, after=2), "e3")
    assert restored.due(T0 + timedelta(seconds=1))[0]["resource"] == "c"
    with pytest.raises(WorldError):
        SimulatedWorld.from_snapshot({**snap, "format": "other"})
