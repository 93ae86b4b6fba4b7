"""Adapter contract tests at promotion (seed 003: "Adapter fixtures verified normalization, error mapping, timeout
stages, output bounds, sandbox behavior, idempotency, query, and replay."): an output bound and an idempotency
behaviour a contract declares, each failing a fixture with one sentence saying why."""

from __future__ import annotations

from typing import Any

import pytest

from n17q_engine.contract_tests import contract_test_failures
from n17q_engine.contracts import Contract, ContractError
from n17q_engine.fixtures import Fixture

SEND: dict[str, Any] = {
    "tool": "payments.charge",
    "revision": 1,
    "effect_class": "mutation",
    "fields": {"amount": {"type": "integer"}, "idempotency_key": {"type": "string"}},
    "outcomes": ["ok", "error", "denied"],
}
SEARCH: dict[str, Any] = {
    "tool": "docs.search",
    "revision": 1,
    "effect_class": "read",
    "fields": {"query": {"type": "string"}},
    "outcomes": ["ok", "empty"],
}


def fixture(contract: Contract, request: dict, body: Any, *, transition: bool = True) -> Fixture:
    data: dict[str, Any] = {
        "id": "fx-1",
        "tool": contract.tool,
        "contract_revision": contract.revision,
        "request": request,
        "response": {"outcome": "ok", "body": body},
        "provenance": {"recorded_at": "2026-06-10T14:00:00Z", "connection": "sandbox", "synthetic": False},
    }
    if transition:
        data["condition"] = [{"resource": "charge:c-1", "absent": True}]
        data["transition"] = {"resource": "charge:c-1", "revision_before": None, "revision_after": 1, "change": {}}
    return Fixture.from_dict(data, contract)


@pytest.mark.seed("003", "The release gate became the scenario")
def test_a_response_over_the_declared_output_bound_fails_its_contract_test_saying_by_how_much():
    bounded = Contract.from_dict({**SEARCH, "max_output_bytes": 64})
    small = fixture(bounded, {"query": "keys"}, {"hits": ["a"]}, transition=False)
    large = fixture(bounded, {"query": "keys"}, {"hits": ["x" * 100]}, transition=False)

    assert contract_test_failures(bounded, small) == []
    (failure,) = contract_test_failures(bounded, large)
    assert failure.startswith("output bound: fixture fx-1 answers 113 bytes, over the 64 bytes docs.search revision 1")
    assert contract_test_failures(Contract.from_dict(SEARCH), large) == [], "no bound declared, none checked"
    assert Contract.from_dict({**SEARCH, "max_output_bytes": 64}).to_dict()["max_output_bytes"] == 64
    assert "max_output_bytes" not in Contract.from_dict(SEARCH).to_dict(), "an undeclared bound keeps the old dict"


@pytest.mark.seed("003", "The release gate became the scenario")
def test_a_mutation_applied_twice_with_its_idempotency_key_makes_one_effect_with_one_receipt():
    keyed = Contract.from_dict({**SEND, "idempotency": {"key_field": "idempotency_key"}})
    charge = fixture(keyed, {"amount": 5, "idempotency_key": "k-1"}, {"charge": "c-1", "receipt": "r-1"})
    assert contract_test_failures(keyed, charge) == []

    (no_receipt,) = contract_test_failures(keyed, fixture(keyed, {"amount": 5, "idempotency_key": "k-1"}, {}))
    assert "applied twice with key k-1 makes 1 effect and answers no receipt" in no_receipt
    (no_key,) = contract_test_failures(keyed, fixture(keyed, {"amount": 5, "idempotency_key": ""}, {"r": 1}))
    assert "carries no idempotency key in idempotency_key" in no_key


@pytest.mark.seed("003", "The release gate became the scenario")
def test_a_mutation_carrying_a_key_under_a_contract_without_idempotency_behaviour_fails():
    undeclared = Contract.from_dict(SEND)
    charge = fixture(undeclared, {"amount": 5, "idempotency_key": "k-1"}, {"charge": "c-1"})
    (failure,) = contract_test_failures(undeclared, charge)
    assert "carries an idempotency key (idempotency_key) and payments.charge revision 1 declares no idempotency" in (
        failure
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_output_bytes": 0}, "max_output_bytes"),
        ({"max_output_bytes": True}, "max_output_bytes"),
        ({"idempotency": {"key_field": "colour"}}, "'colour' is not a semantic field"),
        ({"idempotency": "yes"}, 'must be {"key_field"'),
    ],
)
def test_a_bad_output_bound_or_idempotency_declaration_is_refused(change, message):
    with pytest.raises(ContractError, match=message):
        Contract.from_dict({**SEND, **change})
    with pytest.raises(ContractError, match="only a mutation has an idempotency behaviour"):
        Contract.from_dict({**SEARCH, "idempotency": {"key_field": "query"}})
