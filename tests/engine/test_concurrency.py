"""Concurrency as recorded behaviour (seed 000 "Concurrency was recorded as behavior", seed 001's second delivery):
a scenario-declared race, followed step by step, decided by effect identity, recorded, deterministic, checked."""

from __future__ import annotations

import copy
import json

import pytest

from n17q_demo import seed_scenarios
from n17q_engine.bundle import validate_event
from n17q_engine.canonical import canonical_json
from n17q_engine.lineage import check_events
from n17q_engine.package import SCENARIO_FILES, Package, PackageError, build_scenario
from n17q_engine.replay import ReplayError
from tests.engine import replaylib as rl
from tests.engine.fresh import run_fresh
from tests.engine.test_replay import BUNDLES, final, kinds, replay

RACE = next(p for p in seed_scenarios.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery-race")
EMAIL = next(p for p in seed_scenarios.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery")


def files_of(package: Package) -> dict:
    return {name: json.loads(package.files[name]) for name in SCENARIO_FILES}


def race_scenario(*, drop_fixture: str | None = None, **race) -> Package:
    """The demo's race scenario with its one race changed by `race` (e.g. effect_identity=...)."""
    files = files_of(RACE)
    files["scenario.json"]["concurrency"][0].update(race)
    if drop_fixture is not None:
        files["fixtures.json"] = [f for f in files["fixtures.json"] if f["id"] != drop_fixture]
    return build_scenario(files)


def rerun(scenario: Package, vary: dict | None = None, mode: str = "rerun"):
    b = BUNDLES["run-001-recorded"]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    return replay(rl.replay_package(scenario, b.manifest, events, blobs=b.blobs, mode=mode, vary=vary))


def steps(log: list[dict]) -> list[tuple[int, str, str]]:
    return [(e["index"], e["step"], e["delivery"]) for e in kinds(log, "schedule.step")]


def ledger(log: list[dict]) -> list[dict]:
    return [t for t in kinds(log, "world.transition") if t["resource"].startswith("effect:email.send:")]


def deliveries(log: list[dict]) -> list[int]:
    return [t["revision_after"] for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]


def errors(out, log) -> list[str]:
    return sorted({f.code for f in check_events(out.manifest["run"], log) if f.severity == "error"})


# --- effect identity decides --------------------------------------------------------------------------------------


def test_a_second_delivery_keyed_on_its_own_identity_is_a_second_email_every_time():
    out, log = rerun(RACE)

    assert len(ledger(log)) == 2, "two effect identities, two resources in the provider's ledger"
    assert deliveries(log) == [42, 43], "the mailbox received the draft twice"
    first, second = sorted(kinds(log, "effect.execution"), key=lambda e: e["attempt_no"])
    assert (first["delivery"], first["outcome"], first["fixture"]) == ("first", "acknowledged", "send-again")
    assert (second["delivery"], second["outcome"], second["fixture"]) == ("second", "acknowledged", "send")
    assert first["effect_identity"] != second["effect_identity"]
    assert first["idempotency_key"] == second["idempotency_key"], "one intent, one key; the provider ignored it"
    state = final(log)
    assert state["state"] == "failed"
    assert "one-delivery: 2 transitions on mailbox:*" in state["reason"]
    assert "LIN012" in errors(out, log), "the duplicate consequence is a lineage finding on the replay"


def test_the_same_schedule_keyed_on_the_idempotency_key_leaves_one_resource_and_one_email():
    out, log = rerun(race_scenario(effect_identity="idempotency_key"))

    assert len(ledger(log)) == 1
    assert deliveries(log) == [42]
    by_delivery = {e["delivery"]: e for e in kinds(log, "effect.execution")}
    assert by_delivery["first"]["outcome"] == "acknowledged" and by_delivery["first"]["fixture"] == "send"
    assert by_delivery["second"]["outcome"] == "rejected"
    assert by_delivery["second"]["effect_identity"] in by_delivery["second"]["reason"]
    assert final(log)["state"] == "completed"
    assert all(i["held"] for i in final(log)["invariants"])
    assert errors(out, log) == []


# --- the schedule is evidence ----------------------------------------------------------------------------------------


def test_the_schedule_followed_is_recorded_step_by_step_in_the_order_it_happened():
    _out, log = rerun(RACE)

    assert steps(log) == [
        (0, "run", "first"),
        (0, "accept", "first"),
        (0, "hold", "first"),
        (1, "run", "second"),
        (1, "accept", "second"),
        (1, "commit", "second"),
        (2, "release", "first"),
        (2, "commit", "first"),
    ]
    recorded = kinds(log, "schedule.step")
    assert {e["race"] for e in recorded} == {"second-delivery"}
    hold = next(e for e in recorded if e["step"] == "hold")
    assert hold["barrier"] == "after_acceptance"
    # The second delivery's commit met the world the held first one had not changed yet: mailbox at 41.
    commit_second = next(e for e in recorded if e["step"] == "commit" and e["delivery"] == "second")
    transition = next(t for t in kinds(log, "world.transition") if t["cause"] == commit_second["id"])
    assert (transition["revision_before"], transition["revision_after"]) == (41, 42)
    for line, event in enumerate(recorded, start=1):
        validate_event(event, line=line)


def test_a_barrier_after_the_world_mutation_commits_first_and_acknowledges_last():
    scenario = race_scenario(
        deliveries=[{"name": "first", "barrier": "after_world_mutation"}, {"name": "second"}],
    )
    _out, log = rerun(scenario)

    assert [s for s in steps(log) if s[1] != "run"] == [
        (0, "accept", "first"),
        (0, "commit", "first"),
        (0, "hold", "first"),
        (1, "accept", "second"),
        (1, "commit", "second"),
        (2, "release", "first"),
    ]
    assert deliveries(log) == [42, 43]
    executions = kinds(log, "effect.execution")
    assert [(e["delivery"], e["fixture"]) for e in executions] == [("second", "send-again"), ("first", "send")]


def test_a_release_of_a_delivery_that_ended_before_its_barrier_is_recorded_as_skipped():
    scenario = race_scenario(
        effect_identity="idempotency_key",
        deliveries=[{"name": "first"}, {"name": "second", "barrier": "after_acceptance"}],
        schedule=[{"run": "first"}, {"run": "second"}, {"release": "second"}],
    )
    _out, log = rerun(scenario)

    assert steps(log)[-3:] == [(1, "run", "second"), (1, "deduplicate", "second"), (2, "skip", "second")]
    skip = kinds(log, "schedule.step")[-1]
    assert "ended at acceptance" in skip["reason"]
    assert deliveries(log) == [42]


def test_a_second_commit_the_fixtures_cannot_answer_stops_as_an_incomplete_test_world_naming_the_race():
    _out, log = rerun(race_scenario(drop_fixture="send-again"))

    (missing,) = kinds(log, "fixture.missing")
    assert (missing["tool"], missing["race"], missing["delivery"]) == ("email.send", "second-delivery", "first")
    assert "expects mailbox:beta-customers@lists.acme.example at 41, the world has 42" in missing["reason"]
    assert final(log)["state"] == "incomplete_test_world"
    assert deliveries(log) == [42], "the world keeps what happened before the stop"


def test_the_decider_around_the_race_may_vary_and_the_schedule_followed_does_not():
    # Seed 000: replay records the schedule as scenario evidence while allowing model turns around it to vary.
    scenario = race_scenario(effect_identity="idempotency_key")
    out, careful = rerun(scenario, mode="counterfactual", vary={"decider": "careful"})
    _out, recorded = rerun(scenario)
    assert steps(careful) == steps(recorded)
    assert deliveries(careful) == [42]
    assert errors(out, careful) == []


def test_a_race_on_the_email_world_without_one_replays_as_before():
    _out, log = rerun(EMAIL)
    assert kinds(log, "schedule.step") == [] and ledger(log) == []
    assert deliveries(log) == [42]


# --- deterministic ----------------------------------------------------------------------------------------------------

RACE_REPLAY_DIGEST = """
from n17q_demo import seed_scenarios, stories
from n17q_engine.canonical import canonical_json, digest_bytes
from tests.engine import replaylib as rl
from tests.engine.test_replay import replay
race = next(p for p in seed_scenarios.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery-race")
b = next(x for x in stories.demo_bundles() if x.manifest["run"]["id"] == "run-001-recorded")
events = b"".join(canonical_json(e) + b"\\n" for e in b.events)
print(digest_bytes(replay(rl.replay_package(race, b.manifest, events, blobs=b.blobs))[0].to_wire()))
"""


def test_the_same_race_replayed_twice_and_in_two_processes_gives_byte_identical_logs():
    first, _ = rerun(RACE)
    second, _ = rerun(RACE)
    assert first.to_wire() == second.to_wire()
    assert run_fresh(RACE_REPLAY_DIGEST, hash_seed=1) == run_fresh(RACE_REPLAY_DIGEST, hash_seed=2)


# --- bad declarations -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tool": "email.teleport"}, "concurrency[0].tool: no contract for 'email.teleport'"),
        ({"tool": "email.draft_get"}, "email.draft_get is a read"),
        ({"tool": "email.draft_update"}, "no effect route of this scenario executes through email.draft_update"),
        ({"effect_identity": "request"}, "effect_identity: one of idempotency_key, delivery, not 'request'"),
        ({"text": " "}, "concurrency[0].text"),
        ({"id": "a race"}, "concurrency[0].id: must be a race id"),
        ({"deliveries": [{"name": "first"}]}, "a race has 2 to 8 deliveries"),
        (
            {"deliveries": [{"name": "first", "barrier": "before_send"}, {"name": "second"}]},
            "deliveries[0].barrier: one of after_acceptance, after_world_mutation, not 'before_send'",
        ),
        ({"deliveries": [{"name": "first"}, {"name": "first"}]}, "deliveries[1].name: 'first' is declared twice"),
        ({"schedule": [{"run": "first"}, {"run": "first"}]}, "schedule[1].run: 'first' already ran"),
        ({"schedule": [{"release": "first"}]}, "schedule[0].release: 'first' is released before it ran"),
        ({"schedule": [{"run": "first"}, {"run": "third"}]}, "schedule[1].run: 'third' is not a delivery"),
        ({"schedule": [{"run": "first"}, {"run": "second"}]}, "'first' is held at after_acceptance and never released"),
        ({"schedule": [{"run": "second"}, {"release": "first"}]}, "'first' is released before it ran"),
        (
            {"schedule": [{"run": "first"}, {"run": "second"}, {"release": "first"}, {"release": "second"}]},
            "schedule[3].release: 'second' has no barrier",
        ),
        ({"schedule": [{"run": "first"}, {"release": "first"}]}, "delivery 'second' never runs"),
        ({"schedule": [{"wait": "first"}]}, 'a step is {"run": name}, {"release": name} or {"read": name}'),
        ({"colour": "red"}, "concurrency[0]: unknown key 'colour'"),
    ],
)
def test_a_bad_race_declaration_is_refused_with_one_line_naming_the_field(change, message):
    with pytest.raises(PackageError) as refused:
        race_scenario(**change)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_barrier_at_a_stage_the_contract_does_not_model_is_refused():
    files = files_of(RACE)
    send = next(c for c in files["contracts.json"] if c["tool"] == "email.send")
    send["fault_stages"] = ["before_send"]
    with pytest.raises(PackageError, match=r"email\.send's contract does not model the stage after_acceptance"):
        build_scenario(files)


def test_a_race_on_a_tool_with_a_declared_fault_is_refused_and_so_is_a_counterfactual_fault_on_it():
    files = files_of(RACE)
    files["scenario.json"]["faults"] = [{"tool": "email.send", "stage": "after_acceptance"}]
    with pytest.raises(PackageError, match="also has a declared fault"):
        build_scenario(files)
    with pytest.raises(ReplayError, match="races in 'second-delivery'"):
        rerun(RACE, mode="counterfactual", vary={"fault": "email.send:before_send"})


def test_two_races_on_one_tool_are_refused():
    files = files_of(RACE)
    race = files["scenario.json"]["concurrency"][0]
    files["scenario.json"]["concurrency"].append({**copy.deepcopy(race), "id": "third-delivery"})
    with pytest.raises(PackageError, match=r"email\.send already races in 'second-delivery'"):
        build_scenario(files)


# --- reads between deliveries: stale reads and read races ----------------------------------------------------------

STATUS_READS = [
    {"name": "while-held", "tool": "email.delivery_status", "args": {"draft_id": "dr-5501"}},
    {"name": "after-release", "tool": "email.delivery_status", "args": {"draft_id": "dr-5501"}},
]


def read_steps(log: list[dict]) -> dict[str, dict]:
    return {e["delivery"]: e for e in kinds(log, "schedule.step") if e["step"] == "read"}


@pytest.mark.seed("000", "Concurrency was recorded as behavior")
def test_a_read_while_a_delivery_is_held_after_acceptance_observes_the_old_revision_and_is_recorded_stale():
    # Fixtures pause the send after the provider accepted it, take a status read, then release it and read again.
    scenario = race_scenario(
        effect_identity="idempotency_key",
        reads=STATUS_READS,
        schedule=[
            {"run": "first"},
            {"read": "while-held"},
            {"release": "first"},
            {"read": "after-release"},
            {"run": "second"},
        ],
    )
    out, log = rerun(scenario)

    assert steps(log) == [
        (0, "run", "first"),
        (0, "accept", "first"),
        (0, "hold", "first"),
        (1, "read", "while-held"),
        (2, "release", "first"),
        (2, "commit", "first"),
        (3, "read", "after-release"),
        (4, "run", "second"),
        (4, "deduplicate", "second"),
    ]
    reads = read_steps(log)
    held, after = reads["while-held"], reads["after-release"]
    # The stale read: the provider holds the effect, the world the read sees is the one before it.
    assert (held["fixture"], held["outcome"], held["stale"], held["pending"]) == (
        "status-before",
        "not_found",
        True,
        ["first"],
    )
    assert held["observed"] == {"mailbox:beta-customers@lists.acme.example": 41}
    assert "first accepted by the provider and not committed" in held["reason"]
    # The read race: the same request, two steps apart, sees two revisions of the mailbox.
    assert (after["fixture"], after["outcome"], after["stale"]) == ("status-after", "ok", False)
    assert after["observed"] == {"mailbox:beta-customers@lists.acme.example": 42}
    assert held["observed"] != after["observed"]
    # The schedule with its reads is scenario evidence, and the evaluator still checks the final world.
    for line, event in enumerate(kinds(log, "schedule.step"), start=1):
        validate_event(event, line=line)
    state = final(log)
    assert state["state"] == "completed"
    assert {i["id"]: i["held"] for i in state["invariants"]}["one-delivery"] is True
    assert deliveries(log) == [42]
    assert errors(out, log) == []


@pytest.mark.seed("000", "Concurrency was recorded as behavior")
def test_a_read_race_against_two_committed_deliveries_the_fixtures_cannot_answer_stops_naming_the_read():
    # With the narrow identity both deliveries commit (mailbox 43); no status fixture answers that world, so the
    # read after them is an honest miss naming the race and the read, never the nearest recorded status.
    scenario = race_scenario(
        reads=STATUS_READS,
        schedule=[
            {"run": "first"},
            {"read": "while-held"},
            {"run": "second"},
            {"release": "first"},
            {"read": "after-release"},
        ],
    )
    _out, log = rerun(scenario)

    assert read_steps(log)["while-held"]["stale"] is True
    (missing,) = kinds(log, "fixture.missing")
    assert (missing["tool"], missing["race"], missing["read"]) == (
        "email.delivery_status",
        "second-delivery",
        "after-release",
    )
    assert final(log)["state"] == "incomplete_test_world"
    assert deliveries(log) == [42, 43]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"reads": [{"name": "r", "tool": "email.send", "args": {"draft_id": "d"}}]},
            "reads[0].tool: email.send is a mutation",
        ),
        (
            {"reads": [{"name": "first", "tool": "email.delivery_status", "args": {"draft_id": "d"}}]},
            "'first' is already",
        ),
        (
            {"reads": [{"name": "r", "tool": "email.delivery_status", "args": {"colour": "red"}}]},
            "reads[0].args: does not fit",
        ),
        ({"reads": STATUS_READS[:1]}, "read 'while-held' is never taken"),
        (
            {"reads": STATUS_READS[:1], "schedule": [{"run": "first"}, {"read": "nope"}]},
            "schedule[1].read: 'nope' is not a read",
        ),
    ],
)
def test_a_bad_read_in_a_race_is_refused_with_one_line_naming_the_field(change, message):
    with pytest.raises(PackageError) as refused:
        race_scenario(**change)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
