"""Contract migration, the pure part: declared operations checked, applied, and sorted into structural and
meaning-bearing (seed 000, "When a tool contract changed…"; docs/contract-migration.md)."""

from __future__ import annotations

import copy

import pytest

from n17q_engine import canonical
from n17q_engine.contract_migration import (
    MigrationError,
    migrate_fixture,
    migrate_fixtures,
    migration_path,
    payload_digest,
)
from n17q_engine.contracts import Contract, ContractError
from n17q_engine.fixtures import Fixture, FixtureError

R1 = {
    "tool": "docs.search",
    "revision": 1,
    "effect_class": "read",
    "fields": {
        "query": {"type": "string", "canonical": ["strip"]},
        "corpus": {"type": "string", "default": "public-docs"},
        "limit": {"type": "integer", "default": 5},
    },
    "transport": ["attempt_id"],
    "fault_stages": ["before_send"],
    "outcomes": ["ok", "empty", "not_found"],
}


def r2(ops=None, **over):
    data = {
        "tool": "docs.search",
        "revision": 2,
        "effect_class": "read",
        "fields": {
            "q": {"type": "string", "canonical": ["strip"]},
            "corpus": {"type": "string", "default": "public-docs"},
            "locale": {"type": "string", "default": "en"},
        },
        "transport": ["attempt_id"],
        "fault_stages": ["before_send"],
        "outcomes": ["ok", "empty"],
        "migrations_from": {
            "1": ops
            if ops is not None
            else [
                {"op": "rename_field", "from": "query", "to": "q"},
                {"op": "add_field", "field": "locale", "value": "en"},
                {"op": "drop_field", "field": "limit"},
                {"op": "move", "from": "items", "to": "results.hits"},
            ]
        },
    }
    data.update(over)
    return data


def fixture(fid="search-keys", query="rotate signing keys", limit=5, outcome="ok", body=None, absent=None):
    request = {"corpus": "public-docs", "limit": limit, "query": query}
    body = {"items": [{"title": "Key rotation", "email": "[redacted]"}]} if body is None else body
    return {
        "id": fid,
        "tool": "docs.search",
        "contract_revision": 1,
        "request": request,
        "request_digest": canonical.request_digest(request),
        "condition": [{"resource": "docs:index", "revision": 3}],
        "response": {"outcome": outcome, "body": body, "absent": absent or {"items[0].email": "redacted"}},
        "fault_stage": None,
        "provenance": {
            "recorded_at": "2026-07-01T09:00:00Z",
            "source_revision": "docs@2026-07-01",
            "connection": "docs-api",
            "synthetic": False,
            "fidelity_note": None,
        },
    }


def contracts(*dicts):
    return {d["revision"]: Contract.from_dict(d) for d in dicts}


# --- declarations --------------------------------------------------------------------------------------------------


def test_a_contract_keeps_its_declared_migrations_and_a_contract_without_any_keeps_its_old_dict():
    declared = Contract.from_dict(r2())
    assert declared.to_dict()["migrations_from"]["1"][0] == {"op": "rename_field", "from": "query", "to": "q"}
    assert Contract.from_dict(declared.to_dict()) == declared
    assert "migrations_from" not in Contract.from_dict(R1).to_dict()


@pytest.mark.parametrize(
    ("ops", "field", "says"),
    [
        ([{"op": "exec", "code": "x"}], "migrations_from.1[0].op", "unknown operation 'exec'"),
        ([{"op": "rename_field", "from": "query", "to": "nope"}], "migrations_from.1[0].to", "not a field"),
        ([{"op": "rename_field", "from": "corpus", "to": "q"}], "migrations_from.1[0].from", "still a field"),
        ([{"op": "add_field", "field": "locale", "value": 5}], "migrations_from.1[0].value", "expected string"),
        ([{"op": "drop_field", "field": "q"}], "migrations_from.1[0].field", "still a field"),
        ([{"op": "move", "from": "items", "to": "items.x"}], "migrations_from.1[0]", "inside itself"),
        ([{"op": "map_outcome", "from": "not_found", "to": "deleted"}], "migrations_from.1[0].to", "not an outcome"),
        (
            [{"op": "map_outcome", "from": "not_found", "to": "empty", "meaning_bearing": False}],
            "migrations_from.1[0].meaning_bearing",
            "always reviewed",
        ),
        ([{"op": "drop_field", "field": "limit", "script": "rm"}], "migrations_from.1[0].script", "unknown key"),
        ([], "migrations_from.1", "non-empty list"),
    ],
)
def test_a_declared_operation_that_does_not_fit_the_revision_is_refused_naming_it(ops, field, says):
    with pytest.raises(ContractError) as err:
        Contract.from_dict(r2(ops))
    assert err.value.field == field and says in str(err.value)


def test_a_migration_can_only_come_from_an_earlier_revision():
    with pytest.raises(ContractError, match=r"migrations_from\.2: a key is an earlier revision"):
        Contract.from_dict({**r2(), "migrations_from": {"2": [{"op": "drop_field", "field": "limit"}]}})


# --- the path ------------------------------------------------------------------------------------------------------


def test_the_path_follows_declarations_across_revisions():
    r3 = {**r2(), "revision": 3, "migrations_from": {"2": [{"op": "drop_field", "field": "locale"}]}}
    r3["fields"] = {k: v for k, v in r2()["fields"].items() if k != "locale"}
    steps = migration_path(contracts(R1, r2(), r3), 1, 3)
    assert [(s.from_revision, s.to_revision) for s in steps] == [(1, 2), (2, 3)]


@pytest.mark.parametrize(
    ("start", "target", "says"),
    [
        (1, 1, "revision 1 is not newer than the pinned revision 1"),
        (1, 4, "no revision 4 is declared"),
    ],
)
def test_a_target_that_is_not_newer_or_not_declared_is_refused(start, target, says):
    with pytest.raises(MigrationError, match=says):
        migration_path(contracts(R1, r2()), start, target)


def test_a_revision_that_declares_no_migration_from_the_pinned_one_has_no_path():
    undeclared = {k: v for k, v in r2().items() if k != "migrations_from"}
    with pytest.raises(MigrationError, match=r"no declared path from docs\.search revision 1 to 2"):
        migration_path(contracts(R1, undeclared), 1, 2)


def test_a_declaration_naming_a_field_the_source_revision_lacks_is_refused():
    ops = [{"op": "rename_field", "from": "text", "to": "q"}, {"op": "add_field", "field": "locale", "value": "en"}]
    with pytest.raises(MigrationError, match="rename_field from 'text', which revision 1 lacks"):
        migration_path(contracts(R1, r2(ops)), 1, 2)


def test_a_change_of_effect_class_is_not_a_migration():
    with pytest.raises(MigrationError, match=r"changes the effect class \(read → mutation\): recapture"):
        migration_path(contracts(R1, r2(effect_class="mutation")), 1, 2)


# --- applying ------------------------------------------------------------------------------------------------------


def test_structural_operations_make_a_new_fixture_revision_that_keeps_the_original_payload_digest():
    original = fixture()
    target = Contract.from_dict(r2())
    result = migrate_fixture(original, migration_path(contracts(R1, r2()), 1, 2), target)
    assert result.structural, result.reasons
    new = result.fixture
    assert new["contract_revision"] == 2
    assert new["request"] == {"q": "rotate signing keys", "corpus": "public-docs", "locale": "en"}
    assert new["request_digest"] == canonical.request_digest(new["request"])
    assert new["response"]["body"] == {"results": {"hits": [{"title": "Key rotation", "email": "[redacted]"}]}}
    # What the response does not hold moved with the value: the redaction is still where the value is.
    assert new["response"]["absent"] == {"results.hits[0].email": "redacted"}
    assert new["condition"] == original["condition"]
    provenance = new["provenance"]["migrated_from"]
    assert provenance["fixture"] == "search-keys" and provenance["contract_revision"] == 1
    assert provenance["fixture_digest"] == canonical.digest_json(original)
    assert provenance["payload_digest"] == payload_digest(original)
    assert [op["op"] for op in provenance["operations"]] == ["rename_field", "add_field", "drop_field", "move"]
    # It is a fixture of revision 2, loadable as any other.
    loaded = Fixture.from_dict({"id": "fx-new", **new}, target)
    assert loaded.provenance.migrated_from == provenance
    assert fixture() == original  # the input is never changed


def test_the_original_payload_digest_survives_a_second_migration():
    r3 = {**r2(), "revision": 3, "migrations_from": {"2": [{"op": "move", "from": "results.hits", "to": "hits"}]}}
    first = migrate_fixture(fixture(), migration_path(contracts(R1, r2()), 1, 2), Contract.from_dict(r2()))
    second = migrate_fixture(
        {"id": "fx-2", **first.fixture}, migration_path(contracts(r2(), r3), 2, 3), Contract.from_dict(r3)
    )
    assert second.structural, second.reasons
    assert second.fixture["provenance"]["migrated_from"]["payload_digest"] == payload_digest(fixture())
    assert second.fixture["provenance"]["migrated_from"]["fixture"] == "fx-2"


def test_a_remapped_outcome_carries_meaning_and_says_so():
    ops = [*r2()["migrations_from"]["1"], {"op": "map_outcome", "from": "not_found", "to": "empty"}]
    steps = migration_path(contracts(R1, r2(ops)), 1, 2)
    target = Contract.from_dict(r2(ops))
    found, missing = migrate_fixtures(
        [fixture(), fixture("search-none", query="nothing here", outcome="not_found", body={}, absent={})],
        steps,
        target,
    )
    assert found.structural  # the operation changed nothing in this one
    assert not missing.structural
    assert missing.reasons == ["map_outcome not_found → empty (revision 2) changes what the service says"]
    assert missing.fixture["response"]["outcome"] == "empty"


def test_an_operation_the_contract_marks_meaning_bearing_is_not_structural():
    ops = [dict(op) for op in r2()["migrations_from"]["1"]]
    ops[2]["meaning_bearing"] = True  # dropping `limit` changes how many results the service returns
    result = migrate_fixture(fixture(), migration_path(contracts(R1, r2(ops)), 1, 2), Contract.from_dict(r2(ops)))
    assert result.reasons == ["drop_field limit is marked meaning-bearing by docs.search revision 2"]


def test_a_normalization_the_new_revision_added_is_never_applied_silently():
    lowered = r2()
    lowered["fields"] = copy.deepcopy(lowered["fields"])
    lowered["fields"]["q"]["canonical"] = ["strip", "lower"]
    result = migrate_fixture(
        fixture(query="Rotate Signing Keys"), migration_path(contracts(R1, lowered), 1, 2), Contract.from_dict(lowered)
    )
    assert not result.structural
    assert "does not hold under docs.search revision 2" in result.reasons[0]
    assert "is not normalized" in result.reasons[0]


def test_an_outcome_the_new_revision_does_not_report_needs_review():
    result = migrate_fixture(
        fixture(outcome="not_found", body={}, absent={}),
        migration_path(contracts(R1, r2()), 1, 2),
        Contract.from_dict(r2()),
    )
    assert not result.structural
    assert "'not_found' is not an outcome of docs.search revision 2" in result.reasons[0]


def test_two_fixtures_that_a_dropped_field_makes_one_request_both_need_review():
    five, ten = fixture("keys-5", limit=5), fixture("keys-10", limit=10)
    results = migrate_fixtures([five, ten], migration_path(contracts(R1, r2()), 1, 2), Contract.from_dict(r2()))
    assert [r.structural for r in results] == [False, False]
    assert all("fixtures keys-5, keys-10 become the same request" in r.reasons[0] for r in results)


def test_a_move_onto_a_value_the_body_holds_leaves_the_body_as_it_was():
    body = {"items": [1], "results": {"hits": "already"}}
    result = migrate_fixture(
        fixture(body=body, absent={}), migration_path(contracts(R1, r2()), 1, 2), Contract.from_dict(r2())
    )
    assert result.fixture["response"]["body"] == body
    assert any("results.hits: the body already holds a value there" in r for r in result.reasons)


def test_a_fixture_claiming_a_migration_must_say_where_from():
    target = Contract.from_dict(r2())
    new = migrate_fixture(fixture(), migration_path(contracts(R1, r2()), 1, 2), target).fixture
    del new["provenance"]["migrated_from"]["payload_digest"]
    with pytest.raises(FixtureError, match=r"provenance\.migrated_from\.payload_digest: is required"):
        Fixture.from_dict({"id": "fx-new", **new}, target)
