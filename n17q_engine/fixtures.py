"""The fixture registry (DESIGN §5): exact, world-aware, fail-closed lookup.

A fixture answers one normalized request of one contract revision, in the world states its condition
admits, with a recorded or authored response. `FixtureRegistry.lookup(tool, contract_revision,
request_digest, world)` is one dict probe on (tool, revision, digest) and a filter of that key's few
candidates by their world condition. It returns exactly one of:

- `Hit(fixture)`: exactly one fixture matches;
- `Miss`: nothing is defined for this request in this world (`fixture.missing`);
- `Ambiguous`: more than one fixture matches (`fixture.ambiguous`, with the candidate ids);
- `ContractMismatch`: fixtures exist for this (tool, digest) only under other contract revisions. It is
  reported, never matched;
- `BodyExpired`: exactly one fixture matches, and its body (held by digest) was removed under retention
  (`fixture.missing` with `body_expired`, seed 001). Reported, never served.

Never a nearby fixture, a placeholder, a default response or a live call: the registry has no
"fetch on miss" and no notion of similarity. `not_found`, `empty`, `denied` and `deleted` are responses a
fixture declares (the simulated service's negative evidence), distinct from a `Miss` (the scenario does not
define the request).

Decisions:
- **Two fixtures with the same key and overlapping conditions are kept**, and a lookup in a world both
  admit is `Ambiguous`: there is no precedence (not "most specific wins", not "newest wins"). A duplicate
  fixture *id* is refused at build time: ambiguity must be able to name its candidates.
- **A condition** is a list of clauses that must all hold (empty or omitted: any world). A clause is
  `{"resource": r, "revision": n}` (the world holds r at revision n) or `{"resource": r, "absent": true}`
  (the world does not hold r). A single clause may be given without the list.
- **A fixture is checked against its own contract revision when loaded**: its request must already be
  normalized under it (a fixture recorded before a default changed fails to load under the new revision
  rather than matching), its outcome must be one the contract reports, its fault stage one the contract
  supports, and a world transition is allowed for mutation contracts only. A given `request_digest` must
  equal the digest of the request.
- **Provenance**: a synthetic fixture must carry a fidelity note (what was lost by synthesizing it). A fixture
  made by a contract migration says so in `migrated_from` (the fixture and contract revision it came from, that
  fixture's digest, the digest of the payload as first recorded, the operations applied; docs/contract-migration.md).
- **A contract mismatch is reported as a `fixture.missing` event** (the vocabulary has no kind of its own
  for it) with a reason saying so and the revisions recorded (`recorded_revisions`, an extra field).
- A mismatch of world state names, per candidate, the expected and the actual resource revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from . import canonical
from .contracts import Contract, ContractError, check_json, copy_json
from .vocabulary import ABSENCE_KINDS, RESULT_OUTCOMES

ABSENT = "absent"
_FIXTURE_KEYS = frozenset(
    {
        "id",
        "tool",
        "contract_revision",
        "request",
        "request_digest",
        "condition",
        "response",
        "transition",
        "fault_stage",
        "provenance",
    }
)
_RESPONSE_KEYS = frozenset({"outcome", "body", "absent", "negative", "body_digest"})
# What a negative observation is scoped by (seed 000 "Unknown fixture data stayed unknown": "A search returning no
# results named the query and corpus revision. A status not found named the consistency window and world state."):
# declared as fields of the fixture's response, per outcome, never as free text. The world state of a `not_found`
# is the fixture world's, read when the result is served (the resource's revision then), so it is not declared here.
NEGATIVE_SCOPES: dict[str, frozenset[str]] = {
    "empty": frozenset({"query", "corpus_revision"}),
    "not_found": frozenset({"resource", "consistency_window_s"}),
}
# What an expired fixture body's record holds (the console's deletion record, docs/retention.md "Fixture bodies").
EXPIRY_KEYS = frozenset({"class", "sensitivity", "expired_at", "removed_at", "record"})
_TRANSITION_KEYS = frozenset({"resource", "revision_before", "revision_after", "change"})
_PROVENANCE_KEYS = frozenset(
    {"recorded_at", "source_revision", "connection", "synthetic", "fidelity_note", "migrated_from"}
)
_MIGRATED_FROM_KEYS = frozenset({"fixture", "fixture_digest", "contract_revision", "payload_digest", "operations"})


class FixtureError(ValueError):
    """A fixture that cannot be loaded. `field` names the field at fault; the message names the fixture."""

    def __init__(self, fixture_id: str | None, field: str | None, message: str) -> None:
        self.fixture_id = fixture_id
        self.field = field
        where = ".".join(p for p in (f"fixture {fixture_id!r}" if fixture_id else "fixture", field) if p)
        super().__init__(f"{where}: {message}")


# --- the world a lookup reads ------------------------------------------------------------------------------


@runtime_checkable
class WorldView(Protocol):
    """What a lookup needs of the simulated world: its revision and each resource's (revision, state)."""

    @property
    def revision(self) -> int: ...

    def get(self, resource: str) -> tuple[int, Any] | None: ...


@dataclass(frozen=True)
class DictWorld:
    """A world held in a dict: {resource: (revision, state)}. Immutable; `applied` returns the next world."""

    revision: int = 0
    resources: Mapping[str, tuple[int, Any]] = field(default_factory=dict)

    def get(self, resource: str) -> tuple[int, Any] | None:
        return self.resources.get(resource)

    def applied(self, transition: Transition) -> DictWorld:
        """The world after `transition`; refused when the resource is not at the revision it starts from."""
        current = self.resources.get(transition.resource)
        before = None if current is None else current[0]
        if before != transition.revision_before:
            raise ValueError(
                f"{transition.resource}: transition starts at revision {transition.revision_before}, "
                f"the world holds {ABSENT if before is None else before}"
            )
        resources = dict(self.resources)
        resources[transition.resource] = (transition.revision_after, copy_json(transition.change))
        return DictWorld(self.revision + 1, resources)


# --- what a fixture holds ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Clause:
    resource: str
    revision: int | None  # None: the resource must be absent

    def holds(self, world: WorldView) -> bool:
        current = world.get(self.resource)
        if self.revision is None:
            return current is None
        return current is not None and current[0] == self.revision

    def expected(self) -> int | str:
        return ABSENT if self.revision is None else self.revision

    def to_dict(self) -> dict[str, Any]:
        if self.revision is None:
            return {"resource": self.resource, "absent": True}
        return {"resource": self.resource, "revision": self.revision}


@dataclass(frozen=True, slots=True)
class Response:
    outcome: str
    body: Any = None
    # {path: absent | redacted | unavailable | not_applicable}: what the response does not hold, and why.
    absent: Mapping[str, str] = field(default_factory=dict)
    # The scope of a negative observation (`NEGATIVE_SCOPES`): None when the fixture declares none.
    negative: Mapping[str, Any] | None = None
    # A body held by digest (`body_digest`, seed 001): its bytes travel beside the package, not in fixtures.json, so
    # removing them under retention leaves the scenario's digest as it was. `expired`: the body's deletion record
    # ({class, sensitivity, expired_at, removed_at, record}) when its bytes are gone; `body` is then None and a
    # lookup that reaches this fixture is `BodyExpired`, never served.
    body_digest: str | None = None
    expired: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": self.outcome}
        if self.body_digest is not None:  # the form it was written in: the digest, never the body it resolved to
            out["body_digest"] = self.body_digest
        else:
            out["body"] = copy_json(self.body)
        out["absent"] = dict(self.absent)
        if self.negative is not None:  # only when declared: older fixtures keep the dict (and digest) they had
            out["negative"] = copy_json(dict(self.negative))
        return out


@dataclass(frozen=True, slots=True)
class Transition:
    resource: str
    revision_before: int | None
    revision_after: int
    change: Any

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "revision_before": self.revision_before,
            "revision_after": self.revision_after,
            "change": copy_json(self.change),
        }


@dataclass(frozen=True, slots=True)
class Provenance:
    recorded_at: str
    source_revision: str | None
    connection: str | None
    synthetic: bool
    fidelity_note: str | None
    migrated_from: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "recorded_at": self.recorded_at,
            "source_revision": self.source_revision,
            "connection": self.connection,
            "synthetic": self.synthetic,
            "fidelity_note": self.fidelity_note,
        }
        if self.migrated_from is not None:  # only when there is one: older fixtures keep the dict they had
            out["migrated_from"] = copy_json(dict(self.migrated_from))
        return out


@dataclass(frozen=True, slots=True)
class Fixture:
    id: str
    tool: str
    contract_revision: int
    request: Mapping[str, Any]
    request_digest: str
    condition: tuple[Clause, ...]
    response: Response
    transition: Transition | None
    fault_stage: str | None
    provenance: Provenance

    @property
    def key(self) -> tuple[str, int, str]:
        return (self.tool, self.contract_revision, self.request_digest)

    def admits(self, world: WorldView) -> bool:
        condition = self.condition
        return not condition or all(clause.holds(world) for clause in condition)

    @classmethod
    def from_dict(
        cls,
        data: Any,
        contract: Contract,
        *,
        parsed: bool = False,
        normalized: bool = False,
        bodies: Mapping[str, Any] | None = None,
        expired_bodies: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Fixture:
        """Load and check a fixture against the contract of its own (tool, revision).

        A response holding its body by digest (`body_digest`) takes it from `bodies` ({digest: body, each body's
        canonical JSON hashing to its digest}) or, when its bytes were removed under retention, from
        `expired_bodies` ({digest: deletion record}); a digest in neither is refused: a body is never guessed.

        `parsed=True`: `data` was just decoded from JSON text and belongs to the caller, so it is JSON by
        construction (bodies and changes are not walked to prove it) and is kept rather than copied.

        `normalized=True` skips one check, and only that one: re-normalizing the request under its contract
        to prove it was already normalized. `load_scenario` passes it when the scenario was checked in full
        under the same `package.CHECK_REVISION` before it was handed over (see there). The key is still
        computed here from the request's own bytes, never taken from the file, so even an unnormalized
        request could only make a fixture that nothing matches (normalizing is idempotent: a call's
        normalized request equals this request only if this request is normalized), never a wrong answer.
        """
        if not isinstance(data, dict):
            raise FixtureError(None, None, "must be an object")
        fid = data.get("id")
        if not isinstance(fid, str) or not fid:
            raise FixtureError(None, "id", "must be a non-empty string")
        unknown = data.keys() - _FIXTURE_KEYS
        if unknown:
            raise FixtureError(fid, min(unknown), "unknown key in a fixture")
        tool, revision = data.get("tool"), data.get("contract_revision")
        if (tool, revision) != contract.key:
            raise FixtureError(
                fid,
                "contract_revision",
                f"is for {tool} revision {revision}, checked against {contract.tool} revision {contract.revision}",
            )
        request = data.get("request")
        if normalized:
            if not isinstance(request, dict):
                raise FixtureError(fid, "request", "must be an object")
            digest = canonical.digest_bytes(canonical.canonical_json(request))
        else:
            try:
                request = contract.normalize(request)
            except ContractError as exc:
                raise FixtureError(fid, f"request.{exc.field}" if exc.field else "request", str(exc))
            # Compared as canonical JSON: in Python 5 == 5.0 == True, in a digest they differ.
            normalized_json = canonical.canonical_json(request)
            if normalized_json != canonical.canonical_json(data.get("request")):
                raise FixtureError(
                    fid,
                    "request",
                    f"is not normalized under {contract.tool} revision {contract.revision}: expected "
                    f"{normalized_json.decode()}",
                )
            digest = canonical.digest_bytes(normalized_json)
        given = data.get("request_digest", digest)
        if given != digest:
            raise FixtureError(fid, "request_digest", f"{given} is not the digest of the request ({digest})")
        condition = _condition(fid, data.get("condition"))
        response = _response(fid, data.get("response"), contract, parsed, bodies or {}, expired_bodies or {})
        transition = _transition(fid, data.get("transition"), contract, condition, parsed)
        fault_stage = data.get("fault_stage")
        if fault_stage is not None and fault_stage not in contract.fault_stages:
            supported = ", ".join(contract.fault_stages) or "none"
            raise FixtureError(
                fid,
                "fault_stage",
                f"{fault_stage!r} is not supported by {contract.tool} revision {contract.revision} "
                f"(supported: {supported})",
            )
        return cls(
            id=fid,
            tool=contract.tool,
            contract_revision=contract.revision,
            request=request,
            request_digest=digest,
            condition=condition,
            response=response,
            transition=transition,
            fault_stage=fault_stage,
            provenance=_provenance(fid, data.get("provenance")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "contract_revision": self.contract_revision,
            "request": copy_json(dict(self.request)),
            "request_digest": self.request_digest,
            "condition": [clause.to_dict() for clause in self.condition],
            "response": self.response.to_dict(),
            "transition": self.transition.to_dict() if self.transition else None,
            "fault_stage": self.fault_stage,
            "provenance": self.provenance.to_dict(),
        }


def _unknown(fid: str, where: str, data: dict, allowed: frozenset[str]) -> None:
    unknown = data.keys() - allowed
    if unknown:
        raise FixtureError(fid, f"{where}.{min(unknown)}", "unknown key")


def _revision(fid: str, where: str, value: Any, *, nullable: bool = False) -> int | None:
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FixtureError(fid, where, f"must be a non-negative integer revision, got {value!r}")
    return value


def _condition(fid: str, value: Any) -> tuple[Clause, ...]:
    if value is None:
        return ()
    clauses = [value] if isinstance(value, dict) else value
    if not isinstance(clauses, list):
        raise FixtureError(fid, "condition", "must be a clause or a list of clauses")
    out: list[Clause] = []
    seen: set[str] = set()
    for i, clause in enumerate(clauses):
        where = f"condition[{i}]"
        if not isinstance(clause, dict):
            raise FixtureError(fid, where, "a clause must be an object")
        _unknown(fid, where, clause, frozenset({"resource", "revision", "absent"}))
        resource = clause.get("resource")
        if not isinstance(resource, str) or not resource:
            raise FixtureError(fid, f"{where}.resource", "must be a non-empty string")
        if resource in seen:
            raise FixtureError(fid, f"{where}.resource", f"{resource} is conditioned twice")
        seen.add(resource)
        if ("revision" in clause) == ("absent" in clause):
            raise FixtureError(fid, where, 'needs exactly one of "revision" and "absent": true')
        if "absent" in clause:
            if clause["absent"] is not True:
                raise FixtureError(fid, f"{where}.absent", "must be true")
            out.append(Clause(resource, None))
        else:
            out.append(Clause(resource, _revision(fid, f"{where}.revision", clause["revision"])))
    return tuple(out)


def _response(
    fid: str,
    value: Any,
    contract: Contract,
    parsed: bool = False,
    bodies: Mapping[str, Any] | None = None,
    expired_bodies: Mapping[str, Mapping[str, Any]] | None = None,
) -> Response:
    if not isinstance(value, dict):
        raise FixtureError(fid, "response", "must be an object")
    _unknown(fid, "response", value, _RESPONSE_KEYS)
    outcome = value.get("outcome")
    if outcome not in RESULT_OUTCOMES:
        raise FixtureError(fid, "response.outcome", f"{outcome!r} is not one of {', '.join(RESULT_OUTCOMES)}")
    if outcome not in contract.outcomes:
        raise FixtureError(
            fid,
            "response.outcome",
            f"{outcome!r} is not an outcome of {contract.tool} revision {contract.revision} "
            f"({', '.join(contract.outcomes)})",
        )
    absent = value.get("absent", {})
    if not isinstance(absent, dict):
        raise FixtureError(fid, "response.absent", "must be an object {path: kind}")
    for path, kind in absent.items():
        if not isinstance(path, str) or not path:
            raise FixtureError(fid, "response.absent", f"a path must be a non-empty string, got {path!r}")
        if kind not in ABSENCE_KINDS:
            raise FixtureError(fid, f"response.absent.{path}", f"{kind!r} is not one of {', '.join(ABSENCE_KINDS)}")
    negative = _negative(fid, outcome, value.get("negative"))
    if "body_digest" in value:
        return _body_by_digest(fid, value, outcome, absent, bodies or {}, expired_bodies or {}, negative)
    body = value.get("body")
    if parsed:
        return Response(outcome=outcome, body=body, absent=absent, negative=negative)
    try:
        check_json(body, "body")
    except ContractError as exc:
        raise FixtureError(fid, f"response.{exc.field}", f"is not JSON: {exc}")
    return Response(outcome=outcome, body=copy_json(body), absent=dict(absent), negative=negative)


def _negative(fid: str, outcome: str, value: Any) -> dict[str, Any] | None:
    """The declared scope of a negative observation: for `empty` the query and the corpus revision searched, for
    `not_found` the resource and the consistency window (seconds) within which a new one may not be visible yet."""
    if value is None:
        return None
    where = "response.negative"
    keys = NEGATIVE_SCOPES.get(outcome)
    if keys is None:
        listed = ", ".join(NEGATIVE_SCOPES)
        raise FixtureError(fid, where, f"scopes a negative observation ({listed}), not an {outcome!r} response")
    if not isinstance(value, dict):
        raise FixtureError(fid, where, "must be an object")
    _unknown(fid, where, value, keys)
    missing = sorted(keys - value.keys())
    if missing:
        raise FixtureError(fid, f"{where}.{missing[0]}", f"is required to scope an {outcome!r} response")
    for key in sorted(keys):
        item = value[key]
        if key == "consistency_window_s":
            if not isinstance(item, int | float) or isinstance(item, bool) or not 0 <= item < float("inf"):
                raise FixtureError(fid, f"{where}.{key}", "must be a non-negative number of seconds")
        elif not isinstance(item, str) or not item.strip():
            raise FixtureError(fid, f"{where}.{key}", "must be a non-empty string")
    return dict(value)


def _body_by_digest(
    fid: str,
    value: Mapping[str, Any],
    outcome: str,
    absent: Mapping[str, str],
    bodies: Mapping[str, Any],
    expired_bodies: Mapping[str, Mapping[str, Any]],
    negative: Mapping[str, Any] | None = None,
) -> Response:
    """A response whose body is held by digest: the body carried beside the package, or its deletion record."""
    if "body" in value:
        raise FixtureError(fid, "response.body_digest", "a response holds its body inline or by digest, not both")
    digest = value["body_digest"]
    if not canonical.is_digest(digest):
        raise FixtureError(fid, "response.body_digest", f"must be a sha256: digest, got {digest!r}")
    if digest in bodies:
        body = bodies[digest]
        if canonical.digest_json(body) != digest:
            raise FixtureError(fid, "response.body_digest", f"the body carried for {digest} does not hash to it")
        return Response(outcome=outcome, body=body, absent=dict(absent), negative=negative, body_digest=digest)
    record = expired_bodies.get(digest)
    if record is None:
        raise FixtureError(
            fid, "response.body_digest", f"{digest}: the body is neither carried nor recorded as expired"
        )
    missing = sorted(EXPIRY_KEYS - record.keys())
    if missing:
        raise FixtureError(fid, "response.body_digest", f"{digest}: its expiry record lacks {missing[0]}")
    return Response(
        outcome=outcome, body=None, absent=dict(absent), negative=negative, body_digest=digest, expired=dict(record)
    )


def _transition(
    fid: str, value: Any, contract: Contract, condition: tuple[Clause, ...], parsed: bool = False
) -> Transition | None:
    if value is None:
        return None
    if contract.effect_class != "mutation":
        raise FixtureError(
            fid, "transition", f"{contract.tool} revision {contract.revision} is a read: it cannot change the world"
        )
    if not isinstance(value, dict):
        raise FixtureError(fid, "transition", "must be an object")
    _unknown(fid, "transition", value, _TRANSITION_KEYS)
    resource = value.get("resource")
    if not isinstance(resource, str) or not resource:
        raise FixtureError(fid, "transition.resource", "must be a non-empty string")
    before = _revision(fid, "transition.revision_before", value.get("revision_before"), nullable=True)
    after = _revision(fid, "transition.revision_after", value.get("revision_after"))
    assert after is not None
    if before is not None and after <= before:
        raise FixtureError(fid, "transition.revision_after", f"{after} does not follow revision_before {before}")
    for clause in condition:
        if clause.resource == resource and clause.revision != before:
            raise FixtureError(
                fid,
                "transition.revision_before",
                f"the condition expects {resource} at {clause.expected()}, the transition starts at "
                f"{ABSENT if before is None else before}",
            )
    change = value.get("change")
    if parsed:
        return Transition(resource, before, after, change)
    try:
        check_json(change, "change")
    except ContractError as exc:
        raise FixtureError(fid, f"transition.{exc.field}", f"is not JSON: {exc}")
    return Transition(resource, before, after, copy_json(change))


def _provenance(fid: str, value: Any) -> Provenance:
    if not isinstance(value, dict):
        raise FixtureError(fid, "provenance", "must be an object")
    _unknown(fid, "provenance", value, _PROVENANCE_KEYS)
    recorded_at = value.get("recorded_at")
    if not isinstance(recorded_at, str) or not recorded_at:
        raise FixtureError(fid, "provenance.recorded_at", "must be a non-empty string")
    for name in ("source_revision", "connection", "fidelity_note"):
        if value.get(name) is not None and not isinstance(value[name], str):
            raise FixtureError(fid, f"provenance.{name}", "must be a string or null")
    synthetic = value.get("synthetic")
    if not isinstance(synthetic, bool):
        raise FixtureError(fid, "provenance.synthetic", "must be true or false")
    note = value.get("fidelity_note")
    if synthetic and not (note and note.strip()):
        raise FixtureError(fid, "provenance.fidelity_note", "a synthetic fixture must say what fidelity it lost")
    migrated = value.get("migrated_from")
    if migrated is not None:
        migrated = _migrated_from(fid, migrated)
    return Provenance(recorded_at, value.get("source_revision"), value.get("connection"), synthetic, note, migrated)


def _migrated_from(fid: str, value: Any) -> dict[str, Any]:
    where = "provenance.migrated_from"
    if not isinstance(value, dict):
        raise FixtureError(fid, where, "must be an object")
    _unknown(fid, where, value, _MIGRATED_FROM_KEYS)
    missing = sorted(_MIGRATED_FROM_KEYS - value.keys())
    if missing:
        raise FixtureError(fid, f"{where}.{missing[0]}", "is required")
    if not isinstance(value["fixture"], str) or not value["fixture"]:
        raise FixtureError(fid, f"{where}.fixture", "must name the fixture it was migrated from")
    for key in ("fixture_digest", "payload_digest"):
        if not canonical.is_digest(value[key]):
            raise FixtureError(fid, f"{where}.{key}", "must be a sha256: digest")
    _revision(fid, f"{where}.contract_revision", value["contract_revision"])
    ops = value["operations"]
    if not isinstance(ops, list) or not all(isinstance(op, dict) and isinstance(op.get("op"), str) for op in ops):
        raise FixtureError(fid, f"{where}.operations", "must be a list of the operations applied")
    try:
        check_json(value, where)
    except ContractError as exc:
        raise FixtureError(fid, where, str(exc))
    return copy_json(value)


# --- lookup results ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hit:
    fixture: Fixture


@dataclass(frozen=True, slots=True)
class Miss:
    """Nothing defined for this request in this world: the run pauses as `incomplete_test_world`."""

    tool: str
    contract_revision: int
    request_digest: str
    world_revision: int
    reason: str
    # Per candidate whose condition failed: {"fixture", "resource", "expected", "actual"}.
    expected: tuple[Mapping[str, Any], ...] = ()
    kind: str = "fixture.missing"

    def record(self, *, scenario: Any = None, checkpoint_id: str | None = None) -> dict[str, Any]:
        """The fields of the `fixture.missing` event this miss becomes."""
        out = _record_fields(self, scenario, checkpoint_id)
        if self.expected:
            out["expected"] = [dict(e) for e in self.expected]
        return out


@dataclass(frozen=True, slots=True)
class Ambiguous:
    tool: str
    contract_revision: int
    request_digest: str
    world_revision: int
    reason: str
    candidates: tuple[str, ...]
    kind: str = "fixture.ambiguous"

    def record(self, *, scenario: Any = None, checkpoint_id: str | None = None) -> dict[str, Any]:
        out = _record_fields(self, scenario, checkpoint_id)
        out["candidates"] = list(self.candidates)
        return out


@dataclass(frozen=True, slots=True)
class ContractMismatch:
    """Fixtures exist for this request only under other contract revisions: reported, never matched."""

    tool: str
    contract_revision: int
    request_digest: str
    world_revision: int
    reason: str
    recorded_revisions: tuple[int, ...]
    kind: str = "fixture.missing"

    def record(self, *, scenario: Any = None, checkpoint_id: str | None = None) -> dict[str, Any]:
        out = _record_fields(self, scenario, checkpoint_id)
        out["recorded_revisions"] = list(self.recorded_revisions)
        return out


@dataclass(frozen=True, slots=True)
class BodyExpired:
    """Exactly one fixture answers, and its body's bytes were removed under retention (seed 001): the run stops as
    `incomplete_test_world`, naming the fixture, the body's digest and when it was removed. Nothing is served in its
    place: not another fixture, not a synthetic body, not an empty one."""

    tool: str
    contract_revision: int
    request_digest: str
    world_revision: int
    reason: str
    fixture: Fixture
    kind: str = "fixture.missing"

    def record(self, *, scenario: Any = None, checkpoint_id: str | None = None) -> dict[str, Any]:
        out = _record_fields(self, scenario, checkpoint_id)
        expired = dict(self.fixture.response.expired or {})
        out["body_expired"] = {"fixture": self.fixture.id, "body_digest": self.fixture.response.body_digest, **expired}
        return out


def body_expired_reason(fixture: Fixture) -> str:
    """What a stop on an expired fixture body says: the fixture, the digest, when and under which class it went."""
    record = fixture.response.expired or {}
    return (
        f"fixture body expired: fixture {fixture.id} answers this request, but its body {fixture.response.body_digest} "
        f"was removed on {record.get('removed_at')} under retention class {record.get('class')!r} (deletion record "
        f"{record.get('record')}); source material expired, so nothing is served in its place"
    )


LookupResult = Hit | Miss | Ambiguous | ContractMismatch | BodyExpired


def _record_fields(
    result: Miss | Ambiguous | ContractMismatch | BodyExpired, scenario: Any, checkpoint_id: str | None
) -> dict[str, Any]:
    return {
        "kind": result.kind,
        "scenario": scenario,
        "tool": result.tool,
        "contract_revision": result.contract_revision,
        "request_digest": result.request_digest,
        "world_revision": result.world_revision,
        "checkpoint_id": checkpoint_id,
        "reason": result.reason,
    }


# --- the registry ------------------------------------------------------------------------------------------


class FixtureRegistry:
    """Immutable once built. Lookups never fall back: see the module docstring."""

    def __init__(self, fixtures: Iterable[Fixture]) -> None:
        by_key: dict[tuple[str, int, str], list[Fixture]] = {}
        ids: set[str] = set()
        for fixture in fixtures:
            if fixture.id in ids:
                raise FixtureError(fixture.id, "id", "two fixtures have this id")
            ids.add(fixture.id)
            key = (fixture.tool, fixture.contract_revision, fixture.request_digest)
            held = by_key.get(key)
            if held is None:
                by_key[key] = [fixture]
            else:
                held.append(fixture)
        self._by_key: dict[tuple[str, int, str], list[Fixture]] = by_key  # never changed after this
        self._revisions: dict[tuple[str, str], tuple[int, ...]] | None = None  # built on the first miss
        tool_revisions: dict[str, set[int]] = {}
        for tool, revision, _digest in by_key:
            tool_revisions.setdefault(tool, set()).add(revision)
        self._tool_revisions = {k: tuple(sorted(v)) for k, v in tool_revisions.items()}
        self._count = len(ids)

    def _revisions_of(self, tool: str, digest: str) -> tuple[int, ...]:
        """The contract revisions that hold fixtures for (tool, digest): only a miss asks, so built then."""
        if self._revisions is None:
            revisions: dict[tuple[str, str], set[int]] = {}
            for tool_, revision, digest_ in self._by_key:
                revisions.setdefault((tool_, digest_), set()).add(revision)
            self._revisions = {k: tuple(sorted(v)) for k, v in revisions.items()}
        return self._revisions.get((tool, digest), ())

    @classmethod
    def from_dicts(cls, items: Iterable[Any], contracts: Iterable[Contract]) -> FixtureRegistry:
        """Load fixtures, each checked against the contract of its own (tool, revision) among `contracts`."""
        by_key = {c.key: c for c in contracts}
        loaded = []
        for item in items:
            fid = item.get("id") if isinstance(item, dict) else None
            key: Any = (item.get("tool"), item.get("contract_revision")) if isinstance(item, dict) else None
            contract = by_key.get(key) if key is not None else None
            if contract is None:
                raise FixtureError(fid, "contract_revision", f"no contract {key} to check the fixture against")
            loaded.append(Fixture.from_dict(item, contract))
        return cls(loaded)

    def __len__(self) -> int:
        return self._count

    def lookup(self, tool: str, contract_revision: int, request_digest: str, world: WorldView) -> LookupResult:
        candidates = self._by_key.get((tool, contract_revision, request_digest))
        if candidates is not None:
            if len(candidates) == 1:
                only = candidates[0]
                if only.admits(world):
                    return Hit(only) if only.response.expired is None else self._expired(only, world)
            matching = [f for f in candidates if f.admits(world)]
            if len(matching) == 1:
                found = matching[0]
                return Hit(found) if found.response.expired is None else self._expired(found, world)
            if matching:
                ids = tuple(sorted(f.id for f in matching))
                return Ambiguous(
                    tool,
                    contract_revision,
                    request_digest,
                    world.revision,
                    f"{len(ids)} fixtures match this request in world revision {world.revision}: {', '.join(ids)}",
                    ids,
                )
            return self._world_mismatch(tool, contract_revision, request_digest, world, candidates)
        return self._not_recorded(tool, contract_revision, request_digest, world)

    @staticmethod
    def _expired(fixture: Fixture, world: WorldView) -> BodyExpired:
        return BodyExpired(
            fixture.tool,
            fixture.contract_revision,
            fixture.request_digest,
            world.revision,
            body_expired_reason(fixture),
            fixture,
        )

    def resolve(self, contract: Contract, args: Any, world: WorldView) -> LookupResult:
        """Normalize `args` under `contract` (ContractError if they break it) and look the request up."""
        _normalized, digest = contract.digest(args)
        return self.lookup(contract.tool, contract.revision, digest, world)

    def _world_mismatch(
        self, tool: str, revision: int, digest: str, world: WorldView, candidates: list[Fixture]
    ) -> Miss:
        expected: list[dict[str, Any]] = []
        for fixture in candidates:
            for clause in fixture.condition:
                if not clause.holds(world):
                    current = world.get(clause.resource)
                    expected.append(
                        {
                            "fixture": fixture.id,
                            "resource": clause.resource,
                            "expected": clause.expected(),
                            "actual": ABSENT if current is None else current[0],
                        }
                    )
        detail = "; ".join(
            f"{e['fixture']} expects {e['resource']} at {e['expected']}, the world has {e['actual']}" for e in expected
        )
        return Miss(
            tool,
            revision,
            digest,
            world.revision,
            f"world state: no fixture for this request holds in world revision {world.revision} ({detail})",
            tuple(expected),
        )

    def _not_recorded(self, tool: str, revision: int, digest: str, world: WorldView) -> Miss | ContractMismatch:
        recorded = self._revisions_of(tool, digest)
        if recorded:
            listed = ", ".join(str(r) for r in recorded)
            return ContractMismatch(
                tool,
                revision,
                digest,
                world.revision,
                f"contract mismatch: this request has fixtures under {tool} revision {listed}, not {revision}; "
                "migrate them or pin the older contract",
                recorded,
            )
        held = self._tool_revisions.get(tool)
        if held is None:
            reason = f"unknown tool: the registry has no fixture for {tool}"
        elif not canonical.is_digest(digest):
            reason = f"malformed request digest {digest!r}"
        elif revision not in held:
            # Not a ContractMismatch (no fixture has this digest), but the likely cause is worth naming.
            listed = ", ".join(str(r) for r in held)
            reason = (
                f"unrecorded request: no fixture for {tool} revision {revision} at all; the registry holds "
                f"revision {listed} (did the contract change?)"
            )
        else:
            reason = f"unrecorded request: no fixture for this request to {tool} revision {revision}"
        return Miss(tool, revision, digest, world.revision, reason)
