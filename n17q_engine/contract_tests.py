"""Adapter contract tests a fixture passes before promotion (seed 003: "Adapter fixtures verified normalization, error
mapping, timeout stages, output bounds, sandbox behavior, idempotency, query, and replay."). Normalization, outcomes
and fault stages are checked as the fixture loads (`Fixture.from_dict`); this module adds the two a contract declares
additively (contracts.py, docs/contract-tests.md):

- **output bound** (`max_output_bytes`): the response body, as canonical JSON, holds at most that many bytes;
- **idempotency** (`idempotency: {"key_field": f}`, mutations only): the fixture's request carries its key in `f`, and
  the fixture applied twice with that key, in the world it starts from, makes one effect and answers the same receipt
  both times (the provider's ledger keeps one effect per key). A mutation fixture whose request carries an
  idempotency key (a field named as one: `idempotency_key`, `idempotencyKey`, … see live_boundary.py) under a
  contract that declares no idempotency behaviour fails: nothing says whether a second delivery makes a second effect.

`contract_test_failures(contract, fixture)` returns one sentence per failure; empty when it passes.
"""

from __future__ import annotations

from typing import Any

from . import canonical
from .contracts import Contract
from .fixtures import DictWorld, Fixture
from .live_boundary import KEY_NAMES

_SUCCESS = ("ok", "empty")


def contract_test_failures(contract: Contract, fixture: Fixture) -> list[str]:
    failures = []
    where = f"{contract.tool} revision {contract.revision}"
    bound = contract.max_output_bytes
    if bound is not None:
        size = len(canonical.canonical_json(fixture.response.body))
        if size > bound:
            failures.append(
                f"output bound: fixture {fixture.id} answers {size} bytes, over the {bound} bytes {where} declares "
                "(max_output_bytes): a replay would hand the agent more than the adapter ever returns"
            )
    if contract.effect_class == "mutation":
        failure = _idempotency(contract, fixture, where)
        if failure is not None:
            failures.append(failure)
    return failures


def _key_named(request: Any) -> str | None:
    if not isinstance(request, dict):
        return None
    for name in request:
        plain = "".join(ch for ch in str(name).lower() if ch.isalnum())
        if plain in KEY_NAMES:
            return str(name)
    return None


def _idempotency(contract: Contract, fixture: Fixture, where: str) -> str | None:
    field = contract.idempotency_key_field
    if field is None:
        carried = _key_named(fixture.request)
        if carried is not None:
            return (
                f"idempotency: fixture {fixture.id}'s request carries an idempotency key ({carried}) and {where} "
                "declares no idempotency behaviour (idempotency.key_field): nothing says whether a second delivery "
                "makes a second effect"
            )
        return None
    key = fixture.request.get(field)
    if not isinstance(key, str) or not key:
        return f"idempotency: fixture {fixture.id}'s request carries no idempotency key in {field}, as {where} declares"
    if fixture.response.outcome not in _SUCCESS or fixture.transition is None:
        return None  # a refusal or an ambiguous answer made no effect to deduplicate (the mutation test reads it)
    # The fixture applied twice with the same key, in the world its condition describes, through a provider ledger
    # keyed on the declared field: the second delivery must find the first effect and answer its receipt.
    world = DictWorld(0, {c.resource: (c.revision, None) for c in fixture.condition if c.revision is not None})
    ledger: dict[str, Any] = {}
    receipts = []
    effects = 0
    for delivery in (1, 2):
        if key in ledger:
            receipts.append(ledger[key])
            continue
        if not fixture.admits(world):
            return f"idempotency: fixture {fixture.id} does not answer delivery {delivery} in the world it starts from"
        world = world.applied(fixture.transition)
        effects += 1
        ledger[key] = canonical.canonical_json(fixture.response.body)
        receipts.append(ledger[key])
    if receipts[0] in (b"null", b"{}", b"[]", b'""'):
        return (
            f"idempotency: fixture {fixture.id} applied twice with key {key} makes {effects} effect and answers no "
            "receipt: the second delivery has nothing to be answered with"
        )
    return None
