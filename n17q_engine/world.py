"""The simulated world of a replay (DESIGN §5, §6): versioned resources, a logical clock, seeded ids.

Three pieces, none of which reads process time or process randomness:

- `LogicalClock`: scenario time. It starts where the scenario or checkpoint says and moves only by an
  explicit `advance`, which returns the `clock.advanced` event body recording the move. It never goes
  backwards.
- `IdSource`: ids derived from the scenario seed and a namespace (`next(kind)`), and replay-namespaced
  effect identities (`replay_key`) derived from, linked to, and never equal to the historical live key.
- `SimulatedWorld`: named, versioned resources (each a revision and a JSON state). It satisfies
  `fixtures.WorldView`, so `FixtureRegistry.lookup` reads it directly. `apply` changes it by a fixture-style
  transition and returns the `world.transition` body; `observe` returns the `world.observation` body;
  `schedule`/`due` hold transitions that become visible later on scenario time (a provider's visibility
  delay); `snapshot`/`from_snapshot` round-trip through canonical JSON; `child` branches a counterfactual.

Decisions:
- **A change is explicit**: `{"op": "create" | "update" | "delete", "state": ...}`. `create` needs the resource
  absent (`revision_before` null), `update` and `delete` need it present; `revision_after` must exceed the
  revision it starts from (and, for a re-created resource, the revision it was deleted at: a revision is
  never reused). A delete's `state` must be null; a created or updated state must be JSON and not null, so
  a null observed state always means "absent".
- **Absent is not empty**: observing a missing resource gives `state: null` with `absent: true` and
  `resource_revision: null`; a resource whose state is `{}` or `[]` is present (`absent: false`). The two
  extra fields are additions the vocabulary admits.
- **The world revision** counts applied transitions: each `apply` raises it by one.
- **A revision mismatch is refused**, never merged: `WorldError` names the resource, the revision the
  transition expects and the one the world holds (`expected`, `actual`; "absent" for a missing resource).
- **`due` is all-or-nothing**: every scheduled transition whose time has come is applied in (time,
  insertion) order; if one is refused, the world and the schedule are left exactly as they were before the
  call and the error names the failing entry.
- **Ids**: `<kind>-<24 hex>` where the hex is SHA-256 of the canonical JSON of [seed, namespace, kind, n]
  (n counts per kind, from 0). Canonical JSON, not string concatenation, so no two inputs share a preimage.
- **Replay keys**: `replay:<world>:<24 hex>`, the hex derived from (seed, world, historical key). The live
  key is never embedded in the replay key (an adapter that recognizes live keys must not recognize it), so
  the link is kept by the `IdSource` (`historical_for`) and verifiable by recomputation (`is_replay_of`).
- **The provider's ledger** (`accept_effect`, seed 000 "Concurrency was recorded as behavior"): a delivery of
  a raced effect (`concurrency.py`) is accepted by creating the resource `effect:<tool>:<identity>`; a second
  delivery with an identity the ledger already holds is a duplicate (`None`), and nothing changes. Whether two
  deliveries make one resource or two is decided by their effect identity alone, and it is world state like any
  other: versioned, in the snapshot, visible to a fixture condition.
- **Times** are timezone-aware datetimes; event bodies carry them as UTC ISO-8601 with a trailing `Z` and
  microseconds when present, so `from_snapshot` restores the exact instant.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from . import canonical
from .contracts import ContractError, check_json, copy_json
from .fixtures import ABSENT, Transition

SNAPSHOT_FORMAT = "n17q.world-snapshot/1"
OPS = ("create", "update", "delete")
REPLAY_PREFIX = "replay:"
EFFECT_PREFIX = "effect:"  # the provider's ledger of accepted effects: effect:<tool>:<identity>
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_KIND_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_HEX = 24


class WorldError(ValueError):
    """A refused world operation. `resource`, `expected` and `actual` say what did not match, when known."""

    def __init__(
        self,
        message: str,
        *,
        resource: str | None = None,
        expected: int | str | None = None,
        actual: int | str | None = None,
    ) -> None:
        self.resource = resource
        self.expected = expected
        self.actual = actual
        super().__init__(message)


class ClockError(ValueError):
    """A refused clock operation: a naive time, or a move that does not go forward."""


# --- time ----------------------------------------------------------------------------------------------------


def iso(moment: datetime) -> str:
    """UTC ISO-8601 with a trailing Z; microseconds kept when present."""
    _aware(moment, "time")
    utc = moment.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{utc.microsecond:06d}Z" if utc.microsecond else f"{text}Z"


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ClockError(f"{value!r} has no timezone")
    return parsed.astimezone(UTC)


def _aware(moment: Any, what: str) -> None:
    if not isinstance(moment, datetime):
        raise ClockError(f"{what} must be a datetime, got {type(moment).__name__}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ClockError(f"{what} must be timezone-aware: scenario time is absolute")


class LogicalClock:
    """Scenario time: starts at `start`, moves only by `advance`, never backwards, never reads process time."""

    def __init__(self, start: datetime) -> None:
        _aware(start, "start")
        self._now = start.astimezone(UTC)

    @property
    def now(self) -> datetime:
        return self._now

    def advance(self, to: datetime, cause: str | None) -> dict[str, Any]:
        """Move to `to`; return the `clock.advanced` body {from, to, cause}. Refused unless `to` is later."""
        _aware(to, "to")
        if to < self._now:
            raise ClockError(f"the clock does not go backwards: it is {iso(self._now)}, asked for {iso(to)}")
        if to == self._now:
            raise ClockError(f"the clock is already at {iso(to)}: an advance must move it forward")
        body = {"from": iso(self._now), "to": iso(to), "cause": cause}
        self._now = to.astimezone(UTC)
        return body

    def advance_by(self, delta: timedelta, cause: str | None) -> dict[str, Any]:
        return self.advance(self._now + delta, cause)


# --- ids -----------------------------------------------------------------------------------------------------


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise WorldError(f"{what} must be a name of letters, digits, '.', '_' or '-', got {value!r}")
    return value


def _hex(*parts: Any) -> str:
    return hashlib.sha256(canonical.canonical_json(list(parts))).hexdigest()[:_HEX]


class IdSource:
    """Ids derived from (seed, namespace): the same seed gives the same sequence, per kind."""

    def __init__(self, seed: str, namespace: str) -> None:
        if not isinstance(seed, str) or not seed:
            raise WorldError("the seed must be a non-empty string")
        if not isinstance(namespace, str) or not namespace:
            raise WorldError("the namespace must be a non-empty string")
        self.seed = seed
        self.namespace = namespace
        self._counters: dict[str, int] = {}
        self._prefixes: dict[str, Any] = {}  # kind -> a SHA-256 that has hashed the kind's prefix
        self._links: dict[str, str] = {}

    def next(self, kind: str) -> str:
        prefix = self._prefixes.get(kind)
        if prefix is None:
            if not isinstance(kind, str) or not _KIND_RE.match(kind):
                raise WorldError(f"an id kind must be lowercase letters, digits or '_', got {kind!r}")
            # canonical_json([seed, namespace, kind, n]) without its last "n]": the same bytes _hex would hash,
            # built once per kind (a replay asks for one id per event).
            # (The prefix hashed once per kind; each id copies that state and hashes only "n]".)
            prefix = self._prefixes[kind] = hashlib.sha256(
                canonical.canonical_json([self.seed, self.namespace, kind])[:-1] + b","
            )
        n = self._counters.get(kind, 0)
        self._counters[kind] = n + 1
        state = prefix.copy()
        state.update(b"%d]" % n)
        return f"{kind}-{state.hexdigest()[:_HEX]}"

    def replay_key(self, historical_key: str, world: str) -> str:
        """The idempotency key of a historical effect in the replay world `world`: never the live key."""
        if not isinstance(historical_key, str) or not historical_key:
            raise WorldError("the historical key must be a non-empty string")
        _name(world, "the world")
        prefix = f"{REPLAY_PREFIX}{world}:"
        if historical_key.startswith(prefix):
            raise WorldError(f"{historical_key!r} is already in the namespace {REPLAY_PREFIX}{world}")
        key = prefix + _hex(self.seed, world, historical_key)
        self._links[key] = historical_key
        return key

    def historical_for(self, replay_key: str) -> str | None:
        """The historical key a replay key of this source was derived from (None: not one of ours)."""
        return self._links.get(replay_key)

    def is_replay_of(self, replay_key: str, historical_key: str) -> bool:
        """Whether `replay_key` is this seed's derivation of `historical_key` in the world it names."""
        if not replay_key.startswith(REPLAY_PREFIX):
            return False
        world, sep, digest = replay_key[len(REPLAY_PREFIX) :].rpartition(":")
        if not sep or not _NAME_RE.match(world) or historical_key.startswith(f"{REPLAY_PREFIX}{world}:"):
            return False
        return digest == _hex(self.seed, world, historical_key)


def effect_resource(tool: str, identity: str) -> str:
    """The ledger resource of an accepted effect (see `SimulatedWorld.accept_effect`)."""
    return f"{EFFECT_PREFIX}{tool}:{identity}"


def namespace_for(world: str) -> str:
    """The `effect.intent` namespace of a replay world."""
    return REPLAY_PREFIX + _name(world, "the world")


# --- the world -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Scheduled:
    at: datetime
    order: int
    transition: dict[str, Any]
    cause: str | None


def _transition_dict(transition: Transition | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(transition, Transition):
        data = transition.to_dict()
    elif isinstance(transition, Mapping):
        data = dict(transition)
    else:
        raise WorldError(f"a transition must be an object, got {type(transition).__name__}")
    unknown = sorted(set(data) - {"resource", "revision_before", "revision_after", "change"})
    if unknown:
        raise WorldError(f"transition: unknown key {unknown[0]!r}")
    resource = data.get("resource")
    if not isinstance(resource, str) or not resource:
        raise WorldError("transition.resource must be a non-empty string")
    before, after = data.get("revision_before"), data.get("revision_after")
    for where, value, nullable in (("revision_before", before, True), ("revision_after", after, False)):
        if value is None and nullable:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise WorldError(f"{resource}: transition.{where} must be a non-negative integer, got {value!r}")
    change = data.get("change")
    if not isinstance(change, Mapping) or set(change) != {"op", "state"}:
        raise WorldError(f'{resource}: transition.change must be {{"op", "state"}}, got {change!r}')
    op, state = change["op"], change["state"]
    if op not in OPS:
        raise WorldError(f"{resource}: change.op {op!r} is not one of {', '.join(OPS)}")
    try:
        check_json(state, "change.state")
    except ContractError as exc:
        raise WorldError(f"{resource}: {exc}") from None
    if op == "delete" and state is not None:
        raise WorldError(f"{resource}: a delete carries no state (null), got {state!r}")
    if op != "delete" and state is None:
        raise WorldError(f"{resource}: a {op} needs a state; null is reserved for absent")
    if op == "create" and before is not None:
        raise WorldError(f"{resource}: a create starts from absent (revision_before null), not {before}")
    if op != "create" and before is None:
        raise WorldError(f"{resource}: an {op} starts from a revision, not from absent")
    if before is not None and after <= before:
        raise WorldError(f"{resource}: revision_after {after} does not follow revision_before {before}")
    return {
        "resource": resource,
        "revision_before": before,
        "revision_after": after,
        "change": {"op": op, "state": copy_json(state)},
    }


class SimulatedWorld:
    """Versioned resources {name: (revision, state)}; a `fixtures.WorldView`. See the module docstring."""

    def __init__(
        self,
        name: str,
        revision: int = 0,
        resources: Mapping[str, tuple[int, Any]] | None = None,
        *,
        parent: str | None = None,
    ) -> None:
        self.name = _name(name, "the world")
        if not isinstance(revision, int) or isinstance(revision, bool) or revision < 0:
            raise WorldError(f"the world revision must be a non-negative integer, got {revision!r}")
        self._revision = revision
        self.parent = parent
        self._resources: dict[str, tuple[int, Any]] = {}
        for resource, held in (resources or {}).items():
            if not isinstance(resource, str) or not resource:
                raise WorldError(f"a resource name must be a non-empty string, got {resource!r}")
            rev, state = held
            if not isinstance(rev, int) or isinstance(rev, bool) or rev < 0:
                raise WorldError(f"{resource}: revision must be a non-negative integer, got {rev!r}")
            try:
                check_json(state, f"{resource}.state")
            except ContractError as exc:
                raise WorldError(str(exc)) from None
            if state is None:
                raise WorldError(f"{resource}: a held resource needs a state; null is reserved for absent")
            self._resources[resource] = (rev, copy_json(state))
        # A deleted resource's last revision: a re-create must go past it.
        self._deleted: dict[str, int] = {}
        self._pending: list[_Scheduled] = []
        self._order = 0

    # WorldView
    @property
    def revision(self) -> int:
        return self._revision

    def get(self, resource: str) -> tuple[int, Any] | None:
        held = self._resources.get(resource)
        return None if held is None else (held[0], copy_json(held[1]))

    def resources(self) -> list[str]:
        return sorted(self._resources)

    # changes
    def apply(self, transition: Transition | Mapping[str, Any], cause: str | None) -> dict[str, Any]:
        """Apply one transition; return its `world.transition` body. Refused on any revision mismatch."""
        t = _transition_dict(transition)
        resource, before, after = t["resource"], t["revision_before"], t["revision_after"]
        held = self._resources.get(resource)
        actual = None if held is None else held[0]
        if actual != before:
            expected_s = ABSENT if before is None else before
            actual_s = ABSENT if actual is None else actual
            raise WorldError(
                f"{resource}: the transition expects revision {expected_s}, the world {self.name} holds "
                f"{actual_s} (world revision {self._revision})",
                resource=resource,
                expected=expected_s,
                actual=actual_s,
            )
        floor = self._deleted.get(resource)
        if t["change"]["op"] == "create" and floor is not None and after <= floor:
            raise WorldError(
                f"{resource}: was deleted at revision {floor}; a re-create must go past it, not to {after}",
                resource=resource,
                expected=f">{floor}",
                actual=after,
            )
        if t["change"]["op"] == "delete":
            del self._resources[resource]
            self._deleted[resource] = after
        else:
            self._resources[resource] = (after, copy_json(t["change"]["state"]))
            self._deleted.pop(resource, None)
        self._revision += 1
        return {**t, "cause": cause}

    def accept_effect(self, tool: str, identity: str, state: Any, cause: str | None) -> dict[str, Any] | None:
        """The provider accepts a delivery keyed on `identity`: the ledger resource is created and its
        `world.transition` body returned; None when the ledger already holds the identity (a duplicate)."""
        if not isinstance(identity, str) or not identity:
            raise WorldError("an effect identity must be a non-empty string")
        resource = effect_resource(tool, identity)
        if resource in self._resources:
            return None
        floor = self._deleted.get(resource, 0)
        change = {"op": "create", "state": state}
        return self.apply(
            {"resource": resource, "revision_before": None, "revision_after": floor + 1, "change": change}, cause
        )

    def observe(self, resource: str) -> dict[str, Any]:
        """The `world.observation` body for `resource`: absent (state null) is kept apart from empty."""
        held = self._resources.get(resource)
        if held is None:
            return {
                "resource": resource,
                "world_revision": self._revision,
                "state": None,
                "resource_revision": None,
                "absent": True,
            }
        return {
            "resource": resource,
            "world_revision": self._revision,
            "state": copy_json(held[1]),
            "resource_revision": held[0],
            "absent": False,
        }

    # scenario time
    def schedule(self, at: datetime, transition: Transition | Mapping[str, Any], cause: str | None) -> None:
        """Hold `transition` until scenario time `at` (checked now for shape, at `due` for revisions)."""
        _aware(at, "at")
        t = _transition_dict(transition)
        self._pending.append(_Scheduled(at.astimezone(UTC), self._order, t, cause))
        self._order += 1

    def pending(self) -> list[dict[str, Any]]:
        return [self._pending_dict(s) for s in sorted(self._pending, key=lambda s: (s.at, s.order))]

    def due(self, now: datetime) -> list[dict[str, Any]]:
        """Apply every scheduled transition due at `now`, in (time, insertion) order; all or nothing."""
        _aware(now, "now")
        ready = sorted((s for s in self._pending if s.at <= now), key=lambda s: (s.at, s.order))
        if not ready:
            return []
        saved = (self._revision, dict(self._resources), dict(self._deleted))
        events = []
        try:
            for entry in ready:
                events.append(self.apply(entry.transition, entry.cause))
        except WorldError as exc:
            self._revision, self._resources, self._deleted = saved
            raise WorldError(
                f"scheduled at {iso(entry.at)}: {exc}",
                resource=exc.resource,
                expected=exc.expected,
                actual=exc.actual,
            ) from None
        done = {id(s) for s in ready}
        self._pending = [s for s in self._pending if id(s) not in done]
        return events

    # snapshots and branches
    def snapshot(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "name": self.name,
            "parent": self.parent,
            "revision": self._revision,
            "resources": {
                r: {"revision": rev, "state": copy_json(state)} for r, (rev, state) in sorted(self._resources.items())
            },
            "deleted": dict(sorted(self._deleted.items())),
            "pending": self.pending(),
        }

    def digest(self) -> str:
        return canonical.digest_json(self.snapshot())

    @classmethod
    def from_snapshot(cls, data: Any) -> SimulatedWorld:
        if not isinstance(data, Mapping) or data.get("format") != SNAPSHOT_FORMAT:
            raise WorldError(f"not a world snapshot ({SNAPSHOT_FORMAT})")
        unknown = sorted(set(data) - {"format", "name", "parent", "revision", "resources", "deleted", "pending"})
        if unknown:
            raise WorldError(f"snapshot: unknown key {unknown[0]!r}")
        resources = data.get("resources")
        if not isinstance(resources, Mapping):
            raise WorldError("snapshot.resources must be an object")
        held: dict[str, tuple[int, Any]] = {}
        for r, entry in resources.items():
            if not isinstance(entry, Mapping) or set(entry) != {"revision", "state"}:
                raise WorldError(f"snapshot.resources.{r} must be {{revision, state}}")
            held[r] = (entry["revision"], entry["state"])
        parent = data.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise WorldError("snapshot.parent must be a world name or null")
        world = cls(data.get("name"), data.get("revision"), held, parent=parent)  # type: ignore[arg-type]
        deleted = data.get("deleted", {})
        if not isinstance(deleted, Mapping) or any(
            not isinstance(v, int) or isinstance(v, bool) or r in held for r, v in deleted.items()
        ):
            raise WorldError("snapshot.deleted must map resources not held to their last revision")
        world._deleted = dict(deleted)
        pending = data.get("pending", [])
        if not isinstance(pending, list):
            raise WorldError("snapshot.pending must be a list")
        for i, entry in enumerate(pending):
            if not isinstance(entry, Mapping) or set(entry) != {"at", "transition", "cause"}:
                raise WorldError(f"snapshot.pending[{i}] must be {{at, transition, cause}}")
            try:
                at = parse_time(entry["at"])
            except (TypeError, ValueError) as exc:
                raise WorldError(f"snapshot.pending[{i}].at: {exc}") from None
            world.schedule(at, entry["transition"], entry["cause"])
        return world

    def child(self, name: str) -> SimulatedWorld:
        """A counterfactual branch: the same state and schedule, mutations that never reach this world."""
        if name == self.name:
            raise WorldError(f"a child world needs a name of its own, not {name!r}")
        snap = self.snapshot()
        snap["name"], snap["parent"] = name, self.name
        return SimulatedWorld.from_snapshot(snap)

    def _pending_dict(self, s: _Scheduled) -> dict[str, Any]:
        return {"at": iso(s.at), "transition": copy_json(s.transition), "cause": s.cause}

    def __repr__(self) -> str:
        return f"SimulatedWorld({self.name!r}, revision={self._revision}, resources={len(self._resources)})"


# --- synthetic tokens (issue 19) ---------------------------------------------------------------------------------

SYNTHETIC_TOKEN_PREFIX = "n17q-synthetic-token."
# The whole token, exactly (what `synthetic_token` makes): the secret scan does not take it for a credential even under
# a secret-named key (n17q_secrets.field_classes), and, matched whole, nothing real can hide behind its prefix.
SYNTHETIC_TOKEN = re.compile(rf"{re.escape(SYNTHETIC_TOKEN_PREFIX)}[A-Za-z0-9][A-Za-z0-9._-]*\.[0-9a-f]{{{_HEX}}}")


def synthetic_token(seed: str, basis: str, grant: str) -> str:
    """The synthetic token the fixture world issues to one replay for one grant (seed 000 "Credentials never
    entered replay artifacts"). Derived from the scenario seed, the replay's branch basis (`package.branch_basis`:
    the recorded run, the branch point, what the replay varies) and the grant, never from the replay's own id: two
    replays of one branch get the same token (an agent that is handed it asks the same model requests), replays of
    different branches or variations different ones; it authorizes nothing outside the replay's fixture world.

    Its shape is deliberately no provider's: a fixed prefix that says what it is, the grant's name, and hex. It has
    none of the markers secret scanners key on (`ghp_`, `sk-`, `xox`, `AKIA`, a JWT's `eyJ`, a PEM block), so no
    scanner mistakes it for a real credential, and nothing real can be mistaken for it. Events record only its
    fingerprint (`token_fingerprint`) beside the grant's scope: the trace keeps who was authorized for what, not
    the material."""
    _name(grant, "the grant")
    return f"{SYNTHETIC_TOKEN_PREFIX}{grant}.{_hex(seed, basis, 'grant', grant)}"
