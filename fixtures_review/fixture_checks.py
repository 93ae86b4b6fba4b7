"""The fixture a staged recording becomes (`fixture_dict`, its id `fixture_id_for`) and the checks it must pass
before it is promoted: the contract tests against the latest version of its scenario (`_latest_base`,
`_fixture_for`) and the mutation test (`mutation_gaps`: a mutation's success declares its world transition and its
receipt; an ambiguous answer, its transition or a reviewed "no change").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any

from n17q_engine import canonical
from n17q_engine.agent.model import contract_for
from n17q_engine.contract_tests import contract_test_failures
from n17q_engine.contracts import ContractError
from n17q_engine.fixtures import Fixture, FixtureError
from n17q_engine.package import PackageError

from . import intake
from .models import ScenarioVersion, StagedRecording
from .review_rules import ReviewRefused
from .scenarios import ScenarioRefused, loaded_scenario


def _latest_base(recording: StagedRecording) -> ScenarioVersion:
    base = ScenarioVersion.objects.filter(name=recording.scenario_name).order_by("-version").first()
    if base is None:
        raise ReviewRefused(
            f"scenario {recording.scenario_name} has no version yet: import its package (import_package) so its "
            "contracts can test this recording"
        )
    return base


def fixture_dict(recording: StagedRecording, normalized: Mapping[str, Any]) -> dict[str, Any]:
    """The fixture a recording becomes (without its id, which is derived from this content)."""
    response = recording.response
    body = response.get("body")
    absent = {}
    for path in _redacted_paths(body, ""):
        absent[path or "$"] = "redacted"
    transition = recording.proposed_transition
    condition = None
    if transition:
        before = transition.get("revision_before")
        resource = transition.get("resource")
        if isinstance(resource, str) and resource:
            condition = (
                [{"resource": resource, "absent": True}]
                if before is None
                else [{"resource": resource, "revision": before}]
            )
    out: dict[str, Any] = {
        "tool": recording.tool,
        "contract_revision": recording.contract_revision,
        "request": dict(normalized),
        "response": {"outcome": recording.outcome, "body": body, "absent": absent},
        "provenance": {
            "recorded_at": recording.captured_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "source_revision": recording.source_revision or None,
            "connection": recording.connection,
            "synthetic": recording.synthetic,
            "fidelity_note": recording.fidelity_note or None,
        },
    }
    migration = recording.migration
    if migration:
        # A fixture a contract migration staged keeps what a capture cannot carry: its own world condition, the
        # absences it recorded (beside any redaction made in review), its fault stage, and where it came from.
        condition = migration.get("condition") or None
        out["response"]["absent"] = {**(migration.get("absent") or {}), **absent}
        if migration.get("fault_stage"):
            out["fault_stage"] = migration["fault_stage"]
        out["provenance"]["migrated_from"] = migration["migrated_from"]
    if condition:
        out["condition"] = condition
    if transition:
        out["transition"] = transition
    return out


def _redacted_paths(value: Any, path: str) -> Iterable[str]:
    if value == intake.REDACTED:
        yield path
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _redacted_paths(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _redacted_paths(child, f"{path}[{i}]")


def _fixture_for(recording: StagedRecording, base: ScenarioVersion) -> dict[str, Any]:
    """The contract tests: the fixture built from the recording, checked against base's contract."""
    try:
        contracts = loaded_scenario(base).contracts
    except (ScenarioRefused, PackageError) as exc:
        raise ReviewRefused(f"{base.ref} cannot be loaded: {exc}") from None
    contract = contract_for(contracts, recording.tool)  # model.chat: the built-in one, pinned when minted
    if contract is None:
        raise ReviewRefused(f"contract test: {base.ref} pins no contract for {recording.tool}")
    if contract.revision != recording.contract_revision:
        raise ReviewRefused(
            f"contract test: {base.ref} pins {recording.tool} revision {contract.revision}, the recording was made "
            f"under revision {recording.contract_revision} (migrate it or recapture)"
        )
    if contract.effect_class != recording.effect_class:
        raise ReviewRefused(
            f"contract test: {recording.tool} revision {contract.revision} is a {contract.effect_class}, the capture "
            f"says {recording.effect_class}"
        )
    try:
        normalized = contract.normalize(recording.request.get("args"))
    except ContractError as exc:
        raise ReviewRefused(f"contract test: the arguments break {recording.tool}: {exc}") from None
    fixture = fixture_dict(recording, normalized)
    fixture["id"] = fixture_id_for(fixture)
    try:
        loaded = Fixture.from_dict(fixture, contract)
    except FixtureError as exc:
        raise ReviewRefused(f"contract test: {exc}") from None
    failures = contract_test_failures(contract, loaded)  # output bound, idempotency (n17q_engine/contract_tests.py)
    if failures:
        raise ReviewRefused(f"contract test: {'; '.join(failures)}")
    missing = mutation_gaps(fixture, contract.effect_class, no_change=recording.no_change_reason)
    if missing and recording.outcome in AMBIGUOUS_OUTCOMES:
        raise ReviewRefused(
            f"mutation test: fixture {fixture['id']} ({recording.tool}, a mutation answered {recording.outcome}) "
            "declares no world transition and no reviewed no-change: an ambiguous answer may have changed the world "
            "(declare the transition it made, or record no change with its reason)"
        )
    if missing:
        raise ReviewRefused(
            f"mutation test: fixture {fixture['id']} ({recording.tool}, a mutation answered {recording.outcome}) "
            f"declares no {' and no '.join(missing)}: a static success would let a replay pass while nothing changed "
            "in the world (synthesize them, or exclude the tool with its limitation)"
        )
    return fixture


# A mutation answered with one of these said it happened: the world must change and the provider must say so.
_MUTATION_SUCCESS = ("ok", "empty")
# A mutation answered with one of these may or may not have happened (seed 000: "a static error was insufficient for
# ambiguous outcomes"): a reviewer must say which, with the transition it made or an explicit "no change".
AMBIGUOUS_OUTCOMES = ("unknown", "timeout", "error")


def mutation_gaps(fixture: Mapping[str, Any], effect_class: str, *, no_change: str = "") -> list[str]:
    """What a fixture for a mutating tool lacks to be promoted (seed 000, "Missing mutations were treated most
    strictly"; seed 001, "The simulated world started from a snapshot"): a success needs the world transition it
    made and the receipt it answered with (a non-empty response body: the provider's identity for the effect).
    An ambiguous answer (unknown, timeout, error: issue 34) needs the world transition it made, or `no_change`, a
    reviewer's reason for declaring that it made none. A refusal (denied, not_found, deleted) changed nothing and
    needs neither."""
    if effect_class != "mutation":
        return []
    response = fixture.get("response") or {}
    if response.get("outcome") in AMBIGUOUS_OUTCOMES:
        if fixture.get("transition") or no_change.strip():
            return []
        return ["world transition", "reviewed no-change"]
    if response.get("outcome") not in _MUTATION_SUCCESS:
        return []
    missing = []
    if not fixture.get("transition"):
        missing.append("world transition")
    body = response.get("body")
    if not isinstance(body, dict | list) or not body:
        missing.append("expected receipt")
    return missing


def fixture_id_for(fixture: Mapping[str, Any]) -> str:
    content = {k: v for k, v in fixture.items() if k != "id"}
    return "fx-" + canonical.digest_json(content).removeprefix("sha256:")[:20]
