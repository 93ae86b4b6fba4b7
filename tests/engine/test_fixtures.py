"""The fixture registry fails closed (DESIGN §5, seed 000): exact keys, world-aware, never a fallback."""

import copy

import pytest

from n17q_engine.contracts import Contract, ContractError
from n17q_engine.fixtures import (
    Ambiguous,
    ContractMismatch,
    DictWorld,
    Fixture,
    FixtureError,
    FixtureRegistry,
    Hit,
    Miss,
    WorldView,
)
from n17q_engine.vocabulary import KINDS

STATUS_DIGEST = "sha256:d0064125feea2092a54902591291a20cea6ad348d0db31dc7e270a343928c49e"
DOCS_DIGEST = "sha256:c8a59f66638044b7a1a03bf901f0e67f47dd1944f908b062da8ade79e000ec70"
REQ = "request/req-7781"


def contract(tool, revision, fields, effect_class="read", **over):
    return Contract.from_dict(
        {
            "tool": tool,
            "revision": revision,
            "effect_class": effect_class,
            "fields": fields,
            "transport": ["attempt_id", "trace_id"],
            "outcomes": ["ok", "not_found", "empty", "denied", "deleted", "error", "timeout", "unknown"],
            **over,
        }
    )


DOCS_FIELDS = {
    "query": {"type": "string", "canonical": ["strip"]},
    "corpus": {"type": "string", "default": "public-docs"},
    "limit": {"type": "integer", "default": 5},
}
DOCS = contract("docs.search", 1, DOCS_FIELDS, fault_stages=["during_response"])
DOCS_2 = contract("docs.search", 2, {**DOCS_FIELDS, "limit": {"type": "integer", "default": 10}})
STATUS = contract("status.lookup", 2, {"request_id": {"type": "string", "canonical": ["strip", "lower"]}})
STATUS_1 = contract("status.lookup", 1, {"request_id": {"type": "string"}})
SUBMIT = contract(
    "request.submit",
    1,
    {"request_id": {"type": "string"}, "body": {"type": "string"}},
    effect_class="mutation",
    fault_stages=["after_acceptance", "after_world_mutation", "during_response"],
)
CONTRACTS = [DOCS, DOCS_2, STATUS, STATUS_1, SUBMIT]

RECORDED = {
    "recorded_at": "2026-07-01T09:00:03Z",
    "source_revision": "docs@4411",
    "connection": "docs-prod",
    "synthetic": False,
    "fidelity_note": None,
}
AUTHORED = {
    "recorded_at": "2026-07-02T10:00:00Z",
    "source_revision": None,
    "connection": None,
    "synthetic": True,
    "fidelity_note": "authored against the simulator; no live status service observed",
}


def fx(fid, c, args, outcome="ok", body=None, **over):
    data = {
        "id": fid,
        "tool": c.tool,
        "contract_revision": c.revision,
        "request": c.normalize(args),
        "response": {"outcome": outcome, "body": body},
        "provenance": RECORDED,
        **over,
    }
    return data


def docs_fixture(**over):
    return fx("fx-docs", DOCS, {"query": "rotate signing keys"}, body={"hits": ["kb/rotate"]}, **over)


def registry(*items):
    return FixtureRegistry.from_dicts(items, CONTRACTS)


WORLD = DictWorld(revision=3)


def status_fixtures():
    """Seed 000 authored: not found before the submit commits, the request after it."""
    before = fx(
        "fx-status-before",
        STATUS,
        {"request_id": "req-7781"},
        "not_found",
        body={"consistency_window_s": 0},
        condition={"resource": REQ, "absent": True},
        provenance=AUTHORED,
    )
    after = fx(
        "fx-status-after",
        STATUS,
        {"request_id": "req-7781"},
        body={"state": "received"},
        condition=[{"resource": REQ, "revision": 1}],
        provenance=AUTHORED,
    )
    submit = fx(
        "fx-submit-lost",
        SUBMIT,
        {"request_id": "req-7781", "body": "rotate"},
        "unknown",
        fault_stage="after_world_mutation",
        provenance=AUTHORED,
        condition={"resource": REQ, "absent": True},
        transition={"resource": REQ, "revision_before": None, "revision_after": 1, "change": {"state": "received"}},
    )
    return before, after, submit


# --- seed 000: the unrecorded status lookup ------------------------------------------------------------------


def test_it_reports_the_unrecorded_status_lookup_of_seed_000():
    reg = registry(docs_fixture())
    hit = reg.resolve(DOCS, {"query": "rotate signing keys", "attempt_id": "a1"}, WORLD)
    assert isinstance(hit, Hit) and hit.fixture.id == "fx-docs"
    assert hit.fixture.request_digest == DOCS_DIGEST

    miss = reg.resolve(STATUS, {"request_id": "req-7781"}, WORLD)
    assert isinstance(miss, Miss)
    assert (miss.kind, miss.tool, miss.contract_revision, miss.request_digest, miss.world_revision) == (
        "fixture.missing",
        "status.lookup",
        2,
        STATUS_DIGEST,
        3,
    )
    assert "status.lookup" in miss.reason
    record = miss.record(scenario={"name": "lost-response", "version": 1}, checkpoint_id="e-ckpt1")
    assert record == {
        "kind": "fixture.missing",
        "scenario": {"name": "lost-response", "version": 1},
        "tool": "status.lookup",
        "contract_revision": 2,
        "request_digest": STATUS_DIGEST,
        "world_revision": 3,
        "checkpoint_id": "e-ckpt1",
        "reason": miss.reason,
    }
    assert {k for k, spec in KINDS["fixture.missing"].items() if spec.required} <= set(record)


def test_it_never_returns_a_nearby_fixture():
    reg = registry(docs_fixture())
    # Same tool, one argument different: not "the closest recording".
    miss = reg.resolve(DOCS, {"query": "rotate signing key"}, WORLD)
    assert isinstance(miss, Miss)
    assert miss.reason.startswith("unrecorded request")


# --- the fail-closed suite --------------------------------------------------------------------------------


def test_it_misses_an_unknown_tool():
    reg = registry(docs_fixture())
    miss = reg.lookup("web.fetch", 1, DOCS_DIGEST, WORLD)
    assert isinstance(miss, Miss)
    assert miss.reason.startswith("unknown tool")
    assert miss.tool == "web.fetch"


def test_it_misses_an_unseen_argument():
    reg = registry(docs_fixture())
    assert isinstance(reg.resolve(DOCS, {"query": "rotate signing keys", "limit": 6}, WORLD), Miss)
    assert isinstance(reg.resolve(DOCS, {"query": "rotate signing keys", "corpus": "internal"}, WORLD), Miss)


def test_it_refuses_an_unknown_field_before_any_lookup():
    reg = registry(docs_fixture())
    with pytest.raises(ContractError) as info:
        reg.resolve(DOCS, {"query": "rotate signing keys", "date_range": "30d"}, WORLD)
    assert info.value.field == "date_range"


def test_it_does_not_match_the_old_fixture_when_a_default_changed():
    reg = registry(docs_fixture())
    # Under revision 2 the omitted limit resolves to 10: another digest, another revision, no match.
    normalized, digest = DOCS_2.digest({"query": "rotate signing keys"})
    assert normalized["limit"] == 10 and digest != DOCS_DIGEST
    result = reg.lookup("docs.search", 2, digest, WORLD)
    assert isinstance(result, Miss)
    assert "no fixture for docs.search revision 2 at all" in result.reason
    assert "revision 1" in result.reason


def test_it_refuses_a_fixture_recorded_before_its_contracts_default_changed():
    # A fixture whose request lacks a field the contract now defaults is not normalized: refused at load.
    data = docs_fixture(contract_revision=2, request={"query": "rotate signing keys", "corpus": "public-docs"})
    with pytest.raises(FixtureError) as info:
        registry(data)
    assert info.value.field == "request"


def test_it_reports_a_contract_revision_mismatch_and_never_matches_it():
    old = fx("fx-status-v1", STATUS_1, {"request_id": "req-7781"}, body={"state": "received"})
    reg = registry(old)
    result = reg.resolve(STATUS, {"request_id": "req-7781"}, WORLD)
    assert isinstance(result, ContractMismatch)
    assert result.recorded_revisions == (1,)
    assert (result.contract_revision, result.request_digest) == (2, STATUS_DIGEST)
    assert "revision 1, not 2" in result.reason
    record = result.record()
    assert record["kind"] == "fixture.missing" and record["recorded_revisions"] == [1]
    # Under its own revision the old fixture still answers.
    assert isinstance(reg.resolve(STATUS_1, {"request_id": "req-7781"}, WORLD), Hit)


def test_it_reports_an_ambiguous_match_with_every_candidate():
    a = docs_fixture()
    b = docs_fixture(id="fx-docs-again", response={"outcome": "empty", "body": {"hits": []}})
    reg = registry(a, b)
    assert len(reg) == 2
    result = reg.resolve(DOCS, {"query": "rotate signing keys"}, WORLD)
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("fx-docs", "fx-docs-again")
    record = result.record(checkpoint_id="c1")
    assert record["kind"] == "fixture.ambiguous" and record["candidates"] == ["fx-docs", "fx-docs-again"]
    assert set(KINDS["fixture.ambiguous"]) <= set(record)


def test_it_reports_ambiguity_between_a_conditional_and_an_unconditional_fixture():
    before, _after, _submit = status_fixtures()
    anywhere = fx("fx-status-any", STATUS, {"request_id": "req-7781"}, "not_found")
    result = registry(before, anywhere).resolve(STATUS, {"request_id": "req-7781"}, WORLD)
    assert isinstance(result, Ambiguous)
    assert result.candidates == ("fx-status-any", "fx-status-before")


def test_it_refuses_two_fixtures_with_one_id():
    with pytest.raises(FixtureError):
        registry(docs_fixture(), docs_fixture())


def test_it_selects_by_world_state_before_and_after_an_unacknowledged_effect():
    before, after, submit = status_fixtures()
    reg = registry(before, after, submit)
    world = DictWorld(revision=3)

    first = reg.resolve(STATUS, {"request_id": "req-7781"}, world)
    assert isinstance(first, Hit) and first.fixture.id == "fx-status-before"
    assert first.fixture.response.outcome == "not_found"

    effect = reg.resolve(SUBMIT, {"request_id": "req-7781", "body": "rotate"}, world)
    assert isinstance(effect, Hit)
    assert effect.fixture.fault_stage == "after_world_mutation"  # committed, response lost
    assert effect.fixture.response.outcome == "unknown"
    assert effect.fixture.transition is not None
    world = world.applied(effect.fixture.transition)
    assert world.revision == 4 and world.get(REQ) == (1, {"state": "received"})

    second = reg.resolve(STATUS, {"request_id": "req-7781", "attempt_id": "a2"}, world)
    assert isinstance(second, Hit) and second.fixture.id == "fx-status-after"
    assert second.fixture.response.body == {"state": "received"}

    # The effect fixture does not answer a second submit: the world is past its condition.
    again = reg.resolve(SUBMIT, {"request_id": "req-7781", "body": "rotate"}, world)
    assert isinstance(again, Miss)


def test_it_names_expected_and_actual_revisions_on_a_world_mismatch():
    before, after, _submit = status_fixtures()
    world = DictWorld(revision=9, resources={REQ: (4, {"state": "closed"})})
    miss = registry(before, after).resolve(STATUS, {"request_id": "req-7781"}, world)
    assert isinstance(miss, Miss)
    assert miss.world_revision == 9
    assert miss.reason.startswith("world state")
    assert list(miss.expected) == [
        {"fixture": "fx-status-before", "resource": REQ, "expected": "absent", "actual": 4},
        {"fixture": "fx-status-after", "resource": REQ, "expected": 1, "actual": 4},
    ]
    assert miss.record()["expected"][1]["actual"] == 4


def test_it_matches_a_resource_at_an_exact_revision():
    f = fx(
        "fx-rev4",
        STATUS,
        {"request_id": "req-7781"},
        body={"state": "approved"},
        condition={"resource": REQ, "revision": 4},
    )
    reg = registry(f)
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, DictWorld(5, {REQ: (4, {})})), Hit)
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, DictWorld(6, {REQ: (5, {})})), Miss)
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, DictWorld(1)), Miss)


@pytest.mark.parametrize("outcome", ["not_found", "empty", "denied", "deleted"])
def test_it_returns_negative_outcomes_as_real_observations(outcome):
    f = fx(f"fx-{outcome}", STATUS, {"request_id": "req-7781"}, outcome, body={"scope": "status@rev2"})
    reg = registry(f)
    result = reg.resolve(STATUS, {"request_id": " REQ-7781"}, WORLD)
    assert isinstance(result, Hit)
    assert result.fixture.response.outcome == outcome
    assert result.fixture.response.body == {"scope": "status@rev2"}
    # ... and distinct from a request the scenario does not define.
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7782"}, WORLD), Miss)


def test_it_keeps_absence_kinds_distinct():
    absent = {"owner": "absent", "email": "redacted", "sla": "unavailable", "parent": "not_applicable"}
    f = fx(
        "fx-partial",
        STATUS,
        {"request_id": "req-7781"},
        body={"state": "received"},
        response={"outcome": "ok", "body": {"state": "received"}, "absent": absent},
    )
    hit = registry(f).resolve(STATUS, {"request_id": "req-7781"}, WORLD)
    assert isinstance(hit, Hit)
    assert dict(hit.fixture.response.absent) == absent
    assert "email" not in hit.fixture.response.body  # omission is not filled in


@pytest.mark.parametrize("kind", ["missing", "", None, "null"])
def test_it_refuses_an_unknown_absence_kind(kind):
    f = fx("fx-bad", STATUS, {"request_id": "req-7781"}, response={"outcome": "ok", "absent": {"email": kind}})
    with pytest.raises(FixtureError) as info:
        registry(f)
    assert info.value.field == "response.absent.email"


# --- fixture construction -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"fault_stage": "before_receipt"}, "fault_stage"),  # not supported by docs.search revision 1
        ({"fault_stage": "completed"}, "fault_stage"),
        ({"response": {"outcome": "success"}}, "response.outcome"),
        ({"response": {"outcome": "ok", "body": {"x": float("inf")}}}, "response.body.x"),
        ({"response": {"outcome": "ok", "headers": {}}}, "response.headers"),
        ({"request": {"query": "rotate signing keys "}}, "request"),  # not canonical
        ({"request": {"query": "k", "corpus": "public-docs", "limit": 5, "attempt_id": "a1"}}, "request"),
        ({"request": {"query": "k", "corpus": "public-docs", "limit": 5, "extra": 1}}, "request.extra"),
        ({"request_digest": STATUS_DIGEST}, "request_digest"),
        ({"transition": {"resource": REQ, "revision_before": None, "revision_after": 1}}, "transition"),  # a read
        ({"condition": {"resource": REQ}}, "condition[0]"),
        ({"condition": [{"resource": REQ, "revision": 1}, {"resource": REQ, "absent": True}]}, "condition[1].resource"),
        ({"condition": {"resource": REQ, "absent": False}}, "condition[0].absent"),
        ({"provenance": {**RECORDED, "synthetic": True, "fidelity_note": ""}}, "provenance.fidelity_note"),
        ({"provenance": {**RECORDED, "synthetic": "no"}}, "provenance.synthetic"),
        ({"provenance": {k: v for k, v in RECORDED.items() if k != "recorded_at"}}, "provenance.recorded_at"),
        ({"served_from": "cache"}, "served_from"),
    ],
)
def test_it_refuses_a_fixture_that_breaks_its_contract_naming_the_field(over, field):
    with pytest.raises(FixtureError) as info:
        registry(docs_fixture(**over))
    assert info.value.field == field
    assert "fx-docs" in str(info.value)


def test_it_refuses_an_outcome_the_contract_does_not_report():
    narrow = contract("docs.search", 3, DOCS_FIELDS, outcomes=["ok", "empty"])
    data = fx("fx-narrow", narrow, {"query": "k"}, "denied")
    with pytest.raises(FixtureError) as info:
        FixtureRegistry.from_dicts([data], [narrow])
    assert info.value.field == "response.outcome"


def test_it_refuses_a_fixture_without_its_contract():
    with pytest.raises(FixtureError) as info:
        FixtureRegistry.from_dicts([docs_fixture(contract_revision=7)], CONTRACTS)
    assert info.value.field == "contract_revision"


def test_it_refuses_a_transition_that_contradicts_its_condition():
    _before, _after, submit = status_fixtures()
    bad = copy.deepcopy(submit)
    bad["condition"] = {"resource": REQ, "revision": 2}
    with pytest.raises(FixtureError) as info:
        registry(bad)
    assert info.value.field == "transition.revision_before"


def test_it_round_trips_a_fixture_through_a_plain_dict():
    _before, _after, submit = status_fixtures()
    loaded = Fixture.from_dict(submit, SUBMIT)
    again = Fixture.from_dict(loaded.to_dict(), SUBMIT)
    assert again == loaded
    assert again.to_dict()["provenance"]["synthetic"] is True


def test_it_copies_what_it_loads():
    data = docs_fixture()
    reg = registry(data)
    data["response"]["body"]["hits"].append("kb/other")
    hit = reg.resolve(DOCS, {"query": "rotate signing keys"}, WORLD)
    assert isinstance(hit, Hit) and hit.fixture.response.body == {"hits": ["kb/rotate"]}


def test_it_refuses_a_world_transition_from_the_wrong_revision():
    _before, _after, submit = status_fixtures()
    transition = Fixture.from_dict(submit, SUBMIT).transition
    assert transition is not None
    with pytest.raises(ValueError):
        DictWorld(1, {REQ: (1, {})}).applied(transition)


def test_it_accepts_any_world_view():
    class Frozen:
        revision = 12

        def get(self, resource):
            return (1, {"state": "received"}) if resource == REQ else None

    world = Frozen()
    assert isinstance(world, WorldView) and isinstance(DictWorld(), WorldView)
    _before, after, _submit = status_fixtures()
    hit = registry(after).resolve(STATUS, {"request_id": "req-7781"}, world)
    assert isinstance(hit, Hit) and hit.fixture.id == "fx-status-after"


def test_it_reports_a_malformed_digest_as_a_miss():
    miss = registry(docs_fixture()).lookup("docs.search", 1, "c8a59f66", WORLD)
    assert isinstance(miss, Miss) and "malformed" in miss.reason


def test_it_matches_a_fixture_of_several_clauses_only_when_every_clause_holds():
    # The status answer holds only after the submit committed AND before the account was closed.
    answer = fx(
        "fx-status-open",
        STATUS,
        {"request_id": "req-7781"},
        body={"state": "received"},
        condition=[{"resource": REQ, "revision": 1}, {"resource": "account/acme", "absent": True}],
        provenance=AUTHORED,
    )
    reg = registry(answer)
    submitted = DictWorld(4, {REQ: (1, {"state": "received"})})
    closed = DictWorld(5, {REQ: (1, {"state": "received"}), "account/acme": (1, {"state": "closed"})})
    neither = DictWorld(3, {"account/acme": (1, {"state": "closed"})})

    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, submitted), Hit)
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, closed), Miss)  # one clause of two holds
    assert isinstance(reg.resolve(STATUS, {"request_id": "req-7781"}, neither), Miss)


@pytest.mark.parametrize("after", [4, 3], ids=["same revision", "going back"])
def test_it_refuses_at_load_a_mutation_whose_revision_does_not_advance(after):
    # A transition that leaves the revision where it was would let a fixture "change" the world invisibly:
    # every later condition on that resource would still hold, so a lost effect could pass for none.
    _before, _after, submit = status_fixtures()
    bad = copy.deepcopy(submit)
    bad["condition"] = {"resource": REQ, "revision": 4}
    bad["transition"] = {"resource": REQ, "revision_before": 4, "revision_after": after, "change": {"state": "x"}}

    with pytest.raises(FixtureError) as info:
        Fixture.from_dict(bad, SUBMIT)

    assert info.value.field == "transition.revision_after" and "does not follow revision_before 4" in str(info.value)
