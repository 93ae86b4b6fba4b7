"""Contract migration: fixtures of one contract revision rewritten for a newer one (seed 000, "When a tool
contract changed…"; docs/contract-migration.md).

A contract revision declares how fixtures of earlier revisions become its own (`Contract.migrations_from`,
checked in `contracts.py`): a list of operations from a small reviewed set, data only, never code.

- `rename_field {from, to}`, `add_field {field, value}`, `drop_field {field}`: the normalized request;
- `move {from, to}`: a value of the response body (dotted object keys), and the absences recorded under it;
- `map_outcome {from, to}`: an outcome the new revision reports as another. It changes what the simulated
  service says, so it is always meaning-bearing.

Any operation may be marked `"meaning_bearing": true` by the contract's author. `migrate_fixtures` applies the
path of declarations from the pinned revision to the target, fixture by fixture, and sorts each result:

- **structural**: only structural operations changed it, it loads under the target revision as it is (its
  request already normalized there: a canonicalization the new revision added is *not* applied silently) and
  no other migrated fixture takes its key. It becomes a new fixture revision whose provenance keeps the fixture
  it came from, that fixture's digest, the **original payload digest** (of the payload as first recorded,
  carried unchanged through any number of migrations) and the operations applied.
- **meaning-bearing**: anything else, each with its reasons (which operation, which check). Nothing here
  decides for a person: the caller stages these for review.

Pure functions over JSON values; nothing here reads a database or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import canonical
from .contracts import Contract, copy_json
from .fixtures import Fixture, FixtureError

# Operations that never change meaning unless the contract marks them so (`map_outcome` always does).
STRUCTURAL_OPERATIONS = ("rename_field", "add_field", "drop_field", "move")


class MigrationError(ValueError):
    """No migration can be made: no declared path, a target not newer, a declaration that does not fit."""


@dataclass(frozen=True)
class Step:
    """One declared hop: the operations `to_revision` declares for fixtures of `from_revision`."""

    from_revision: int
    to_revision: int
    operations: tuple[Mapping[str, Any], ...]


def describe(op: Mapping[str, Any]) -> str:
    """One operation in words, for reasons and review pages: `rename_field query → q`."""
    kind = op["op"]
    if kind == "add_field":
        return f"add_field {op['field']} = {canonical.canonical_json(op['value']).decode()}"
    if kind == "drop_field":
        return f"drop_field {op['field']}"
    return f"{kind} {op['from']} → {op['to']}"


def migration_path(revisions: Mapping[int, Contract], start: int, target: int) -> list[Step]:
    """The declared steps from revision `start` to `target` of one tool (the fewest; on a tie, through the higher
    revisions). `revisions` holds every known revision of the tool, `start` and `target` among them.

    Each declaration is checked against its source revision here (the contract checked it against its own):
    a renamed or dropped field must exist there, an added one must not; and a hop may not change what the
    tool is (effect class, what a call leaves): that is a new tool, recaptured, not migrated."""
    if target <= start:
        raise MigrationError(f"revision {target} is not newer than the pinned revision {start}")
    if start not in revisions:
        raise MigrationError(f"revision {start} is not known")
    if target not in revisions:
        raise MigrationError(f"no revision {target} is declared")
    tool = revisions[target].tool
    # Breadth-first from the target back through what each revision declares it migrates from.
    frontier, came_from = [target], {target: target}
    while frontier and start not in came_from:
        following = []
        for rev in frontier:
            contract = revisions.get(rev)
            if contract is None:
                continue
            for source in sorted(contract.migrations_from, reverse=True):
                if source not in came_from and source >= start:
                    came_from[source] = rev
                    following.append(source)
        frontier = following
    if start not in came_from:
        declared = {rev: sorted(c.migrations_from) for rev, c in sorted(revisions.items()) if c.migrations_from}
        listed = "; ".join(f"{rev} from {', '.join(map(str, src))}" for rev, src in declared.items()) or "none"
        raise MigrationError(
            f"no declared path from {tool} revision {start} to {target} (revisions declaring migrations: {listed})"
        )
    steps, rev = [], start
    while rev != target:
        nxt = came_from[rev]
        origin, dest = revisions.get(rev), revisions[nxt]
        if origin is None:
            raise MigrationError(f"{tool} revision {rev} is named on the path but not known")
        _check_step(origin, dest)
        steps.append(Step(rev, nxt, tuple(dest.migrations_from[rev])))
        rev = nxt
    return steps


def _check_step(source: Contract, dest: Contract) -> None:
    where = f"{dest.tool} revision {dest.revision} (from {source.revision})"
    if source.effect_class != dest.effect_class:
        raise MigrationError(
            f"{where} changes the effect class ({source.effect_class} → {dest.effect_class}): recapture, not migration"
        )
    if source.produces != dest.produces:
        raise MigrationError(f"{where} changes what a call leaves ({source.produces} → {dest.produces}): recapture")
    for op in dest.migrations_from[source.revision]:
        kind = op["op"]
        if kind == "rename_field" and op["from"] not in source.fields:
            raise MigrationError(f"{where}: rename_field from {op['from']!r}, which revision {source.revision} lacks")
        if kind == "drop_field" and op["field"] not in source.fields:
            raise MigrationError(f"{where}: drop_field {op['field']!r}, which revision {source.revision} lacks")
        if kind == "add_field" and op["field"] in source.fields:
            raise MigrationError(f"{where}: add_field {op['field']!r}, which revision {source.revision} already has")


def payload_digest(fixture: Mapping[str, Any]) -> str:
    """The digest of what a fixture recorded: its request, response and world transition, with the format's
    defaults spelled out (a fixture written without `absent` records the same as one with `absent: {}`).
    A migrated fixture carries its first ancestor's, so the original recording stays identifiable."""
    migrated = (fixture.get("provenance") or {}).get("migrated_from")
    if isinstance(migrated, Mapping) and canonical.is_digest(migrated.get("payload_digest")):
        return str(migrated["payload_digest"])
    response = fixture.get("response") or {}
    return canonical.digest_json(
        {
            "request": fixture.get("request"),
            "response": {
                "outcome": response.get("outcome"),
                "body": response.get("body"),
                "absent": response.get("absent") or {},
            },
            "transition": fixture.get("transition"),
        }
    )


def fixture_digest(fixture: Mapping[str, Any]) -> str:
    return canonical.digest_json(dict(fixture))


@dataclass
class Migrated:
    """One fixture's migration: the new fixture (without an id: the caller derives it from the content), the
    operations that changed it, and why it needs review (empty: structural)."""

    source_id: str
    fixture: dict[str, Any]
    applied: list[dict[str, Any]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def structural(self) -> bool:
        return not self.reasons


def migrate_fixture(fixture: Mapping[str, Any], steps: Sequence[Step], target: Contract) -> Migrated:
    """`fixture` (a package's fixture dict under the path's first revision) rewritten by `steps` for `target`."""
    fid = str(fixture.get("id") or "")
    request = copy_json(dict(fixture.get("request") or {}))
    response = copy_json(dict(fixture.get("response") or {}))
    response.setdefault("absent", {})
    out = Migrated(source_id=fid, fixture={})
    for step in steps:
        for op in step.operations:
            changed, problem = _apply(op, request, response)
            if problem:
                out.reasons.append(f"{describe(op)} (revision {step.to_revision}): {problem}")
            if not changed:
                continue
            out.applied.append({"revision": step.to_revision, **copy_json(dict(op))})
            if op["op"] not in STRUCTURAL_OPERATIONS:
                out.reasons.append(f"{describe(op)} (revision {step.to_revision}) changes what the service says")
            elif op.get("meaning_bearing"):
                out.reasons.append(
                    f"{describe(op)} is marked meaning-bearing by {target.tool} revision {step.to_revision}"
                )
    provenance = copy_json(dict(fixture.get("provenance") or {}))
    provenance["migrated_from"] = {
        "fixture": fid,
        "fixture_digest": fixture_digest(fixture),
        "contract_revision": fixture.get("contract_revision"),
        "payload_digest": payload_digest(fixture),
        "operations": out.applied,
    }
    new: dict[str, Any] = {
        "tool": target.tool,
        "contract_revision": target.revision,
        "request": request,
        "request_digest": canonical.request_digest(request),
        "response": response,
        "provenance": provenance,
    }
    for key in ("condition", "transition", "fault_stage"):
        if fixture.get(key) is not None:
            new[key] = copy_json(fixture[key])
    out.fixture = new
    # The contract tests of the new revision, as any fixture of it passes them. A request that is not already
    # normalized under the target (a default or canonicalization the old revision did not have) fails here:
    # normalizing it now would change the fixture key without anyone having said so.
    try:
        Fixture.from_dict({**new, "id": fid or "migrating"}, target)
    except FixtureError as exc:
        message = str(exc).split(": ", 1)[-1]
        out.reasons.append(f"does not hold under {target.tool} revision {target.revision}: {message}")
    return out


def migrate_fixtures(fixtures: Iterable[Mapping[str, Any]], steps: Sequence[Step], target: Contract) -> list[Migrated]:
    """Every fixture migrated; two that come out with one key and one world condition both need review (the
    operations merged two recorded answers into one question: which answer stands is a person's decision)."""
    results = [migrate_fixture(f, steps, target) for f in fixtures]
    by_key: dict[str, list[Migrated]] = {}
    for result in results:
        f = result.fixture
        key = canonical.canonical_json([f["request_digest"], f.get("condition") or None]).decode()
        by_key.setdefault(key, []).append(result)
    for group in by_key.values():
        if len(group) > 1:
            ids = ", ".join(r.source_id for r in group)
            for result in group:
                result.reasons.append(f"fixtures {ids} become the same request in the same world condition")
    return results


def _apply(op: Mapping[str, Any], request: dict[str, Any], response: dict[str, Any]) -> tuple[bool, str | None]:
    """Apply one operation in place: (whether it changed anything, a problem that stops it being structural)."""
    kind = op["op"]
    if kind == "rename_field":
        if op["from"] not in request:
            return False, None
        if op["to"] in request:
            return False, f"the request already holds {op['to']!r}"
        request[op["to"]] = request.pop(op["from"])
        return True, None
    if kind == "add_field":
        if op["field"] in request:
            return False, None
        request[op["field"]] = copy_json(op["value"])
        return True, None
    if kind == "drop_field":
        if op["field"] not in request:
            return False, None
        del request[op["field"]]
        return True, None
    if kind == "move":
        return _move(response, op["from"], op["to"])
    if kind == "map_outcome":
        if response.get("outcome") != op["from"]:
            return False, None
        response["outcome"] = op["to"]
        return True, None
    raise MigrationError(f"unknown operation {kind!r}")  # contracts.py admits none other


def _move(response: dict[str, Any], source: str, dest: str) -> tuple[bool, str | None]:
    body: Any = response.get("body")
    src_parts, dest_parts = source.split("."), dest.split(".")
    node = body
    for part in src_parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict) or src_parts[-1] not in node:
        return False, None  # this body does not hold the value (an error body, say): nothing to move
    # Look before writing: a move that cannot be made leaves the body as it was.
    probe: Any = body
    for part in dest_parts:
        if not isinstance(probe, dict):
            return False, f"{dest}: the body holds a non-object on the way"
        if part not in probe:
            break
        probe = probe[part]
    else:
        return False, f"{dest}: the body already holds a value there"
    value = node.pop(src_parts[-1])
    target: Any = body
    for part in dest_parts[:-1]:
        target = target.setdefault(part, {})
    target[dest_parts[-1]] = value
    # What the response does not hold moves with it: a redaction under the old path is one under the new.
    absent = response.get("absent") or {}
    response["absent"] = {_moved_path(path, source, dest): kind for path, kind in absent.items()}
    return True, None


def _moved_path(path: str, source: str, dest: str) -> str:
    if path == source:
        return dest
    for sep in (".", "["):
        if path.startswith(source + sep):
            return dest + path[len(source) :]
    return path
