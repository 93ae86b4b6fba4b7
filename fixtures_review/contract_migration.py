"""Contract migration (seed 000, "When a tool contract changed…"; docs/contract-migration.md).

`contract_declare` stores a tool contract revision (with the migrations it declares from earlier revisions) as an
immutable `ContractRevision`. `fixtures_migrate` moves one scenario version's fixtures of one tool to a newer
declared revision:

- the declared path of operations is applied by the engine (`n17q_engine.contract_migration`, pure);
- structural results become new fixture revisions (provenance: the fixture they came from, its digest, the original
  payload digest, the operations) in a **new scenario version**, which pins the new contract;
- results whose change carries meaning are not minted: each is staged as a recording (origin `contract-migration`)
  through the same intake and four-eyes review as a capture, and the new version lists it as uncovered until a
  reviewer approves it;
- the version migrated is untouched (versions are immutable), so every replay pinned to it stays pinned to it.

Refusals (`MigrationRefused`, one line) come before anything is written: an unknown version, a target that is not
newer, no declared path, a version that is not the latest of its scenario, a migration already made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from n17q_engine import canonical
from n17q_engine.contract_migration import (
    Migrated,
    MigrationError,
    Step,
    describe,
    fixture_digest,
    migrate_fixtures,
    migration_path,
)
from n17q_engine.contracts import Contract, ContractError
from n17q_engine.identifiers import id_problem
from n17q_engine.package import PackageError

from . import intake
from .approval import fixture_by_digest, promotion_blockers
from .fixture_checks import fixture_id_for
from .minting import _lock_scenario, scenario_files_mint
from .models import ContractRevision, ScenarioVersion, StagedRecording
from .retention import FixtureBodyRefused, fixture_body_hold, fixture_body_live_hold, fixture_body_put
from .review_rules import _OUTCOME_STATUS
from .scenarios import (
    ScenarioRefused,
    loaded_scenario,
    scenario_bodies,
    scenario_package,
    scenario_resolve,
    source_expired_sentence,
)
from .staging import _audit, _remove_blobs, _stage, capture_digest_key

SOURCE = "migration"  # ScenarioVersion.source of a version a contract migration minted


class MigrationRefused(ValueError):
    """A migration or declaration that cannot be made; one line naming what is wrong. `field` names the input."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


# --- declaring contract revisions ----------------------------------------------------------------------------------


def contract_declare(*, contract: Any, user: Any = None) -> tuple[ContractRevision, bool]:
    """Store a contract revision. The same content again: the stored one. Other content under a held revision is
    refused: a revision number means one contract for good (declare the next revision instead)."""
    try:
        parsed = Contract.from_dict(contract)
    except ContractError as exc:
        raise MigrationRefused(f"contract: {exc}") from None
    problem = id_problem(parsed.tool, what="a tool name")
    if problem is not None:
        raise MigrationRefused(f"contract: tool {problem}")
    body = parsed.to_dict()
    digest = canonical.digest_json(body)
    held = ContractRevision.objects.filter(tool=parsed.tool, revision=parsed.revision).first()
    if held is not None:
        if held.digest == digest:
            return held, False
        raise MigrationRefused(
            f"{parsed.tool} revision {parsed.revision} is already declared with digest {held.digest}; a revision "
            f"never changes (this one is {digest}): declare revision {parsed.revision + 1} instead"
        )
    actor = user if getattr(user, "is_authenticated", False) else None
    with transaction.atomic():
        revision = ContractRevision.objects.create(
            tool=parsed.tool, revision=parsed.revision, digest=digest, contract=body, declared_by=actor
        )
        _audit(actor, "contract.declare", f"contract:{parsed.tool}@{parsed.revision}", {"digest": digest})
    return revision, True


# --- migrating a scenario version ------------------------------------------------------------------------------------


@dataclass
class MigrationResult:
    scenario: ScenarioVersion  # the version minted
    based_on: ScenarioVersion
    tool: str
    from_revision: int
    to_revision: int
    steps: list[Step]
    migrated: list[tuple[Migrated, str]] = field(default_factory=list)  # (result, the new fixture's id)
    staged: list[tuple[Migrated, StagedRecording]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.ref,
            "based_on": self.based_on.ref,
            "tool": self.tool,
            "from_revision": self.from_revision,
            "to_revision": self.to_revision,
            "path": [self.from_revision, *(s.to_revision for s in self.steps)],
            "migrated": [
                {
                    "fixture": new_id,
                    "from": m.source_id,
                    "payload_digest": m.fixture["provenance"]["migrated_from"]["payload_digest"],
                    "operations": [describe(op) for op in m.applied],
                }
                for m, new_id in self.migrated
            ],
            "staged": [
                {
                    "staged": rec.public_id,
                    "from": m.source_id,
                    "reasons": m.reasons,
                    "blockers": promotion_blockers(rec),
                }
                for m, rec in self.staged
            ],
        }


def contract_revisions(tool: str) -> dict[int, Contract]:
    """Every declared revision of `tool`, checked again as it is read (a stored row is data, not trust)."""
    out = {}
    for row in ContractRevision.objects.filter(tool=tool).order_by("revision"):
        try:
            out[row.revision] = Contract.from_dict(row.contract)
        except ContractError as exc:
            raise MigrationRefused(f"declared {tool} revision {row.revision} no longer loads: {exc}") from None
    return out


def fixtures_migrate(*, ref: str, to_revision: int, tool: str | None = None, user: Any = None) -> MigrationResult:
    """Migrate the fixtures of `tool` in scenario version `ref` (NAME@VERSION) to contract revision `to_revision`:
    a new scenario version with the structural results, the rest staged for review. All or nothing."""
    try:
        base = scenario_resolve(ref)
        scenario = loaded_scenario(base)
    except (ScenarioRefused, PackageError) as exc:
        raise MigrationRefused(str(exc), "scenario") from None
    if not isinstance(to_revision, int) or isinstance(to_revision, bool) or to_revision < 1:
        raise MigrationRefused(f"the target revision must be a positive integer, got {to_revision!r}", "to_revision")
    tool = _tool(base, scenario.contracts, to_revision, tool)
    pinned = scenario.contracts.get(tool)
    revisions = contract_revisions(tool)
    revisions[pinned.revision] = pinned  # the version's own copy of the revision it pins is the one migrated from
    try:
        steps = migration_path(revisions, pinned.revision, to_revision)
    except MigrationError as exc:
        raise MigrationRefused(f"{base.ref}: {tool}: {exc}", "to_revision") from None
    target = revisions[to_revision]
    files = {name: json.loads(text) for name, text in scenario_package(base).files.items()}
    _check_routes(files["scenario.json"], tool, steps)

    tool_fixtures = [f for f in files["fixtures.json"] if f.get("tool") == tool]
    # Bodies held by digest (seed 001) are migrated as the bodies they name, read through the one resolver; a body
    # the sweep removed is source material expired, and a migration never carries it as an empty one.
    results = migrate_fixtures(_bodies_inline(base, tool_fixtures), steps, target)
    rehold: dict[int, tuple[Any, str]] = {}  # id(Migrated) -> (its migrated body, the source's body digest)
    sources: dict[str, str] = {}  # source fixture id -> its body digest
    for source, m in zip(tool_fixtures, results, strict=True):
        source_digest = (source.get("response") or {}).get("body_digest")
        if not source_digest:
            continue
        sources[m.source_id] = source_digest
        # The fixture it came from is the one the version holds (by digest), not the inline copy migrated.
        m.fixture["provenance"]["migrated_from"]["fixture_digest"] = fixture_digest(source)
        if m.structural and m.fixture["response"].get("body") is not None:
            rehold[id(m)] = (m.fixture["response"]["body"], source_digest)
            m.fixture = {k: v for k, v in fixture_by_digest(m.fixture).items() if k != "id"}
    migrated = [(m, fixture_id_for(m.fixture)) for m in results if m.structural]
    for_review = [m for m in results if not m.structural]
    files["contracts.json"] = [target.to_dict() if c.get("tool") == tool else c for c in files["contracts.json"]]
    files["fixtures.json"] = [f for f in files["fixtures.json"] if f.get("tool") != tool] + [
        {"id": new_id, **m.fixture} for m, new_id in migrated
    ]
    meta = files["scenario.json"]
    # A fault pinned to one request follows the request to its new key (a staged fixture's key is the one its
    # migration proposes: a reviewer who changes the arguments changes it again).
    renamed = {
        canonical.request_digest(f.get("request")): m.fixture["request_digest"]
        for f, m in zip(tool_fixtures, results, strict=True)
    }
    for fault in meta.get("faults", []):
        if fault.get("tool") == tool and fault.get("request_digest") in renamed:
            fault["request_digest"] = renamed[fault["request_digest"]]
    meta["uncovered"] = [
        *meta.get("uncovered", []),
        *(
            f"{tool}: fixture {m.source_id} awaits review after the migration to revision {to_revision} "
            f"({'; '.join(m.reasons)})"
            for m in for_review
        ),
    ]
    meta["contract_migrations"] = [
        *meta.get("contract_migrations", []),
        {
            "tool": tool,
            "from_revision": pinned.revision,
            "to_revision": to_revision,
            "based_on": {"name": base.name, "version": base.version},
            "migrated": [new_id for _m, new_id in migrated],
            "for_review": [m.source_id for m in for_review],
        },
    ]

    declared_by = (
        ContractRevision.objects.filter(tool=tool, revision=to_revision).values_list("declared_by", flat=True).first()
    )
    actor = user if getattr(user, "is_authenticated", False) else None
    written: list[str] = []
    try:
        return _migrate_stored(base, tool, pinned.revision, to_revision, steps, target, files, migrated, for_review,
                               rehold, sources, actor, declared_by, written)  # fmt: skip
    except BaseException:
        _remove_blobs(written)  # bodies this attempt stored and nothing holds: not left in the store unheld
        raise


def _migrate_stored(
    base: ScenarioVersion,
    tool: str,
    from_revision: int,
    to_revision: int,
    steps: list[Step],
    target: Contract,
    files: dict[str, Any],
    migrated: list[tuple[Migrated, str]],
    for_review: list[Migrated],
    rehold: dict[int, tuple[Any, str]],
    sources: dict[str, str],
    actor: Any,
    declared_by: int | None,
    written: list[str],
) -> MigrationResult:
    with transaction.atomic():
        _lock_scenario(base.name)
        _refuse_if_not_latest_or_done(base, tool, to_revision)
        for m, new_id in migrated:
            if id(m) in rehold:
                _hold_migrated_body(new_id, *rehold[id(m)], written=written)
        try:
            minted = scenario_files_mint(base=base, files=files, user=actor, source=SOURCE, _locked=True)
        except ScenarioRefused as exc:
            raise MigrationRefused(f"{base.ref}: the migrated version would not load: {exc}", "to_revision") from None
        result = MigrationResult(minted, base, tool, from_revision, to_revision, steps, migrated)
        for m in for_review:
            staged = _stage_for_review(m, base, minted, target, actor, declared_by, sources.get(m.source_id))
            result.staged.append((m, staged))
        _audit(
            actor,
            "scenario.migrate",
            f"scenario:{minted.ref}",
            {
                "based_on": base.ref,
                "tool": tool,
                "from_revision": from_revision,
                "to_revision": to_revision,
                "migrated": len(migrated),
                "staged": [rec.public_id for _m, rec in result.staged],
            },
        )
    return result


def _bodies_inline(base: ScenarioVersion, fixtures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`fixtures` with each body held by digest read back inline (`scenario_bodies`), for the engine to migrate.
    A body whose hold ended is refused, naming the fixture and its deletion record."""
    bodies = scenario_bodies(base)
    out = []
    for f in fixtures:
        held = bodies.body(f)
        if held.digest is None:
            out.append(f)
            continue
        if held.expiry is not None:
            raise MigrationRefused(
                f"{base.ref}: {source_expired_sentence(str(f.get('id')), held.digest, held.expiry)}: a migration "
                "cannot carry a body that is gone (capture it again, or exclude the tool)",
                "scenario",
            )
        response = {k: v for k, v in f["response"].items() if k != "body_digest"}
        out.append({**f, "response": {"outcome": response.pop("outcome"), "body": held.value, **response}})
    return out


def _hold_migrated_body(fixture_id: str, body: Any, source_digest: str, *, written: list[str]) -> None:
    """A migrated fixture's body, stored by digest under the hold its source's body had (class, clock): a migration
    never extends how long material is kept. The same body again needs no hold of its own: the source's holds it."""
    try:
        digest, size, name = fixture_body_put(body, where=f"fixture {fixture_id} response.body")
    except FixtureBodyRefused as exc:
        raise MigrationRefused(str(exc), "scenario") from None
    written.extend([name] if name else [])
    if digest == source_digest:
        return
    source = fixture_body_live_hold(source_digest)
    if source is None:
        raise MigrationRefused(f"fixture {fixture_id}: its source body {source_digest} is no longer held", "scenario")
    fixture_body_hold(
        digest=digest,
        size=size,
        fixture_id=fixture_id,
        retention_class=source.retention_class,
        recorded_at=source.recorded_at,
        expires_at=source.expires_at,
    )


def _tool(base: ScenarioVersion, contracts: Any, to_revision: int, tool: str | None) -> str:
    if tool is not None:
        if tool not in contracts:
            pinned = ", ".join(sorted(c.tool for c in contracts)) or "none"
            raise MigrationRefused(f"{base.ref} pins no contract for {tool!r} (it pins: {pinned})", "tool")
        return tool
    candidates = sorted(
        t
        for t in ContractRevision.objects.filter(revision=to_revision).values_list("tool", flat=True)
        if t in contracts
    )
    if not candidates:
        pinned = ", ".join(sorted(c.tool for c in contracts)) or "none"
        raise MigrationRefused(
            f"no revision {to_revision} is declared for any tool {base.ref} pins ({pinned}): declare the contract "
            "revision first (declare_contract)",
            "to_revision",
        )
    if len(candidates) > 1:
        raise MigrationRefused(
            f"revision {to_revision} is declared for several tools {base.ref} pins ({', '.join(candidates)}): "
            "name the tool",
            "tool",
        )
    return candidates[0]


def _check_routes(meta: dict[str, Any], tool: str, steps: list[Step]) -> None:
    """An effect route passes named arguments to its status read; a field the path renames or drops would leave
    the route naming nothing. Refused: that is a change to the scenario, not to fixtures."""
    changed: set[str] = {
        str(op["from"] if op["op"] == "rename_field" else op["field"])
        for step in steps
        for op in step.operations
        if op["op"] in ("rename_field", "drop_field")
    }
    for route in meta.get("effects", []):
        if tool in (route.get("tool"), route.get("status_tool")):
            hit = sorted(changed & set(route.get("status_args", [])))
            if hit:
                raise MigrationRefused(
                    f"the effect route for {route.get('destination_prefix')} passes {hit[0]!r} to its status read, "
                    "and the migration renames or drops it: change the scenario's routes by hand",
                    "to_revision",
                )


def _refuse_if_not_latest_or_done(base: ScenarioVersion, tool: str, to_revision: int) -> None:
    """Checked under the scenario's mint lock, so two migrations of one version cannot both pass."""
    latest = ScenarioVersion.objects.filter(name=base.name).order_by("-version").first()
    for done in ScenarioVersion.objects.filter(based_on=base, source=SOURCE).order_by("version"):
        for record in done.scenario_json.get("contract_migrations", []):
            if record.get("tool") == tool and record.get("to_revision") == to_revision:
                raise MigrationRefused(
                    f"{base.ref} was already migrated to {tool} revision {to_revision}: {done.ref}", "to_revision"
                )
    if latest is not None and latest.pk != base.pk:
        # Minting from an older version would make a latest version without the fixtures added since.
        raise MigrationRefused(
            f"{base.ref} is not the latest version of {base.name} ({latest.ref} is): migrate the latest", "scenario"
        )


def _stage_for_review(
    m: Migrated,
    base: ScenarioVersion,
    minted: ScenarioVersion,
    target: Contract,
    actor: Any,
    declared_by: int | None,
    source_body: str | None = None,
) -> StagedRecording:
    """A meaning-bearing result as a recording: through intake (redaction, secret scan) like any capture, keyed
    under the new revision; what a capture cannot hold rides in `migration`, which the fixture is built from. A body
    its source held by digest keeps the source's class (and, recorded at the source's `recorded_at`, its clock)."""
    f = m.fixture
    provenance = f["provenance"]
    response = f["response"]
    capture = intake.tool_call_capture(
        scenario=base.name,
        tool=f["tool"],
        contract_revision=f["contract_revision"],
        connection=provenance.get("connection") or SOURCE,
        captured_at=provenance["recorded_at"],
        source_revision=provenance.get("source_revision"),
        effect_class=target.effect_class,
        args=f["request"],
        # A fixture holds no HTTP status; this one stands for its outcome, which the recording keeps as it is.
        status=_OUTCOME_STATUS.get(response["outcome"], 500),
        body=response.get("body"),
        proposed_transition=f.get("transition"),
    )
    hold = fixture_body_live_hold(source_body) if source_body else None
    if hold is not None and hold.retention_class in settings.N17Q_RETENTION_CLASSES:
        capture["retention"] = hold.retention_class
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
    except intake.CaptureError as exc:
        raise MigrationRefused(f"fixture {m.source_id} cannot be staged for review: {exc}") from None
    recording = _stage(
        red,
        origin=StagedRecording.Origin.CONTRACT_MIGRATION,
        actor=actor,
        token=None,
        outcome=response["outcome"],
        synthetic=bool(provenance.get("synthetic")),
        fidelity_note=provenance.get("fidelity_note") or "",
    )
    excluded = sorted({int(pk) for pk in [*recording.excluded_approvers, declared_by] if pk is not None})
    migration = {
        "scenario": base.ref,
        "minted": minted.ref,
        "fixture": m.source_id,
        "from_revision": provenance["migrated_from"]["contract_revision"],
        "to_revision": f["contract_revision"],
        "operations": m.applied,
        "reasons": m.reasons,
        "condition": f.get("condition"),
        "absent": response.get("absent") or {},
        "fault_stage": f.get("fault_stage"),
        "migrated_from": provenance["migrated_from"],
        "declared_by": declared_by,
    }
    StagedRecording.objects.filter(pk=recording.pk).update(migration=migration, excluded_approvers=excluded)
    recording.refresh_from_db()
    return recording
